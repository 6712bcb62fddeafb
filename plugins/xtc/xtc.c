/* xtc: Exclude Top Choices (p-e-w, 2024). With probability xtc_probability
 * (stream 1), every candidate whose probability is at least xtc_threshold is
 * removed except the least probable of them (only when two or more qualify);
 * then one draw from the rest (stream 0). */
#include "kvhost_sampler.h"

static double w[64];

static int row(kvhost_row *r) {
	float threshold = r->params[0], prob = r->params[1];
	int n = r->n;
	double sum = 0;
	for (int i = 0; i < n; i++) {
		w[i] = kvhost_exp((double)r->logprobs[i]);
		sum += w[i];
	}
	int first = 0;
	if (kvhost_rand(r->seed, r->step, 1) < prob) {
		int above = 0;
		while (above < n && w[above] / sum >= threshold) above++;
		if (above >= 2) first = above - 1;
	}
	double kept = 0;
	for (int i = first; i < n; i++) kept += w[i];
	int i = first + kvhost_pick(w + first, n - first, kept, kvhost_rand(r->seed, r->step, 0));
	r->out_id = r->ids[i];
	r->out_logprob = (float)log(w[i] / kept);
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"xtc\",\"version\":\"1.0.0\","
               "\"candidates\":64,\"argmax_invariant\":false,"
               "\"preops\":[\"penalties\",\"bias\",\"temperature\",\"min_p\"],"
               "\"params\":[{\"name\":\"xtc_threshold\",\"type\":\"float\",\"min\":0,\"max\":0.5,\"default\":0.1},"
               "{\"name\":\"xtc_probability\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":0.5}]}",
               2, 0, 0, row)
