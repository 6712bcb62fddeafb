/* standard: top-k, min-p and top-p over the candidates the host cut after
 * penalties, logit bias and temperature, then one draw (stream 0). The same
 * algorithm as the native reference in host/sampling's tests. */
#include "kvhost_sampler.h"

static double w[1024];

static int row(kvhost_row *r) {
	int n = r->n;
	int top_k = (int)r->params[0];
	float top_p = r->params[1], min_p = r->params[2];
	if (top_k > 0 && top_k < n) n = top_k;
	if (min_p > 0) {
		float cut = r->logprobs[0] + logf(min_p);
		int m = 1;
		while (m < n && r->logprobs[m] >= cut) m++;
		n = m;
	}
	double sum = 0;
	for (int i = 0; i < n; i++) {
		w[i] = kvhost_exp((double)r->logprobs[i]);
		sum += w[i];
	}
	if (top_p > 0 && top_p < 1) {
		double acc = 0;
		for (int i = 0; i < n; i++) {
			acc += w[i];
			if (acc >= (double)top_p * sum) {
				n = i + 1;
				sum = acc;
				break;
			}
		}
	}
	int i = kvhost_pick(w, n, sum, kvhost_rand(r->seed, r->step, 0));
	r->out_id = r->ids[i];
	r->out_logprob = (float)log(w[i] / sum);
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"standard\",\"version\":\"1.0.0\","
               "\"candidates\":64,\"argmax_invariant\":false,"
               "\"preops\":[\"penalties\",\"bias\",\"temperature\"],"
               "\"params\":[{\"name\":\"top_k\",\"type\":\"int\",\"min\":0,\"max\":1024,\"default\":0},"
               "{\"name\":\"top_p\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":1},"
               "{\"name\":\"min_p\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":0}]}",
               3, 0, 0, row)
