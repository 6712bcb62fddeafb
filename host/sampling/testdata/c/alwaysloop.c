/* alwaysloop: loops forever on every step (refused by the self-test). */
#include "kvhost_sampler.h"

static volatile int sink;

static int row(kvhost_row *r) {
	for (;;) sink++;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"alwaysloop\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],\"params\":[]}",
               0, 0, 0, row)
