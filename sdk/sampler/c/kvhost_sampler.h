/* kvhost_sampler.h: the C SDK for kvhost sampling-policy plugins (sampler
 * ABI version 1, see sdk/SAMPLER_ABI.md).
 *
 * A sampler is a wasm32 reactor module that imports nothing. Build:
 *   clang --target=wasm32-wasi -mexec-model=reactor -O2 -o my.wasm my.c
 * (scripts/build-samplers.sh adds the flags below). Define the descriptor and
 * the per-row function, then expand KVHOST_SAMPLER(describe_json, row_fn):
 *
 *   static int row(kvhost_row *r) { r->out_id = r->ids[0]; return 0; }
 *   KVHOST_SAMPLER("{...json...}", row)
 *
 * Each row sees its candidates sorted by descending logit (ties: lower id
 * first), n of them valid (1 <= n <= k), the log-softmax of those logits
 * over the n candidates, its parameters in schema order, its seed and step,
 * its last history_len generated tokens (oldest first) and its persistent
 * state floats (zero at the first step of a sequence). It must set out_id to
 * one of ids[0..n) and out_logprob; a negative return fails the whole step.
 * The I/O region is allocated once, in kvhost_sampler_init, and memory must
 * not grow during kvhost_sample.
 */
#ifndef KVHOST_SAMPLER_H
#define KVHOST_SAMPLER_H

#include <stdint.h>
#include <stdlib.h>
#include <math.h>

#define KVHOST_ABI_VERSION 1
#define KVHOST_IO_MAGIC 0x3153564Bu /* "KVS1" little-endian */
#define KVHOST_EXPORT(name) __attribute__((export_name(name)))

/* The I/O header the host reads at the pointer kvhost_sampler_init
 * returns: 18 little-endian u32 fields, pointers into linear memory. */
typedef struct {
	uint32_t magic, max_batch, max_k, n_params, n_state, n_history;
	float *params;       /* f32[max_batch * n_params] */
	uint64_t *seed;      /* u64[max_batch] */
	uint64_t *step;      /* u64[max_batch] */
	int32_t *n_cand;     /* i32[max_batch] */
	int32_t *ids;        /* i32[max_batch * max_k] */
	float *logits;       /* f32[max_batch * max_k] */
	float *logprobs;     /* f32[max_batch * max_k] */
	int32_t *history;    /* i32[max_batch * n_history] */
	int32_t *history_len;/* i32[max_batch] */
	float *state;        /* f32[max_batch * n_state], in and out */
	int32_t *out_id;     /* i32[max_batch] */
	float *out_logprob;  /* f32[max_batch] */
} kvhost_io;

/* One row as the policy function sees it. */
typedef struct {
	int n, k;
	const int32_t *ids;
	float *logits;   /* scratch: the policy may modify them */
	float *logprobs; /* scratch too */
	const float *params;
	uint64_t seed, step;
	const int32_t *history;
	int history_len;
	float *state;
	int32_t out_id;
	float out_logprob;
} kvhost_row;

/* kvhost_rand returns a uniform double in [0,1) for (seed, step, stream).
 * Stream 0 is bit-identical to the host's sampling.Rand(seed, step), so a
 * policy drawing once per step reproduces the native sampler. */
static inline double kvhost_rand(uint64_t seed, uint64_t step, uint64_t stream) {
	uint64_t z = seed ^ (step + 1) * 0x9e3779b97f4a7c15ull ^ stream * 0xd1b54a32d192ed03ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / 9007199254740992.0;
}

/* kvhost_exp is exp(x) to a relative error below 1e-8 (ample for f32
 * logits), without tables or calls: Cody-Waite reduction by ln 2 and a
 * degree-8 Taylor polynomial in Estrin form (short dependency chains: wasm
 * has no fused multiply-add). Under wazero it is several times faster than
 * libm's exp/expf, and it keeps the built-in policies near native speed. */
static inline double kvhost_exp(double x) {
	x = x < -708.0 ? -708.0 : x; /* exp(-708) ~ 3e-308: zero for our sums */
	x = x > 709.0 ? 709.0 : x;   /* NaN passes through both and stays NaN */
	/* k = round(x / ln 2) by the 1.5 * 2^52 shifter; its low bits hold k. */
	union { double d; uint64_t u; } t = { x * 1.4426950408889634 + 6755399441055744.0 };
	double k = t.d - 6755399441055744.0;
	double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
	double r2 = r * r, r4 = r2 * r2;
	double p01 = 1.0 + r, p23 = 0.5 + r * (1.0 / 6.0);
	double p45 = 1.0 / 24.0 + r * (1.0 / 120.0), p67 = 1.0 / 720.0 + r * (1.0 / 5040.0);
	double p = (p01 + r2 * p23) + r4 * ((p45 + r2 * p67) + r4 * (1.0 / 40320.0));
	union { uint64_t u; double d; } scale = { (t.u + 1023) << 52 };
	return p * scale.d;
}

/* kvhost_pick draws from weights w[0..n) (non-negative, summing to sum)
 * with u in [0,1): the first index whose cumulative weight exceeds u*sum. */
static inline int kvhost_pick(const double *w, int n, double sum, double u) {
	double r = u * sum;
	for (int i = 0; i < n; i++) {
		r -= w[i];
		if (r < 0) return i;
	}
	return n - 1;
}

static kvhost_io kvhost_io_region;

static inline void *kvhost__alloc(size_t n) {
	void *p = aligned_alloc(16, (n + 15) & ~(size_t)15);
	if (!p) __builtin_trap();
	return p;
}

/* kvhost_io_setup allocates the region once (later calls return it). */
static inline kvhost_io *kvhost_io_setup(int max_batch, int max_k, int n_params, int n_state, int n_history) {
	kvhost_io *io = &kvhost_io_region;
	if (io->magic == KVHOST_IO_MAGIC) return io;
	if (max_batch <= 0 || max_k <= 0) return 0;
	size_t b = (size_t)max_batch, bk = b * (size_t)max_k;
	io->max_batch = (uint32_t)max_batch;
	io->max_k = (uint32_t)max_k;
	io->n_params = (uint32_t)n_params;
	io->n_state = (uint32_t)n_state;
	io->n_history = (uint32_t)n_history;
	io->params = kvhost__alloc(4 * b * (size_t)(n_params ? n_params : 1));
	io->seed = kvhost__alloc(8 * b);
	io->step = kvhost__alloc(8 * b);
	io->n_cand = kvhost__alloc(4 * b);
	io->ids = kvhost__alloc(4 * bk);
	io->logits = kvhost__alloc(4 * bk);
	io->logprobs = kvhost__alloc(4 * bk);
	io->history = kvhost__alloc(4 * b * (size_t)(n_history ? n_history : 1));
	io->history_len = kvhost__alloc(4 * b);
	io->state = kvhost__alloc(4 * b * (size_t)(n_state ? n_state : 1));
	io->out_id = kvhost__alloc(4 * b);
	io->out_logprob = kvhost__alloc(4 * b);
	io->magic = KVHOST_IO_MAGIC;
	return io;
}

/* KVHOST_SAMPLER defines every export. DESCRIBE is the descriptor JSON
 * (a string literal); NPARAMS, NSTATE, NHISTORY must match it; ROWFN is
 * int ROWFN(kvhost_row *). */
#define KVHOST_SAMPLER(DESCRIBE, NPARAMS, NSTATE, NHISTORY, ROWFN)                  \
	static const char kvhost__desc[] = DESCRIBE;                                  \
	KVHOST_EXPORT("kvhost_abi_version") int32_t kvhost_abi_version(void) {        \
		return KVHOST_ABI_VERSION;                                                \
	}                                                                             \
	KVHOST_EXPORT("kvhost_describe") int64_t kvhost_describe(void) {              \
		return (int64_t)(((uint64_t)(uintptr_t)kvhost__desc << 32) |              \
		                 (uint64_t)(sizeof(kvhost__desc) - 1));                   \
	}                                                                             \
	KVHOST_EXPORT("kvhost_sampler_init")                                          \
	int32_t kvhost_sampler_init(int32_t max_batch, int32_t max_k) {               \
		return (int32_t)(uintptr_t)kvhost_io_setup(max_batch, max_k, NPARAMS,     \
		                                           NSTATE, NHISTORY);             \
	}                                                                             \
	KVHOST_EXPORT("kvhost_sample") int32_t kvhost_sample(int32_t batch, int32_t k) { \
		kvhost_io *io = &kvhost_io_region;                                        \
		if (io->magic != KVHOST_IO_MAGIC || batch < 0 ||                          \
		    (uint32_t)batch > io->max_batch || k <= 0 || (uint32_t)k > io->max_k) \
			return -1;                                                            \
		for (int b = 0; b < batch; b++) {                                         \
			kvhost_row r;                                                         \
			r.n = io->n_cand[b];                                                  \
			if (r.n <= 0 || r.n > k) return -2;                                   \
			r.k = k;                                                              \
			r.ids = io->ids + (size_t)b * k;                                      \
			r.logits = io->logits + (size_t)b * k;                                \
			r.logprobs = io->logprobs + (size_t)b * k;                            \
			r.params = io->params + (size_t)b * (NPARAMS);                        \
			r.seed = io->seed[b];                                                 \
			r.step = io->step[b];                                                 \
			r.history = io->history + (size_t)b * (NHISTORY);                     \
			r.history_len = io->history_len[b];                                   \
			r.state = io->state + (size_t)b * (NSTATE);                           \
			r.out_id = r.ids[0];                                                  \
			r.out_logprob = r.logprobs[0];                                        \
			int st = ROWFN(&r);                                                   \
			if (st < 0) return st;                                                \
			io->out_id[b] = r.out_id;                                             \
			io->out_logprob[b] = r.out_logprob;                                   \
		}                                                                         \
		return 0;                                                                 \
	}

#endif
