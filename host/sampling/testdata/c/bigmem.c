/* bigmem: a hostile sampler whose 80 MiB of static data makes its memory's
 * minimum size exceed the default 64 MiB cap: refused before it runs. */
#include "kvhost_sampler.h"

static volatile char big[80 << 20];

static int row(kvhost_row *r) {
	big[r->ids[0] & 1023] = 1;
	r->out_id = r->ids[0];
	r->out_logprob = 0;
	return 0;
}

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"bigmem\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],\"params\":[]}",
               0, 0, 0, row)
