/* liar: answers a token that is not among the candidates. */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) {
	r->out_id = -7;
	r->out_logprob = 0;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"liar\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],\"params\":[]}",
               0, 0, 0, row)
