/* membomb: a hostile sampler that, once a row's first parameter is above
 * 0.5 (the self-test uses the default, 0), grows its memory until the host
 * refuses, then traps. The host's memory cap must hold and the step fail
 * with an error naming the cap. */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) {
	if (r->params[0] > 0.5f) {
		while (__builtin_wasm_memory_grow(0, 1) != (__SIZE_TYPE__)-1)
			;
		__builtin_trap();
	}
	r->out_id = r->ids[0];
	r->out_logprob = 0;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"membomb\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],"
               "\"params\":[{\"name\":\"bomb\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":0}]}",
               1, 0, 0, row)
