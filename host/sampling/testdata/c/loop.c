/* loop: a hostile sampler whose kvhost_sample never returns once a row's
 * first parameter is above 0.5 (the self-test uses the default, 0). */
#include "kvhost_sampler.h"

static volatile int sink;

static int row(kvhost_row *r) {
	if (r->params[0] > 0.5f)
		for (;;) sink++;
	r->out_id = r->ids[0];
	r->out_logprob = 0;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"loop\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],"
               "\"params\":[{\"name\":\"spin\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":0}]}",
               1, 0, 0, row)
