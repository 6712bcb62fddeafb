/* mirostat: Mirostat 2.0 (Basu et al. 2021). State per sequence: [set, mu].
 * Candidates whose surprise -log2 p exceeds mu are cut (the best always
 * stays), the rest renormalised and drawn (stream 0), then
 * mu -= eta * (surprise(chosen) - tau). */
#include "kvhost_sampler.h"

static double w[256];

static int row(kvhost_row *r) {
	float tau = r->params[0], eta = r->params[1];
	if (r->state[0] == 0) {
		r->state[0] = 1;
		r->state[1] = 2 * tau;
	}
	double mu = r->state[1];
	int n = r->n;
	double sum = 0;
	for (int i = 0; i < n; i++) {
		w[i] = kvhost_exp((double)r->logprobs[i]);
		sum += w[i];
	}
	int m = 1;
	while (m < n && -log2(w[m] / sum) <= mu) m++;
	double kept = 0;
	for (int i = 0; i < m; i++) kept += w[i];
	int i = kvhost_pick(w, m, kept, kvhost_rand(r->seed, r->step, 0));
	double surprise = -log2(w[i] / kept);
	r->state[1] = (float)(mu - eta * (surprise - tau));
	r->out_id = r->ids[i];
	r->out_logprob = (float)log(w[i] / kept);
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"mirostat\",\"version\":\"2.0.0\","
               "\"candidates\":256,\"argmax_invariant\":false,\"state\":2,"
               "\"preops\":[\"penalties\",\"bias\",\"temperature\"],"
               "\"params\":[{\"name\":\"tau\",\"type\":\"float\",\"min\":0,\"max\":20,\"default\":5},"
               "{\"name\":\"eta\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":0.1}]}",
               2, 2, 0, row)
