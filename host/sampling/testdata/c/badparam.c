/* badparam: a parameter whose default lies outside its range. */
#include "kvhost_sampler.h"

static int row(kvhost_row *r) { return 0; }

KVHOST_SAMPLER("{\"abi\":1,\"kind\":\"sampler\",\"name\":\"badparam\",\"version\":\"1.0.0\","
               "\"candidates\":8,\"argmax_invariant\":false,\"preops\":[],"
               "\"params\":[{\"name\":\"x\",\"type\":\"float\",\"min\":0,\"max\":1,\"default\":3}]}",
               1, 0, 0, row)
