package cpu

import (
	"fmt"
	"math"
)

// The selective state-space scan of a Mamba-2 layer. Per head h, token t:
//
//	dt  = clamp(softplus(dt_raw[t][h] + dt_bias[h]), DtMin, DtMax)
//	a   = exp(dt·A[h])                       (A = -exp(A_log) < 0)
//	S  ← a·S + dt·B_t ⊗ x_t                  (S is State × HeadDim)
//	y_t = C_t·S + D[h]·x_t
//
// Short sequences (decode steps) run that recurrence token by token
// (ssmStep: one pass over S per token, multiply, two FMAs and a store per
// value). Longer ones run the state-space-duality (SSD) chunked form over
// chunks of ssdChunk tokens: with S0 the state before the chunk, e_i the
// product of a up to token i and M_ij = (C_i·B_j)·Π_{j<u≤i} a_u · dt_j,
//
//	y_i  = e_i·(C_i·S0) + Σ_{j≤i} M_ij·x_j + D·x_i
//	S_L  = e_{L-1}·S0 + Σ_j (Π_{j<u<L} a_u)·dt_j · B_j ⊗ x_j
//
// Every term is a sum of scaled rows (axpyRows4: four output rows share
// each loaded row, β·out + Σ_j a_j·row_j with a broadcast and FMAs, no
// horizontal sums), so a value of S costs two FMAs per token, is read Q/4
// times and stored once per chunk, and the decay multiply is folded into β;
// C·B is computed once per group and chunk (not per head) by a first
// parallel pass. The decays are running products in float64 (one exp per
// token), so no exp of a difference of cumulative sums can overflow, and
// terms below 1e-30 are dropped before they become subnormal.
//
// Measured (BenchmarkMambaScan, d_inner 2048, state 128, 2-vCPU AMD EPYC
// with AVX-512, a shared machine, several runs): the two forms are even —
// SSD 34–73k, recurrence 34–75k tokens per CPU-second, no consistent winner,
// both about eleven times a plain scalar loop over positions (plainScan,
// 5.7–5.9k); the recurrence runs near its multiply+FMA+FMA+store bound, the
// SSD's FMA-only inner loops lose their margin to its setup (C·B, the
// rows of M, one exp per token). Prefill takes the SSD (its inner loops are
// pure FMA streams over data in L1/L2, no stores of S per token; other cores
// were not measured), decode and sequences below ssdMinLen tokens the
// recurrence; both are tested against the same float64 recurrence.

// ssdChunk is the SSD chunk length (HF's chunk_size is 128 or 256 on GPUs).
// On a CPU the intra-chunk work grows with it while nothing shrinks: 32 and
// 64 measured alike here, 128 a third slower.
const ssdChunk = 64

// ssdMinLen is the shortest sequence the SSD path takes; tests lower and
// raise it to force each path.
var ssdMinLen = 16

// MambaParams are a layer's per-head scan parameters, f32.
type MambaParams struct {
	A      []float32 // -exp(A_log): GGUF ssm_a stores it so; HF stores A_log
	D      []float32 // skip connection (GGUF ssm_d, HF D)
	DtBias []float32 // GGUF ssm_dt.bias, HF dt_bias
}

// MambaScanScratch is the number of scratch floats MambaScan needs for a
// batch of at most tokens rows in at most seqs sequences.
func MambaScanScratch(p *Pool, s Mamba2, tokens, seqs int) int {
	return MambaScanScratchThreads(p.Threads(), s, tokens, seqs)
}

// MambaScanScratchThreads is MambaScanScratch for a pool of threads
// workers, for callers that size the scratch without running the kernels
// (a plan's dry run).
func MambaScanScratchThreads(threads int, s Mamba2, tokens, seqs int) int {
	// Only sequences of ssdMinLen tokens or more have C·B blocks.
	chunks := tokens/ssdChunk + min(seqs, tokens/ssdMinLen)
	return chunks*s.Groups*ssdChunk*ssdChunk + max(1, threads)*workerScratch(s)
}

// workerScratch is each worker's part of the scan scratch: a chunk's x, B
// and C copied contiguous (rows of xbc are ConvDim floats apart, usually a
// multiple of 4 KiB, so a chunk's rows would all fall in the same L1 sets)
// and its dt-weighted x.
func workerScratch(s Mamba2) int { return ssdChunk * (2*s.HeadDim + 2*s.State) }

// MambaScan runs the scan of every sequence: y (rows × Inner()) from xbc (the
// convolved rows, see mamba.go for the layout) and dt (rows × Heads, raw),
// updating each sequence's SSM state. scratch holds at least
// MambaScanScratch(p, s, rows, len(seqs)) floats.
func (p *Pool) MambaScan(s Mamba2, y, xbc, dt []float32, prm MambaParams, seqs []MambaSeq, scratch []float32) {
	s.mustValid("mamba scan")
	rows := checkSeqs("mamba scan", s, seqs, false, true)
	H := s.Heads
	if len(y) < rows*s.Inner() || len(xbc) < rows*s.ConvDim() || len(dt) < rows*H {
		panic(fmt.Sprintf("cpu: mamba scan: %d rows: y has %d floats (need %d), xbc %d (need %d), dt %d (need %d)",
			rows, len(y), rows*s.Inner(), len(xbc), rows*s.ConvDim(), len(dt), rows*H))
	}
	if len(prm.A) < H || len(prm.D) < H || len(prm.DtBias) < H {
		panic(fmt.Sprintf("cpu: mamba scan: %d heads: A has %d values, D %d, dt bias %d", H, len(prm.A), len(prm.D), len(prm.DtBias)))
	}
	if need := MambaScanScratch(p, s, rows, len(seqs)); len(scratch) < need {
		panic(fmt.Sprintf("cpu: mamba scan: scratch has %d floats, needs %d", len(scratch), need))
	}
	if rows == 0 {
		return
	}
	if p == nil {
		// No Pool to keep a task in: run sequence by sequence, each one's
		// C·B blocks at the start of scratch.
		var t mambaTask
		t.s, t.y, t.xbc, t.dt, t.prm, t.scratch = s, y, xbc, dt, prm, scratch
		t.wsOff = len(scratch) - workerScratch(s)
		row := 0
		for _, q := range seqs {
			if q.Len >= ssdMinLen {
				for c := 0; c*ssdChunk < q.Len; c++ {
					for g := range s.Groups {
						t.cbChunk(0, row+c*ssdChunk, min(ssdChunk, q.Len-c*ssdChunk), c*s.Groups+g, g)
					}
				}
			}
			for h := range H {
				t.scanHead(0, q, row, 0, h)
			}
			row += q.Len
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.mb
	t.initScan(s, y, xbc, dt, prm, seqs, scratch, p.Threads())
	if t.cbItems > 0 {
		t.kind = kindCB
		t.ch.reset(t.cbItems)
		p.run(t)
	}
	t.kind = kindScan
	t.ch.reset(len(seqs) * H)
	p.run(t)
	t.release()
}

// run runs t on the pool's workers, inline on a one-thread Pool. The caller
// holds p.mu.
func (p *Pool) run(t task) {
	if p.threads == 1 {
		t.run(0)
		return
	}
	p.parallel(t)
}

const (
	kindConv = iota
	kindCB
	kindScan
	kindNorm
)

// mambaTask is every Mamba-2 kernel's parallel call; the Pool keeps one.
type mambaTask struct {
	kind    int
	s       Mamba2
	seqs    []MambaSeq
	row0    []int // first row of each sequence
	cb0     []int // each sequence's first C·B block (SSD sequences only)
	cbItems int
	blocks  int
	out     []float32
	xbc, w  []float32
	bias    []float32
	y, dt   []float32
	prm     MambaParams
	scratch []float32
	wsOff   int // start of the per-worker part of scratch
	// gated norm
	z, nw       []float32
	dim, group  int
	normRows    int
	eps         float32
	rowsPerItem int
	ch          chunker
}

func (t *mambaTask) setSeqs(seqs []MambaSeq) {
	t.seqs = seqs
	t.row0 = t.row0[:0]
	r := 0
	for _, q := range seqs {
		t.row0 = append(t.row0, r)
		r += q.Len
	}
}

func (t *mambaTask) initConv(s Mamba2, out, xbc, w, bias []float32, seqs []MambaSeq, blocks int) {
	t.kind, t.s, t.out, t.xbc, t.w, t.bias, t.blocks = kindConv, s, out, xbc, w, bias, blocks
	t.setSeqs(seqs)
	t.ch.reset(len(seqs) * blocks)
}

func (t *mambaTask) initScan(s Mamba2, y, xbc, dt []float32, prm MambaParams, seqs []MambaSeq, scratch []float32, threads int) {
	t.s, t.y, t.xbc, t.dt, t.prm, t.scratch = s, y, xbc, dt, prm, scratch
	t.setSeqs(seqs)
	t.cb0 = t.cb0[:0]
	n := 0
	for _, q := range seqs {
		t.cb0 = append(t.cb0, n)
		if q.Len >= ssdMinLen {
			n += (q.Len + ssdChunk - 1) / ssdChunk
		}
	}
	t.cbItems = n * s.Groups
	t.wsOff = len(scratch) - threads*workerScratch(s)
	t.ch.reset(t.cbItems)
}

// release drops the caller's slices so the Pool does not keep them alive.
func (t *mambaTask) release() {
	t.seqs, t.out, t.xbc, t.w, t.bias, t.y, t.dt, t.scratch, t.z, t.nw = nil, nil, nil, nil, nil, nil, nil, nil, nil, nil
	t.prm = MambaParams{}
}

func (t *mambaTask) run(worker int) {
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		switch t.kind {
		case kindConv:
			t.conv(c)
		case kindCB:
			t.cb(worker, c)
		case kindScan:
			t.scan(worker, c)
		case kindNorm:
			t.norm(c)
		}
	}
}

func (t *mambaTask) conv(item int) {
	i, b := item/t.blocks, item%t.blocks
	t.convBlock(t.seqs[i], t.row0[i], b)
}

// convBlock convolves block b of the channels of sequence q (rows from
// row0).
func (t *mambaTask) convBlock(q MambaSeq, row0, b int) {
	if q.Len == 0 {
		return
	}
	c0 := b * convBlock
	c1 := min(c0+convBlock, t.s.ConvDim())
	convRange(t.s, t.out, t.xbc, t.w, t.bias, q.Conv, row0, q.Len, c0, c1)
}

// worker returns worker w's part of the scratch.
func (t *mambaTask) worker(w int) []float32 {
	n := workerScratch(t.s)
	return t.scratch[t.wsOff+w*n : t.wsOff+(w+1)*n]
}

// cbBlock returns C·B block blk: ssdChunk×ssdChunk floats, row i column j
// holding C_i·B_j for j <= i.
func (t *mambaTask) cbBlock(blk int) []float32 {
	const q2 = ssdChunk * ssdChunk
	return t.scratch[blk*q2 : (blk+1)*q2]
}

// cb computes the C·B block of one (SSD sequence, chunk, group) item.
func (t *mambaTask) cb(worker, item int) {
	G := t.s.Groups
	g, chunk := item%G, item/G
	// The sequence: the last SSD one whose first block is at or before it.
	i := 0
	for k := range t.seqs {
		if t.seqs[k].Len >= ssdMinLen && t.cb0[k] <= chunk {
			i = k
		}
	}
	c := chunk - t.cb0[i]
	t.cbChunk(worker, t.row0[i]+c*ssdChunk, min(ssdChunk, t.seqs[i].Len-c*ssdChunk), chunk*G+g, g)
}

// cbChunk fills block blk with C_r·B_j (j <= r) of group g over the L rows
// from r0, B copied contiguous into worker's scratch first.
func (t *mambaTask) cbChunk(worker, r0, L, blk, g int) {
	s := t.s
	G, N, C := s.Groups, s.State, s.ConvDim()
	out := t.cbBlock(blk)
	bOff, cOff := s.Inner()+g*N, s.Inner()+G*N+g*N
	bc := t.worker(worker)[:L*N]
	for j := range L {
		copy(bc[j*N:(j+1)*N], t.xbc[(r0+j)*C+bOff:])
	}
	var o [4]float32
	for r := range L {
		ci := t.xbc[(r0+r)*C+cOff : (r0+r)*C+cOff+N]
		row := out[r*ssdChunk : r*ssdChunk+r+1]
		j := 0
		for ; j+4 <= L && j <= r; j += 4 {
			dot4F32(ci, bc[j*N:], N, &o)
			copy(row[j:], o[:])
		}
		for ; j <= r; j++ {
			row[j] = dotF32(ci, bc[j*N:(j+1)*N])
		}
	}
}

// softplusDt is the clamped softplus of the raw dt plus bias, in float64
// (HF/Triton: x above 20 passes through).
func softplusDt(s Mamba2, v float64) float64 {
	if v <= 20 {
		v = math.Log1p(math.Exp(v))
	}
	return min(max(v, float64(s.DtMin)), float64(s.DtMax))
}

// scan runs one (sequence, head) item.
func (t *mambaTask) scan(worker, item int) {
	H := t.s.Heads
	i, h := item/H, item%H
	t.scanHead(worker, t.seqs[i], t.row0[i], t.cb0[i], h)
}

// scanHead runs head h of sequence q (rows from row0, C·B blocks from cb0)
// with worker's scratch.
func (t *mambaTask) scanHead(worker int, q MambaSeq, row0, cb0, h int) {
	if q.Len == 0 {
		return
	}
	s := t.s
	P := s.HeadDim
	ws := t.worker(worker)
	S := q.SSM[h*s.State*P : (h+1)*s.State*P]
	if q.Len >= ssdMinLen {
		t.scanSSD(h, row0, q.Len, cb0, S, ws)
		return
	}
	t.scanSteps(h, row0, q.Len, S, ws[:P])
}

// scanSteps runs the recurrence token by token for head h over n rows from
// row0; xdt is P floats of scratch.
func (t *mambaTask) scanSteps(h, row0, n int, S, xdt []float32) {
	s := t.s
	H, P, N, C := s.Heads, s.HeadDim, s.State, s.ConvDim()
	g := h / (H / s.Groups)
	bOff, cOff := s.Inner()+g*N, s.Inner()+s.Groups*N+g*N
	A, D, bias := float64(t.prm.A[h]), t.prm.D[h], float64(t.prm.DtBias[h])
	for r := row0; r < row0+n; r++ {
		d := softplusDt(s, float64(t.dt[r*H+h])+bias)
		dA := float32(math.Exp(d * A))
		x := t.xbc[r*C+h*P : r*C+h*P+P]
		df := float32(d)
		for k, v := range x {
			xdt[k] = df * v
		}
		yr := t.y[r*s.Inner()+h*P : r*s.Inner()+h*P+P]
		ssmStep(S, P, xdt, t.xbc[r*C+bOff:r*C+bOff+N], t.xbc[r*C+cOff:r*C+cOff+N], dA, yr)
		for k, v := range x {
			yr[k] += D * v
		}
	}
}

// scanSSD runs head h of a sequence of n rows from row0 chunk by chunk; its
// C·B blocks start at cb0; ws is the worker's scratch (workerScratch). Rows of
// y and of the state go four at a time through axpyRows4, so each loaded
// vector feeds four FMAs.
func (t *mambaTask) scanSSD(h, row0, n, cb0 int, S, ws []float32) {
	s := t.s
	H, P, N, C, G := s.Heads, s.HeadDim, s.State, s.ConvDim(), s.Groups
	I := s.Inner()
	g := h / (H / G)
	bOff, cOff := I+g*N, I+G*N+g*N
	A, D, bias := float64(t.prm.A[h]), t.prm.D[h], float64(t.prm.DtBias[h])
	xw := ws[:ssdChunk*P]
	xc := ws[ssdChunk*P : 2*ssdChunk*P]
	bc := ws[2*ssdChunk*P : 2*ssdChunk*P+ssdChunk*N]
	cc := ws[2*ssdChunk*P+ssdChunk*N : 2*ssdChunk*(P+N)]
	var (
		dtv  [ssdChunk]float64     // dt per token
		ea   [ssdChunk]float64     // exp(dt·A) per token
		e    [ssdChunk]float64     // Π_{u<=i} ea[u]
		dec  [ssdChunk]float64     // decays of the current row of M
		mrow [4 * ssdChunk]float32 // four rows of M
		beta [4]float32
		wj   [1]float32
	)
	for c := 0; c*ssdChunk < n; c++ {
		r0 := row0 + c*ssdChunk
		L := min(ssdChunk, n-c*ssdChunk)
		p := 1.0
		for j := range L {
			dtv[j] = softplusDt(s, float64(t.dt[(r0+j)*H+h])+bias)
			ea[j] = math.Exp(dtv[j] * A)
			p *= ea[j]
			e[j] = p
		}
		for j := range L {
			row := t.xbc[(r0+j)*C:]
			copy(xc[j*P:(j+1)*P], row[h*P:])
			copy(bc[j*N:(j+1)*N], row[bOff:])
			copy(cc[j*N:(j+1)*N], row[cOff:])
		}
		cb := t.cbBlock((cb0+c)*G + g)
		// Rows of M in order: dec[j] = Π_{j<u<=i} a_u for the current row
		// i, updated by one multiply per column (no serial chain), and
		// columns below lo dropped once their decay is under 1e-30 (it
		// cannot show in f32 beside the newest term, and the products stay
		// clear of subnormals). fill writes row i from lo, zeroes columns
		// i+1..to, and returns lo.
		lo := 0
		fill := func(row []float32, i, to int) int {
			a := ea[i]
			for j := lo; j < i; j++ {
				dec[j] *= a
			}
			dec[i] = 1
			for lo < i && dec[lo] < 1e-30 {
				lo++
			}
			cbr := cb[i*ssdChunk : i*ssdChunk+i+1]
			for j := lo; j <= i; j++ {
				row[j] = float32(float64(cbr[j]) * dec[j] * dtv[j])
			}
			row[i] += D
			clear(row[i+1 : to+1])
			return lo
		}
		i := 0
		for ; i+4 <= L; i += 4 {
			r := r0 + i
			yi := t.y[r*I+h*P:]
			// Inter-chunk: C_i·S0 for four rows; scaled by e_i below.
			axpyRows4(yi, I, P, &beta, false, cc[i*N:], N, 1, S, P, N)
			var jk [4]int
			j0 := i
			for k := range 4 {
				jk[k] = fill(mrow[k*ssdChunk:(k+1)*ssdChunk], i+k, i+3)
				j0 = min(j0, jk[k])
				beta[k] = float32(e[i+k])
			}
			for k := range 4 {
				clear(mrow[k*ssdChunk+j0 : k*ssdChunk+jk[k]]) // below this row's cut-off: stale
			}
			axpyRows4(yi, I, P, &beta, true, mrow[j0:], ssdChunk, 1, xc[j0*P:], P, i+4-j0)
		}
		for ; i < L; i++ {
			r := r0 + i
			yi := t.y[r*I+h*P : r*I+h*P+P]
			axpyRows(yi, 0, cc[i*N:], 1, S, P, N)
			j0 := fill(mrow[:ssdChunk], i, i)
			axpyRows(yi, float32(e[i]), mrow[j0:], 1, xc[j0*P:], P, i+1-j0)
		}
		// State: S = e_{L-1}·S + Σ_j w_j·B_j ⊗ x_j, w_j = Π_{j<u<L} a_u · dt_j.
		w := 1.0
		for j := L - 1; j >= 0; j-- {
			wj[0] = float32(w * dtv[j])
			axpyRows(xw[j*P:(j+1)*P], 0, wj[:], 1, xc[j*P:], 0, 1)
			w *= ea[j]
		}
		eL := float32(e[L-1])
		beta = [4]float32{eL, eL, eL, eL}
		st := 0
		for ; st+4 <= N; st += 4 {
			axpyRows4(S[st*P:], P, P, &beta, true, bc[st:], 1, N, xw, P, L)
		}
		for ; st < N; st++ {
			axpyRows(S[st*P:(st+1)*P], eL, bc[st:], N, xw, P, L)
		}
	}
}
