/* badabi: claims ABI version 2 in its descriptor. */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) { return 0; }

KVHOST_SAMPLER("{\"abi\":2,\"kind\":\"sampler\",\"name\":\"badabi\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],\"params\":[]}",
               0, 0, 0, row)
