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
// Every term is a sum of scaled rows (axpyRows: out = β·out + Σ_j a_j·row_j,
// one broadcast and a memory-operand FMA per vector, no horizontal sums), so
// a value of S costs two FMAs per token and is stored once per chunk instead
// of once per token; the decay multiply is folded into β; C·B is computed
// once per group and chunk (not per head) by a first parallel pass. The
// decay products are running products in float64 (one exp per token), so no
// exp of a difference of cumulative sums can overflow. Sequences below
// ssdMinLen tokens use the recurrence: the SSD's per-chunk setup does not
// pay for a few tokens. BenchmarkMambaScan measures both.

// ssdChunk is the SSD chunk length (HF's chunk_size is 128 or 256 on GPUs;
// on a CPU the intra-chunk term grows with it while nothing shrinks, so a
// short chunk wins: see BenchmarkMambaScanChunk).
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
	chunks := tokens/ssdChunk + seqs
	return chunks*s.Groups*ssdChunk*ssdChunk + p.Threads()*(ssdChunk+1)*s.HeadDim
}

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
	if p.Threads() == 1 {
		var t mambaTask
		t.initScan(s, y, xbc, dt, prm, seqs, scratch, 1)
		if t.cbItems > 0 {
			t.kind = kindCB
			t.run(0)
		}
		t.kind = kindScan
		t.ch.reset(len(seqs) * H)
		t.run(0)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.mb
	t.initScan(s, y, xbc, dt, prm, seqs, scratch, p.Threads())
	if t.cbItems > 0 {
		t.kind = kindCB
		t.ch.reset(t.cbItems)
		p.parallel(t)
	}
	t.kind = kindScan
	t.ch.reset(len(seqs) * H)
	p.parallel(t)
	t.release()
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
	t.wsOff = len(scratch) - threads*(ssdChunk+1)*s.HeadDim
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
			t.cb(c)
		case kindScan:
			t.scan(worker, c)
		case kindNorm:
			t.norm(c)
		}
	}
}

func (t *mambaTask) conv(item int) {
	i, b := item/t.blocks, item%t.blocks
	q := t.seqs[i]
	if q.Len == 0 {
		return
	}
	c0 := b * convBlock
	c1 := min(c0+convBlock, t.s.ConvDim())
	convRange(t.s, t.out, t.xbc, t.w, t.bias, q.Conv, t.row0[i], q.Len, c0, c1)
}

// cbBlock returns C·B block blk: ssdChunk×ssdChunk floats, row i column j
// holding C_i·B_j for j <= i.
func (t *mambaTask) cbBlock(blk int) []float32 {
	const q2 = ssdChunk * ssdChunk
	return t.scratch[blk*q2 : (blk+1)*q2]
}

// cb computes the C·B block of one (SSD sequence, chunk, group) item.
func (t *mambaTask) cb(item int) {
	s := t.s
	G, N, C := s.Groups, s.State, s.ConvDim()
	g := item % G
	chunk := item / G
	// Find the sequence: the last with cb0 <= chunk among SSD sequences.
	i := 0
	for k := range t.seqs {
		if t.seqs[k].Len >= ssdMinLen && t.cb0[k] <= chunk {
			i = k
		}
	}
	c := chunk - t.cb0[i]
	r0 := t.row0[i] + c*ssdChunk
	L := min(ssdChunk, t.seqs[i].Len-c*ssdChunk)
	blk := t.cbBlock(chunk*G + g)
	bOff, cOff := s.Inner()+g*N, s.Inner()+G*N+g*N
	var o [4]float32
	for r := range L {
		ci := t.xbc[(r0+r)*C+cOff : (r0+r)*C+cOff+N]
		row := blk[r*ssdChunk : r*ssdChunk+r+1]
		j := 0
		for ; j+4 <= L && j <= r; j += 4 {
			dot4F32(ci, t.xbc[(r0+j)*C+bOff:], C, &o)
			copy(row[j:], o[:])
		}
		for ; j <= r; j++ {
			row[j] = dotF32(ci, t.xbc[(r0+j)*C+bOff:(r0+j)*C+bOff+N])
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
	s := t.s
	H, P := s.Heads, s.HeadDim
	i, h := item/H, item%H
	q := t.seqs[i]
	if q.Len == 0 {
		return
	}
	ws := t.scratch[t.wsOff+worker*(ssdChunk+1)*P : t.wsOff+(worker+1)*(ssdChunk+1)*P]
	S := q.SSM[h*s.State*P : (h+1)*s.State*P]
	if q.Len >= ssdMinLen {
		t.scanSSD(h, t.row0[i], q.Len, t.cb0[i], S, ws)
		return
	}
	t.scanSteps(h, t.row0[i], q.Len, S, ws[:P])
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
// C·B blocks start at cb0; ws is (ssdChunk+1)·P floats of scratch.
func (t *mambaTask) scanSSD(h, row0, n, cb0 int, S, ws []float32) {
	s := t.s
	H, P, N, C, G := s.Heads, s.HeadDim, s.State, s.ConvDim(), s.Groups
	g := h / (H / G)
	bOff, cOff := s.Inner()+g*N, s.Inner()+G*N+g*N
	A, D, bias := float64(t.prm.A[h]), t.prm.D[h], float64(t.prm.DtBias[h])
	xw := ws[:ssdChunk*P]
	var (
		dtv  [ssdChunk]float64 // dt per token
		ea   [ssdChunk]float64 // exp(dt·A) per token
		mrow [ssdChunk]float32
	)
	for c := 0; c*ssdChunk < n; c++ {
		r0 := row0 + c*ssdChunk
		L := min(ssdChunk, n-c*ssdChunk)
		for j := range L {
			dtv[j] = softplusDt(s, float64(t.dt[(r0+j)*H+h])+bias)
			ea[j] = math.Exp(dtv[j] * A)
		}
		cb := t.cbBlock((cb0+c)*G + g)
		e := 1.0 // Π_{u<=i} a_u
		for i := range L {
			e *= ea[i]
			r := r0 + i
			yi := t.y[r*s.Inner()+h*P : r*s.Inner()+h*P+P]
			// Inter-chunk: C_i·S0, scaled by e_i below through β.
			axpyRows(yi, 0, t.xbc[r*C+cOff:], 1, S, P, N)
			// Intra-chunk row of M, from j = i down while the decay matters.
			dec := 1.0
			j0 := i
			for j := i; j >= 0; j-- {
				mrow[j] = float32(float64(cb[i*ssdChunk+j]) * dec * dtv[j])
				j0 = j
				dec *= ea[j]
				if dec < 1e-30 {
					break
				}
			}
			mrow[i] += D
			axpyRows(yi, float32(e), mrow[j0:], 1, t.xbc[(r0+j0)*C+h*P:], C, i+1-j0)
		}
		// State: S = e_{L-1}·S + Σ_j w_j·B_j ⊗ x_j, w_j = Π_{j<u<L} a_u · dt_j.
		w := 1.0
		var wj [1]float32
		for j := L - 1; j >= 0; j-- {
			wj[0] = float32(w * dtv[j])
			axpyRows(xw[j*P:(j+1)*P], 0, wj[:], 1, t.xbc[(r0+j)*C+h*P:], 0, 1)
			w *= ea[j]
		}
		for st := range N {
			axpyRows(S[st*P:(st+1)*P], float32(e), t.xbc[r0*C+bOff+st:], C, xw, P, L)
		}
	}
}
