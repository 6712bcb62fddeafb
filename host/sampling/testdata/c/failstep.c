/* failstep: passes its self-test (parameter "fail" defaults to 0) but traps
 * on every step of a row whose "fail" is above 0.5: a policy that serves
 * real steps and fails repeatedly (tests of disabling). */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) {
	if (r->params[0] > 0.5f)
		__builtin_trap();
	r->out_id = r->ids[0];
	r->out_logprob = 0;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"failstep\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[\"temperature\"],"
               "\"params\":[{\"name\":\"fail\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":0}]}",
               1, 0, 0, row)
