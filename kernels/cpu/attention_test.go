package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// attnShape is a cache layout and the options of the calls over it.
type attnShape struct {
	t                        KVType
	nHeads, kvHeads, hd, vhd int
	ps                       int
	vInK                     bool
	window                   int
	softCap                  float32
	sinks                    bool
}

func (s attnShape) String() string {
	str := fmt.Sprintf("%v/h%d-kv%d-d%d-v%d-ps%d", s.t, s.nHeads, s.kvHeads, s.hd, s.vhd, s.ps)
	if s.vInK {
		str += "-latent"
	}
	if s.window > 0 {
		str += fmt.Sprintf("-win%d", s.window)
	}
	if s.softCap > 0 {
		str += "-cap"
	}
	if s.sinks {
		str += "-sinks"
	}
	return str
}

// attnFixture is a cache filled for some sequences, with the queries' options.
type attnFixture struct {
	s      attnShape
	kv     PagedKV
	tables [][]int32
	opts   AttnOpts
	rows   map[rowKey][]float64 // refRow's decodings
}

type rowKey struct {
	slot, g int
	v       bool
}

// newAttnFixture builds a cache of spare pages filled with encoded random
// rows (other sequences' data), and for each length a page table over a
// shuffled subset, with positions 0..length-1 written through WriteKV in two
// chunks. Table entries of pages wholly before every query's window are set
// to -1 (released) when released is set and the window allows.
func newAttnFixture(r *rand.Rand, s attnShape, lengths []int, minQueryPos int, released bool) *attnFixture {
	pages := 0
	for _, l := range lengths {
		pages += (l + s.ps - 1) / s.ps
	}
	numPages := pages + 5
	slots := numPages * s.ps
	kv := NewPagedKV(s.t, slots, s.ps, s.kvHeads, s.hd, s.vhd, s.vInK)
	kr, vr := s.kvHeads*s.hd, s.kvHeads*s.vhd
	garbage := randVec(r, kr+vr, 30)
	for slot := range slots {
		kv.writeRow(slot, garbage[:kr], garbage[kr:])
	}
	perm := r.Perm(numPages)
	f := &attnFixture{s: s, kv: kv, rows: map[rowKey][]float64{}}
	next := 0
	for _, l := range lengths {
		var table []int32
		for range (l + s.ps - 1) / s.ps {
			table = append(table, int32(perm[next]))
			next++
		}
		k, v := randVec(r, l*kr, 1), randVec(r, l*vr, 1)
		cut := l / 3
		WriteKV(kv, k, v, cut, table, 0)
		WriteKV(kv, k[cut*kr:], v[cut*vr:], l-cut, table, cut)
		if released && s.window > 0 {
			for p := range max(0, minQueryPos-s.window+1) / s.ps {
				table[p] = -1
			}
		}
		f.tables = append(f.tables, table)
	}
	f.opts = AttnOpts{Scale: float32(1 / math.Sqrt(float64(s.hd))), Window: s.window, SoftCap: s.softCap}
	if s.sinks {
		f.opts.Sinks = randVec(r, s.nHeads, 2)
	}
	return f
}

// refRow decodes, in float64 from the format definitions, head g's key (v:
// value) at position pos of table: the test's own addressing of the layout.
func (f *attnFixture) refRow(table []int32, pos, g int, v bool) []float64 {
	s, kv := f.s, f.kv
	slot := int(table[pos/s.ps])*s.ps + pos%s.ps
	if r, ok := f.rows[rowKey{slot, g, v}]; ok {
		return r
	}
	row, n, data, scales := s.kvHeads*s.hd, s.hd, kv.K, kv.KScale
	off := g * s.hd
	if v {
		n = s.vhd
		if !s.vInK {
			row, data, scales, off = s.kvHeads*s.vhd, kv.V, kv.VScale, g*s.vhd
		}
	}
	rb, sb := s.t.RowBytes(row), s.t.ScaleBytes(row)
	d := data[slot*rb+s.t.RowBytes(off):]
	var sc []byte
	if sb > 0 {
		sc = scales[slot*sb+s.t.ScaleBytes(off):]
	}
	r := refDecodeKV(s.t, d, sc, n)
	f.rows[rowKey{slot, g, v}] = r
	return r
}

// refAttend is float64 attention of one query row (all heads) at position
// qp over the dequantized cache, with the fixture's window, soft cap and
// sinks.
func (f *attnFixture) refAttend(q []float32, qp int, table []int32) []float64 {
	s := f.s
	out := make([]float64, s.nHeads*s.vhd)
	group := s.nHeads / s.kvHeads
	lo := 0
	if s.window > 0 {
		lo = max(0, qp-s.window+1)
	}
	for h := range s.nHeads {
		g := h / group
		qh := q[h*s.hd : (h+1)*s.hd]
		scores := make([]float64, 0, qp+1-lo)
		mx := math.Inf(-1)
		for p := lo; p <= qp; p++ {
			k := f.refRow(table, p, g, false)
			var dot float64
			for j, kv := range k {
				dot += float64(qh[j]) * kv
			}
			sc := dot * float64(f.opts.Scale)
			if c := float64(s.softCap); c > 0 {
				sc = c * math.Tanh(sc/c)
			}
			scores = append(scores, sc)
			mx = math.Max(mx, sc)
		}
		var sink float64
		if s.sinks {
			sink = float64(f.opts.Sinks[h])
			mx = math.Max(mx, sink)
		}
		var den float64
		for i := range scores {
			scores[i] = math.Exp(scores[i] - mx)
			den += scores[i]
		}
		if s.sinks {
			den += math.Exp(sink - mx)
		}
		o := out[h*s.vhd : (h+1)*s.vhd]
		for i, w := range scores {
			v := f.refRow(table, lo+i, g, true)
			for j := range o {
				o[j] += w / den * v[j]
			}
		}
	}
	return out
}

func checkNear(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= 3e-5*(1+math.Abs(want[i]))) {
			t.Fatalf("%s: out[%d] = %v, want %v (diff %g)", what, i, got[i], want[i], d)
		}
	}
}

// attnPools are the pool sizes the tests run on: single-threaded, two
// workers, three (more workers than some calls have items: split parts).
func attnPools() []*Pool { return []*Pool{nil, NewPool(2), NewPool(3)} }

func attnShapes() []attnShape {
	var out []attnShape
	for _, kt := range []KVType{KVF32, KVF16, KVBF16, KVE4M3, KVE5M2, KVMXFP8, KVNVFP4} {
		out = append(out,
			attnShape{t: kt, nHeads: 8, kvHeads: 2, hd: 64, vhd: 64, ps: 16},                                       // GQA
			attnShape{t: kt, nHeads: 3, kvHeads: 3, hd: 96, vhd: 160, ps: 16},                                      // MHA: decode reads whole pages in place
			attnShape{t: kt, nHeads: 4, kvHeads: 4, hd: 192, vhd: 128, ps: 6},                                      // MLA expanded prefill shape
			attnShape{t: kt, nHeads: 20, kvHeads: 1, hd: 96, vhd: 64, ps: 16, vInK: true},                          // latent cache
			attnShape{t: kt, nHeads: 8, kvHeads: 2, hd: 32, vhd: 32, ps: 4, window: 21, sinks: true},               // gpt-oss
			attnShape{t: kt, nHeads: 4, kvHeads: 2, hd: 32, vhd: 32, ps: 16, window: 70, softCap: 5},               // Gemma 2
			attnShape{t: kt, nHeads: 2, kvHeads: 1, hd: 64, vhd: 32, ps: 16, vInK: true, window: 40},               // latent, few heads
			attnShape{t: kt, nHeads: 52, kvHeads: 1, hd: 64, vhd: 32, ps: 16, vInK: true, softCap: 3, sinks: true}, // head blocks
		)
		if kt.ScaleBlock() == 0 {
			out = append(out, attnShape{t: kt, nHeads: 6, kvHeads: 3, hd: 20, vhd: 12, ps: 5}) // ragged dims
		}
	}
	return out
}

// TestAttention runs prefill and chunked prefill for every encoding, shape
// and option against the float64 reference on the dequantized cache, on the
// portable, AVX2 and AVX-512 kernels and one to three workers.
func TestAttention(t *testing.T) {
	pools := attnPools()
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, s := range attnShapes() {
		t.Run(s.String(), func(t *testing.T) {
			for _, c := range []struct{ start, n int }{{0, 75}, {130, 37}, {200, 1}} {
				r := newRand(uint64(40 + c.start))
				f := newAttnFixture(r, s, []int{c.start + c.n}, c.start, true)
				q := randVec(r, c.n*s.nHeads*s.hd, 2)
				want := make([]float64, 0, c.n*s.nHeads*s.vhd)
				for i := range c.n {
					want = append(want, f.refAttend(q[i*s.nHeads*s.hd:], c.start+i, f.tables[0])...)
				}
				gemmImpls(t, func(t *testing.T) {
					for pi, p := range pools {
						out := make([]float32, len(want))
						scratch := make([]float32, AttentionScratch(p.Threads(), s.hd, s.vhd))
						p.Attention(out, q, c.n, s.nHeads, f.kv, f.tables[0], c.start, f.opts, scratch)
						checkNear(t, fmt.Sprintf("start %d n %d pool %d", c.start, c.n, pi), out, want)
					}
				})
			}
		})
	}
}

// TestDecodeAttention runs batched decode (rows at different positions of
// different sequences) against the reference; one row alone on three
// workers splits its keys into parts.
func TestDecodeAttention(t *testing.T) {
	pools := attnPools()
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	shapes := attnShapes()
	shapes = append(shapes, attnShape{t: KVF16, nHeads: 16, kvHeads: 1, hd: 576, vhd: 512, ps: 16, vInK: true}) // DeepSeek's latent rows
	for _, s := range shapes {
		t.Run(s.String(), func(t *testing.T) {
			for _, positions := range [][]int32{{0, 45, 190, 9}, {300}} {
				r := newRand(uint64(50 + len(positions)))
				lengths := make([]int, len(positions))
				minPos := math.MaxInt
				for i, p := range positions {
					lengths[i] = int(p) + 1
					minPos = min(minPos, int(p))
				}
				f := newAttnFixture(r, s, lengths, minPos, len(positions) == 1)
				q := randVec(r, len(positions)*s.nHeads*s.hd, 2)
				var want []float64
				for i, p := range positions {
					want = append(want, f.refAttend(q[i*s.nHeads*s.hd:], int(p), f.tables[i])...)
				}
				gemmImpls(t, func(t *testing.T) {
					for pi, p := range pools {
						out := make([]float32, len(want))
						scratch := make([]float32, AttentionScratch(p.Threads(), s.hd, s.vhd))
						p.DecodeAttention(out, q, s.nHeads, f.kv, positions, f.tables, f.opts, scratch)
						checkNear(t, fmt.Sprintf("positions %v pool %d", positions, pi), out, want)
					}
				})
			}
		})
	}
}

// TestDecodeLongContext: decode rows longer than one in-place tile
// (attnVecBK keys) and than one split part, with and without a window, soft
// cap and sinks.
func TestDecodeLongContext(t *testing.T) {
	pools := attnPools()
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, s := range []attnShape{
		{t: KVF16, nHeads: 4, kvHeads: 4, hd: 32, vhd: 32, ps: 16},
		{t: KVE4M3, nHeads: 2, kvHeads: 1, hd: 32, vhd: 32, ps: 16, window: 900, softCap: 8, sinks: true},
		{t: KVF32, nHeads: 8, kvHeads: 2, hd: 32, vhd: 32, ps: 16, window: 1000},
	} {
		t.Run(s.String(), func(t *testing.T) {
			r := newRand(60)
			positions := []int32{1700, 801}
			f := newAttnFixture(r, s, []int{1701, 802}, 801, false)
			q := randVec(r, len(positions)*s.nHeads*s.hd, 2)
			var want []float64
			for i, p := range positions {
				want = append(want, f.refAttend(q[i*s.nHeads*s.hd:], int(p), f.tables[i])...)
			}
			gemmImpls(t, func(t *testing.T) {
				for pi, p := range pools {
					out := make([]float32, len(want))
					p.DecodeAttention(out, q, s.nHeads, f.kv, positions, f.tables, f.opts, make([]float32, AttentionScratch(p.Threads(), s.hd, s.vhd)))
					checkNear(t, fmt.Sprintf("pool %d", pi), out, want)
					one := make([]float32, len(want)/2)
					p.DecodeAttention(one, q, s.nHeads, f.kv, positions[:1], f.tables[:1], f.opts, make([]float32, AttentionScratch(p.Threads(), s.hd, s.vhd)))
					checkNear(t, fmt.Sprintf("pool %d, one row (split)", pi), one, want[:len(one)])
				}
			})
		})
	}
}

// TestDecodeMatchesPrefill: a decode row equals the last row of a prefill
// over the same cache, bit for bit when nothing splits (one worker).
func TestDecodeMatchesPrefill(t *testing.T) {
	r := newRand(3)
	s := attnShape{t: KVBF16, nHeads: 8, kvHeads: 2, hd: 64, vhd: 64, ps: 16}
	f := newAttnFixture(r, s, []int{150}, 0, false)
	q := randVec(r, 10*s.nHeads*s.hd, 1)
	scratch := make([]float32, AttentionScratch(1, s.hd, s.vhd))
	pre := make([]float32, 10*s.nHeads*s.vhd)
	(*Pool)(nil).Attention(pre, q, 10, s.nHeads, f.kv, f.tables[0], 140, f.opts, scratch)
	dec := make([]float32, s.nHeads*s.vhd)
	(*Pool)(nil).DecodeAttention(dec, q[9*s.nHeads*s.hd:], s.nHeads, f.kv, []int32{149}, f.tables, f.opts, scratch)
	for i, v := range dec {
		if v != pre[9*s.nHeads*s.vhd+i] {
			t.Fatalf("element %d: decode %v, prefill %v", i, v, pre[9*s.nHeads*s.vhd+i])
		}
	}
}

func TestAttentionPanics(t *testing.T) {
	kv := NewPagedKV(KVF32, 16, 4, 2, 4, 4, false)
	q := make([]float32, 12)
	o := AttnOpts{Scale: 1}
	sc := make([]float32, AttentionScratch(1, 4, 4))
	for name, f := range map[string]func(){
		"heads not multiple": func() { (*Pool)(nil).Attention(q, q, 1, 3, kv, []int32{0}, 0, o, sc) },
		"short scratch":      func() { (*Pool)(nil).Attention(q, q, 1, 2, kv, []int32{0, 1}, 5, o, sc[:5]) },
		"slot outside cache": func() { WriteKV(kv, q, q, 1, []int32{4}, 0) },
		"short page table":   func() { (*Pool)(nil).Attention(q, q, 1, 2, kv, []int32{0}, 5, o, sc) },
		"zero scale":         func() { (*Pool)(nil).Attention(q, q, 1, 2, kv, []int32{0}, 0, AttnOpts{}, sc) },
		"short sinks": func() {
			(*Pool)(nil).Attention(q, q, 1, 2, kv, []int32{0}, 0, AttnOpts{Scale: 1, Sinks: []float32{1}}, sc)
		},
		"bad block dims":   func() { WriteKV(NewPagedKV(KVNVFP4, 16, 4, 2, 8, 8, false), q, q, 1, []int32{0}, 0) },
		"latent two heads": func() { WriteKV(NewPagedKV(KVF16, 16, 4, 2, 4, 4, true), q, q, 1, []int32{0}, 0) },
		"decode position":  func() { (*Pool)(nil).DecodeAttention(q, q, 2, kv, []int32{9}, [][]int32{{0}}, o, sc) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil {
					t.Fatal("no panic")
				} else if s := fmt.Sprint(r); len(s) < 5 || s[:4] != "cpu:" {
					t.Fatalf("panic %q is not package-prefixed", s)
				}
			}()
			f()
		})
	}
}
