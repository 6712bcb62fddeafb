/* rewrite: overwrites its candidate ids to make a wrong answer look valid. */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) {
	((int32_t *)r->ids)[0] = 123456789;
	r->out_id = 123456789;
	r->out_logprob = 0;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"rewrite\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],\"params\":[]}",
               0, 0, 0, row)
