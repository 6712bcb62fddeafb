/* dry: "Don't Repeat Yourself" (p-e-w, 2024). A candidate that would extend
 * a repeat of length L >= allowed_length of an earlier n-gram in the history
 * loses multiplier * base^(L - allowed_length) from its logit; then softmax
 * at temperature and one draw (stream 0). Repeats are measured up to 64
 * tokens over the last 512 tokens. */
#include "kvhost_sampler.h"

#define MAX_MATCH 64
static double w[128];
static float pen[128];

static int row(kvhost_row *r) {
	float temp = r->params[0], mult = r->params[1], base = r->params[2];
	int allowed = (int)r->params[3];
	int n = r->n, len = r->history_len;
	const int32_t *h = r->history;
	for (int i = 0; i < n; i++) pen[i] = 0;
	if (mult > 0 && len > 1) {
		int32_t last = h[len - 1];
		/* position j (< len) followed an n-gram that ends like the history
		 * ends: h[j-L..j) == h[len-L..len); token h[j] would repeat it. */
		for (int j = 1; j < len; j++) {
			if (h[j - 1] != last) continue;
			int L = 0;
			while (L < MAX_MATCH && L < j && h[j - 1 - L] == h[len - 1 - L]) L++;
			if (L < allowed) continue;
			for (int i = 0; i < n; i++) {
				if (r->ids[i] == h[j]) {
					float p = mult * powf(base, (float)(L - allowed));
					if (p > pen[i]) pen[i] = p;
					break;
				}
			}
		}
	}
	if (temp <= 0) {
		int best = 0;
		for (int i = 1; i < n; i++)
			if (r->logits[i] - pen[i] > r->logits[best] - pen[best]) best = i;
		r->out_id = r->ids[best];
		r->out_logprob = 0;
		return 0;
	}
	double mx = -INFINITY, sum = 0;
	for (int i = 0; i < n; i++) {
		double z = ((double)r->logits[i] - pen[i]) / temp;
		w[i] = z;
		if (z > mx) mx = z;
	}
	for (int i = 0; i < n; i++) {
		w[i] = kvhost_exp(w[i] - mx);
		sum += w[i];
	}
	int i = kvhost_pick(w, n, sum, kvhost_rand(r->seed, r->step, 0));
	r->out_id = r->ids[i];
	r->out_logprob = (float)log(w[i] / sum);
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"dry\",\"version\":\"1.0.0\","
               "\"candidates\":128,\"argmax_invariant\":false,\"history\":512,"
               "\"preops\":[\"penalties\",\"bias\"],"
               "\"params\":[{\"name\":\"temperature\",\"type\":\"float\",\"min\":0,\"max\":2,\"default\":1},"
               "{\"name\":\"dry_multiplier\",\"type\":\"float\",\"min\":0,\"max\":5,\"default\":0.8},"
               "{\"name\":\"dry_base\",\"type\":\"float\",\"min\":1,\"max\":4,\"default\":1.75},"
               "{\"name\":\"dry_allowed_length\",\"type\":\"int\",\"min\":1,\"max\":64,\"default\":2}]}",
               4, 0, 512, row)
