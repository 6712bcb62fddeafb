/* trap: traps (unreachable) on every step. */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) {
	__builtin_trap();
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"trap\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],\"params\":[]}",
               0, 0, 0, row)
