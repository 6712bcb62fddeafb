/* greedy: the best candidate. The host cuts to one candidate (K = 1) with a
 * plain argmax after penalties and logit bias, never copying the vocabulary. */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) {
	r->out_id = r->ids[0];
	r->out_logprob = 0;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"greedy\",\"version\":\"1.0.0\","
               "\"candidates\":1,\"argmax_invariant\":true,"
               "\"preops\":[\"penalties\",\"bias\"],\"params\":[]}",
               0, 0, 0, row)
