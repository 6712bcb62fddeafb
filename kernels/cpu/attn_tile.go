package cpu

import (
	"math"
)

// attnWork is one worker's view of its tile scratch.
type attnWork struct {
	qs []float32 // [attnMaxM, d] the item's query vectors times the scale
	kt []float32 // [attnBK, d] the key tile, decoded, row-major
	kp []float32 // [attnBK/16][d, 16] the key tile as k-major 16-key panels
	vt []float32 // [attnBK, dvp] the value tile, decoded
	s  []float32 // [attnMaxM, attnBK] scores, then probabilities
	o  []float32 // [attnMaxM, dvp] unnormalised output
	m  [attnMaxM]float32
	l  [attnMaxM]float64
}

// bind points w at worker's share of the scratch.
func (t *attnCall) bind(w *attnWork, worker int) {
	kv := t.kv
	d, dvp := kv.HeadDim, round16(kv.VHeadDim)
	sc := t.scratch[worker*attnWorkerFloats(d, kv.VHeadDim):]
	for _, f := range []struct {
		dst *[]float32
		n   int
	}{{&w.qs, attnMaxM * d}, {&w.kt, attnBK * d}, {&w.kp, attnBK * d}, {&w.vt, attnBK * dvp}, {&w.s, attnMaxM * attnBK}, {&w.o, attnMaxM * dvp}} {
		*f.dst = sc[:f.n:f.n]
		sc = sc[f.n:]
	}
}

// compute runs part `part` of work item it on a worker's scratch: the item's
// key tiles from the part's share of [lo, hi), then either the normalised
// output (one part) or the partial result for combine.
func (t *attnCall) compute(it, part int, w *attnWork) {
	a := t.item(it)
	kv := t.kv
	d, dv, dvp := kv.HeadDim, kv.VHeadDim, a.dvp
	mp := a.m
	if mp > 1 {
		mp = (mp + 3) &^ 3 // the microkernels take rows four at a time
	}
	scale := t.o.Scale
	for ii := range a.i1 - a.i0 {
		for hh := range a.nh {
			src := a.q[(a.i0+ii)*a.qw+(a.h0+hh)*d:][:d]
			dst := w.qs[(ii*a.nh+hh)*d:][:d]
			for j, v := range src {
				dst[j] = v * scale
			}
		}
	}
	clear(w.qs[a.m*d : mp*d])
	clear(w.o[:mp*dvp])
	for r := range mp {
		w.m[r], w.l[r] = float32(math.Inf(-1)), 0
	}
	tiles := (a.hi - a.lo + attnBK - 1) / attnBK
	t0, t1 := part*tiles/t.splits, (part+1)*tiles/t.splits
	// Values: the decoded value tile, or for a latent cache the key tile's
	// first dv columns when a 16-column strip never runs past a key row.
	vs, ldv, decodeV := w.vt, dvp, true
	if kv.VInK && dvp <= d {
		vs, ldv, decodeV = w.kt, d, false
	}
	for tile := t0; tile < t1; tile++ {
		k0 := a.lo + tile*attnBK
		kn := min(attnBK, a.hi-k0)
		kpad := round16(kn)
		t.loadTile(w, &a, k0, kn, kpad, decodeV)
		for p := 0; p < kpad; p += 16 {
			attnTile(w.s[p:], attnBK, w.qs, d, mp, w.kp[p*d:], 16, d, false)
		}
		t.softmaxTile(w, &a, k0, kn, kpad, mp)
		for c := 0; c < dvp; c += 16 {
			attnTile(w.o[c:], dvp, w.s, attnBK, mp, vs[c:], ldv, kn, true)
		}
	}
	if t.splits > 1 {
		pb := t.scratch[t.partOffset(it, part):][:attnPartFloats(dv)]
		copy(pb, w.o[:a.m*dvp])
		for r := range a.m {
			pb[attnMaxM*dvp+r] = w.m[r]
			pb[attnMaxM*(dvp+1)+r] = float32(w.l[r])
		}
		return
	}
	for r := range a.m {
		ii, hh := r/a.nh, r%a.nh
		h := a.h0 + hh
		den := w.l[r]
		if t.o.Sinks != nil {
			den += math.Exp(float64(t.o.Sinks[h]) - float64(w.m[r]))
		}
		inv := float32(1 / den)
		dst := a.out[(a.i0+ii)*a.ow+h*dv:][:dv]
		for c, v := range w.o[r*dvp:][:dv] {
			dst[c] = v * inv
		}
	}
}

// loadTile decodes the keys (and values) of positions k0..k0+kn-1 of KV
// head a.g into the tile, zeroes rows kn..kpad-1, and transposes the keys
// into panels.
func (t *attnCall) loadTile(w *attnWork, a *attnItem, k0, kn, kpad int, values bool) {
	kv := t.kv
	d, dv, dvp := kv.HeadDim, kv.VHeadDim, a.dvp
	for j := range kpad {
		kt := w.kt[j*d:][:d]
		var vt []float32
		if values {
			vt = w.vt[j*dvp:][:dvp]
		}
		if j >= kn {
			clear(kt)
			clear(vt)
			continue
		}
		s := kv.slot(a.table, k0+j)
		data, scales, _ := kv.headRow(s, a.g, false)
		DecodeKV(kv.Type, kt, data, scales)
		if !values {
			continue
		}
		if kv.VInK {
			copy(vt[:dv], kt[:dv])
		} else {
			data, scales, _ = kv.headRow(s, a.g, true)
			DecodeKV(kv.Type, vt[:dv], data, scales)
		}
		clear(vt[dv:])
	}
	for p := 0; p < kpad; p += 16 {
		transpose16(w.kp[p*d:][:16*d], w.kt[p*d:][:16*d], d)
	}
}

// softmaxTile soft-caps and masks the scores of one tile and folds them into
// each query vector's running maximum and sum, leaving exp(s - max) in s
// (0 where masked) and rescaling the output rows already accumulated.
func (t *attnCall) softmaxTile(w *attnWork, a *attnItem, k0, kn, kpad, mp int) {
	win := t.o.Window
	masked := k0+kn-1 > a.first || kn < kpad || (win > 0 && k0 < a.last-win+1)
	dvp := a.dvp
	for r := range a.m {
		row := w.s[r*attnBK:][:kpad]
		if c := t.o.SoftCap; c > 0 {
			softCap(row[:kn], c)
		}
		if masked {
			qp := a.first + r/a.nh
			from, to := 0, min(kn, qp-k0+1) // columns [from, to) are visible
			if win > 0 {
				from = max(0, qp-win+1-k0)
			}
			if to <= from {
				clear(row)
				continue
			}
			for j := range from {
				row[j] = float32(math.Inf(-1))
			}
			for j := to; j < kpad; j++ {
				row[j] = float32(math.Inf(-1))
			}
		}
		bm := maxOf(row)
		if math.IsInf(float64(bm), -1) {
			clear(row)
			continue
		}
		mn := max(w.m[r], bm)
		corr := expf(w.m[r] - mn) // 0 while nothing was seen (m = -Inf)
		sum := expSubSum(row, mn)
		w.l[r] = w.l[r]*float64(corr) + sum
		if corr != 1 {
			o := w.o[r*dvp:][:dvp]
			for c := range o {
				o[c] *= corr
			}
		}
		w.m[r] = mn
	}
	for r := a.m; r < mp; r++ {
		clear(w.s[r*attnBK:][:kpad])
	}
}

// softCap replaces each x by c·tanh(x/c), computed as c·(1-e)/(1+e) with
// e = exp(-2|x|/c) through the vectorised exp.
func softCap(x []float32, c float32) {
	var e [attnBK]float32
	k := -2 / c
	for j, v := range x {
		e[j] = math.Float32frombits(math.Float32bits(v)&^(1<<31)) * k
	}
	expSubSum(e[:len(x)], 0)
	for j, v := range x {
		y := c * (1 - e[j]) / (1 + e[j])
		if v < 0 {
			y = -y
		}
		x[j] = y
	}
}

// attnTileGo is the portable microkernel (see attnTile).
func attnTileGo(c []float32, ldc int, x []float32, xs, m int, b []float32, ldb, kc int, acc bool) {
	for i := range m {
		var s [16]float32
		xr := x[i*xs:][:kc]
		for k, v := range xr {
			br := b[k*ldb:][:16]
			for j := range s {
				s[j] += v * br[j]
			}
		}
		cr := c[i*ldc:][:16]
		if acc {
			for j := range cr {
				cr[j] += s[j]
			}
		} else {
			copy(cr, s[:])
		}
	}
}

// transpose16Go finishes transpose16 from column k0.
func transpose16Go(dst, src []float32, d, k0 int) {
	for j := range 16 {
		row := src[j*d:][:d]
		for k := k0; k < d; k++ {
			dst[k*16+j] = row[k]
		}
	}
}
