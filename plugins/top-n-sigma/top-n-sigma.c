/* top-n-sigma (Tang et al. 2024): keep the candidates whose logit is within
 * n standard deviations of the best, then softmax and one draw (stream 0).
 * The mean and deviation are taken over the K = 256 candidates the host
 * passes (after penalties, bias and temperature), not the whole vocabulary. */
#include "kvhost_sampler.h"

static double w[256];

static int row(kvhost_row *r) {
	float nsig = r->params[0];
	int n = r->n;
	double mean = 0, var = 0;
	for (int i = 0; i < n; i++) mean += r->logits[i];
	mean /= n;
	for (int i = 0; i < n; i++) {
		double d = r->logits[i] - mean;
		var += d * d;
	}
	double cut = (double)r->logits[0] - nsig * sqrt(var / n);
	int m = 1;
	while (m < n && (double)r->logits[m] >= cut) m++;
	double sum = 0;
	for (int i = 0; i < m; i++) {
		w[i] = kvhost_exp((double)r->logprobs[i]);
		sum += w[i];
	}
	int i = kvhost_pick(w, m, sum, kvhost_rand(r->seed, r->step, 0));
	r->out_id = r->ids[i];
	r->out_logprob = (float)log(w[i] / sum);
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"top-n-sigma\",\"version\":\"1.0.0\","
               "\"candidates\":256,\"argmax_invariant\":false,"
               "\"preops\":[\"penalties\",\"bias\",\"temperature\"],"
               "\"params\":[{\"name\":\"n_sigma\",\"type\":\"float\",\"min\":0,\"max\":10,\"default\":1}]}",
               1, 0, 0, row)
