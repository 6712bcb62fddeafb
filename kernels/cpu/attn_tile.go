package cpu

import (
	"encoding/binary"
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
	// The part's share of the item's keys, in whole tiles.
	tiles := (a.hi - a.lo + attnBK - 1) / attnBK
	kFrom := a.lo + part*tiles/t.splits*attnBK
	kTo := min(a.hi, a.lo+(part+1)*tiles/t.splits*attnBK)
	if a.m < attnVecMaxM {
		t.keysInPlace(w, &a, kFrom, kTo)
	} else {
		t.keysTiled(w, &a, kFrom, kTo, mp)
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

// keysTiled folds keys kFrom..kTo-1 into the item's output a tile of attnBK
// at a time: decoded and transposed, scored and summed by the microkernels
// for the mp (padded) query vectors.
func (t *attnCall) keysTiled(w *attnWork, a *attnItem, kFrom, kTo, mp int) {
	kv := t.kv
	d, dvp := kv.HeadDim, a.dvp
	// Values: the decoded value tile, or for a latent cache the key tile's
	// first dv columns when a 16-column strip never runs past a key row.
	vs, ldv, decodeV := w.vt, dvp, true
	if kv.VInK && dvp <= d {
		vs, ldv, decodeV = w.kt, d, false
	}
	for k0 := kFrom; k0 < kTo; k0 += attnBK {
		kn := min(attnBK, kTo-k0)
		kpad := round16(kn)
		t.loadTile(w, a, k0, kn, kpad, decodeV)
		for p := 0; p < kpad; p += 16 {
			attnTile(w.s[p:], attnBK, w.qs, d, mp, w.kp[p*d:], 16, d, false)
		}
		t.softmaxTile(w, a, k0, kn, kpad, mp, attnBK)
		for c := 0; c < dvp; c += 16 {
			attnTile(w.o[c:], dvp, w.s, attnBK, mp, vs[c:], ldv, kn, true)
		}
	}
}

// keysInPlace is keysTiled for fewer than attnVecMaxM query vectors (MHA
// decode): dot products and value sums straight from the cache rows beat
// decoding and transposing tiles, and longer tiles (attnVecBK) keep the key
// and value streams long.
func (t *attnCall) keysInPlace(w *attnWork, a *attnItem, kFrom, kTo int) {
	for k0 := kFrom; k0 < kTo; k0 += attnVecBK {
		kn := min(attnVecBK, kTo-k0)
		t.scoresVec(w, a, k0, kn)
		t.softmaxTile(w, a, k0, kn, kn, a.m, attnVecBK)
		t.valuesVec(w, a, k0, kn)
	}
}

// loadTile decodes the keys (and values) of positions k0..k0+kn-1 of KV
// head a.g into the tile, zeroes rows kn..kpad-1, and transposes the keys
// into panels.
func (t *attnCall) loadTile(w *attnWork, a *attnItem, k0, kn, kpad int, values bool) {
	kv := t.kv
	d, dv, dvp := kv.HeadDim, kv.VHeadDim, a.dvp
	for j := 0; j < kn; {
		s := kv.slot(a.table, k0+j)
		run := kv.pageRun(k0+j, kn-j)
		kv.decodeRows(w.kt[j*d:], d, s, run, a.g, false)
		if values && !kv.VInK {
			kv.decodeRows(w.vt[j*dvp:], dvp, s, run, a.g, true)
		}
		j += run
	}
	clear(w.kt[kn*d : kpad*d])
	for p := 0; p < kpad; p += 16 {
		transpose16(w.kp[p*d:][:16*d], w.kt[p*d:][:16*d], d)
	}
	if !values {
		return
	}
	for j := range kpad {
		vt := w.vt[j*dvp:][:dvp]
		switch {
		case j >= kn:
			clear(vt)
			continue
		case kv.VInK:
			copy(vt[:dv], w.kt[j*d:][:dv])
		}
		clear(vt[dv:])
	}
}

// attnVecMaxM is the number of query vectors below which an item reads keys
// and values straight from the cache (keysInPlace) instead of through
// decoded, transposed tiles: MHA decode has one.
const attnVecMaxM = 4

// attnVecBK is the keys per tile of that path: its few score rows of
// attnVecBK fit the scratch's attnMaxM rows of attnBK.
const attnVecBK = attnBK * attnMaxM / attnVecMaxM

// pageRun is the length of the run of consecutive cache rows that holds
// positions pos.. (at most n of them): the rest of pos's page.
func (kv PagedKV) pageRun(pos, n int) int { return min(n, kv.PageSize-pos%kv.PageSize) }

// scoresVec computes the scores of the item's query vectors against keys
// k0..k0+kn-1 four rows at a time: from the cache's own rows for f32, f16
// and bf16, from rows decoded a page run at a time otherwise.
func (t *attnCall) scoresVec(w *attnWork, a *attnItem, k0, kn int) {
	kv := t.kv
	d := kv.HeadDim
	dt, direct := rowDType(kv.Type)
	for j := 0; j < kn; {
		s := kv.slot(a.table, k0+j)
		run := kv.pageRun(k0+j, kn-j)
		var rows []byte
		var rb int
		if !direct {
			run = min(run, attnBK) // the decoded rows go to the key tile
		}
		if direct {
			rows, _, rb, _ = kv.headRows(s, a.g, false)
			t.prefetchRun(a, k0+j+run, k0+kn, false)
			vrows, _, vrb, _ := kv.headRows(s, a.g, true)
			prefetchRows(vrows, vrb, run, kv.Type.RowBytes(kv.VHeadDim))
		} else {
			kv.decodeRows(w.kt, d, s, run, a.g, false)
		}
		for r := range a.m {
			q := w.qs[r*d:][:d]
			out := w.s[r*attnVecBK+j:][:run]
			i := 0
			if direct {
				i = dots16Rows(dt, rows, rb, q, out) // whole pages on AVX-512
			}
			for ; i+4 <= run; i += 4 {
				four := (*[4]float32)(out[i : i+4])
				if direct && !rows4(dt, rows[i*rb:], rb, q, four) || !direct && !dot4Strided(w.kt[i*d:], d, q, four) {
					break
				}
			}
			for ; i < run; i++ {
				switch {
				case !direct:
					out[i] = dotF32(q, w.kt[i*d:][:d])
				case dt == F32:
					out[i] = dotF32(q, bytesF32(rows[i*rb:][:4*d]))
				case dt == F16:
					out[i] = dotF16(rows[i*rb:], q)
				default:
					out[i] = dotBF16(rows[i*rb:], q)
				}
			}
		}
		j += run
	}
}

// valuesVec adds the tile's probabilities times its values to the item's
// output rows, four value rows at a time: from the cache's own rows for
// f32, f16 and bf16, from rows decoded a page run at a time otherwise.
func (t *attnCall) valuesVec(w *attnWork, a *attnItem, k0, kn int) {
	kv := t.kv
	dv, dvp := kv.VHeadDim, a.dvp
	dt, direct := rowDType(kv.Type)
	for j := 0; j < kn; {
		s := kv.slot(a.table, k0+j)
		run := kv.pageRun(k0+j, kn-j)
		var rows []byte
		var rb int
		if !direct {
			run = min(run, attnBK) // the decoded rows go to the value tile
		}
		if direct {
			rows, _, rb, _ = kv.headRows(s, a.g, true)
			t.prefetchRun(a, k0+j+run, k0+kn, true)
		} else {
			kv.decodeRows(w.vt, dvp, s, run, a.g, true)
		}
		for r := range a.m {
			o := w.o[r*dvp:][:dv]
			p := w.s[r*attnVecBK+j:][:run]
			vrows := rows
			if direct {
				c := axpy64Rows(dt, o, p, rows, rb) // 64-column strips on AVX-512
				o, vrows = o[c:], rows[c*rowBytesOf(dt):]
			}
			if len(o) == 0 {
				continue
			}
			i := 0
			for ; i+4 <= run; i += 4 {
				four := (*[4]float32)(p[i : i+4])
				if direct && !axpy4Rows(dt, o, four, vrows[i*rb:], rb) || !direct && !axpy4Strided(o, four, w.vt[i*dvp:], dvp) {
					break
				}
			}
			for ; i < run; i++ {
				if direct {
					axpyRow(dt, o, p[i], vrows[i*rb:])
				} else {
					axpy(o, p[i], w.vt[i*dvp:][:dv])
				}
			}
		}
		j += run
	}
}

// prefetchRun prefetches the cache rows of the item's keys (v: values) in
// the page run that starts at position pos, if pos < end: the in-place
// paths read one run while the next is on its way.
func (t *attnCall) prefetchRun(a *attnItem, pos, end int, v bool) {
	if pos >= end {
		return
	}
	kv := t.kv
	n := kv.HeadDim
	if v {
		n = kv.VHeadDim
	}
	rows, _, rb, _ := kv.headRows(kv.slot(a.table, pos), a.g, v)
	prefetchRows(rows, rb, kv.pageRun(pos, end-pos), kv.Type.RowBytes(n))
}

// rowDType is the weight dtype whose kernels read a cache encoding in place
// (f32, f16, bf16), or false.
func rowDType(t KVType) (DType, bool) {
	switch t {
	case KVF32:
		return F32, true
	case KVF16:
		return F16, true
	case KVBF16:
		return BF16, true
	}
	return 0, false
}

// axpyRow adds a times one stored row of dt (len(y) elements) to y.
func axpyRow(dt DType, y []float32, a float32, row []byte) {
	switch dt {
	case F32:
		axpy(y, a, bytesF32(row[:4*len(y)]))
	case F16:
		for i := range y {
			y[i] += a * F16ToF32(binary.LittleEndian.Uint16(row[2*i:]))
		}
	default:
		for i := range y {
			y[i] += a * BF16ToF32(binary.LittleEndian.Uint16(row[2*i:]))
		}
	}
}

// softmaxTile soft-caps and masks the scores of one tile and folds them into
// each query vector's running maximum and sum, leaving exp(s - max) in s
// (0 where masked) and rescaling the output rows already accumulated.
func (t *attnCall) softmaxTile(w *attnWork, a *attnItem, k0, kn, kpad, mp, ld int) {
	win := t.o.Window
	masked := k0+kn-1 > a.first || kn < kpad || (win > 0 && k0 < a.last-win+1)
	dvp := a.dvp
	for r := range a.m {
		row := w.s[r*ld:][:kpad]
		if c := t.o.SoftCap; c > 0 {
			SoftCap(row[:kn], c)
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
		clear(w.s[r*ld:][:kpad])
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

// rowBytesOf is the bytes per element of the row dtypes the in-place
// attention kernels read (F32, F16, BF16), or 0.
func rowBytesOf(dt DType) int {
	switch dt {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}
