/* typical: locally typical sampling (Meister et al. 2022) over the
 * candidates: keep the tokens whose surprise is closest to the entropy until
 * their mass reaches typical_p, then draw (stream 0). */
#include "kvhost_sampler.h"

static double p[256], w[256];
static int order[256];

static int row(kvhost_row *r) {
	int n = r->n;
	float typical_p = r->params[0];
	double sum = 0, ent = 0;
	for (int i = 0; i < n; i++) {
		p[i] = kvhost_exp((double)r->logprobs[i]);
		sum += p[i];
	}
	for (int i = 0; i < n; i++) {
		p[i] /= sum;
		if (p[i] > 0) ent -= p[i] * log(p[i]);
	}
	/* order by |surprise - entropy| ascending (ties: candidate order) */
	for (int i = 0; i < n; i++) {
		double d = fabs(-log(p[i]) - ent);
		int j = i;
		while (j > 0 && w[j - 1] > d) {
			w[j] = w[j - 1];
			order[j] = order[j - 1];
			j--;
		}
		w[j] = d;
		order[j] = i;
	}
	int m = n;
	if (typical_p < 1) {
		double acc = 0;
		for (int i = 0; i < n; i++) {
			acc += p[order[i]];
			if (acc >= typical_p) {
				m = i + 1;
				break;
			}
		}
	}
	double kept = 0;
	for (int i = 0; i < m; i++) {
		w[i] = p[order[i]];
		kept += w[i];
	}
	int i = kvhost_pick(w, m, kept, kvhost_rand(r->seed, r->step, 0));
	r->out_id = r->ids[order[i]];
	r->out_logprob = (float)log(w[i] / kept);
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"typical\",\"version\":\"1.0.0\","
               "\"candidates\":256,\"argmax_invariant\":false,"
               "\"preops\":[\"penalties\",\"bias\",\"temperature\"],"
               "\"params\":[{\"name\":\"typical_p\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":0.95}]}",
               1, 0, 0, row)
