package cpu

import (
	"fmt"
	"math"
)

// PagedKV is one layer's paged KV cache. K and V each hold NumSlots rows of
// KVHeads*HeadDim floats. A sequence's token at position pos lives in slot
// pageTable[pos/PageSize]*PageSize + pos%PageSize.
type PagedKV struct {
	K, V                       []float32
	PageSize, KVHeads, HeadDim int
}

func (kv PagedKV) rowLen() int { return kv.KVHeads * kv.HeadDim }

// slot maps a position through the page table, panicking on a slot outside
// the cache (a corrupt page table must not write foreign memory silently).
func (kv PagedKV) slot(pageTable []int32, pos int) int {
	s := int(pageTable[pos/kv.PageSize])*kv.PageSize + pos%kv.PageSize
	if s < 0 || (s+1)*kv.rowLen() > len(kv.K) || (s+1)*kv.rowLen() > len(kv.V) {
		panic(fmt.Sprintf("cpu: kv slot %d for position %d is outside the cache", s, pos))
	}
	return s
}

func (kv PagedKV) check(what string) {
	if kv.PageSize <= 0 || kv.KVHeads <= 0 || kv.HeadDim <= 0 {
		panic(fmt.Sprintf("cpu: %s: page size %d, kv heads %d, head dim %d must be positive", what, kv.PageSize, kv.KVHeads, kv.HeadDim))
	}
}

// WriteKV stores n rows of k and v ([n, KVHeads*HeadDim]) for positions
// startPos..startPos+n-1.
func WriteKV(kv PagedKV, k, v []float32, n int, pageTable []int32, startPos int) {
	kv.check("write kv")
	w := kv.rowLen()
	if len(k) < n*w || len(v) < n*w {
		panic(fmt.Sprintf("cpu: write kv: %d rows of %d need %d floats, k has %d, v %d", n, w, n*w, len(k), len(v)))
	}
	for j := range n {
		s := kv.slot(pageTable, startPos+j)
		copy(kv.K[s*w:(s+1)*w], k[j*w:(j+1)*w])
		copy(kv.V[s*w:(s+1)*w], v[j*w:(j+1)*w])
	}
}

// AttentionScratch is the number of scratch floats Attention needs: one score
// row of startPos+n per worker.
func AttentionScratch(p *Pool, n, startPos int) int { return p.Threads() * (startPos + n) }

type attnTask struct {
	out, q    []float32
	n, nHeads int
	kv        PagedKV
	pageTable []int32
	startPos  int
	scale     float32
	scratch   []float32
	ch        chunker
}

func (t *attnTask) run(worker int) {
	L := t.startPos + t.n
	sc := t.scratch[worker*L : (worker+1)*L]
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		t.one(c/t.nHeads, c%t.nHeads, sc)
	}
}

// one computes query row i, head h.
func (t *attnTask) one(i, h int, scores []float32) {
	kv := t.kv
	d := kv.HeadDim
	w := kv.rowLen()
	qw := t.nHeads * d
	kvh := h / (t.nHeads / kv.KVHeads)
	q := t.q[i*qw+h*d : i*qw+(h+1)*d]
	o := t.out[i*qw+h*d : i*qw+(h+1)*d]
	last := t.startPos + i
	scores = scores[:last+1]
	ps := kv.PageSize
	mx := float32(math.Inf(-1))
	var four [4]float32
	for pos := 0; pos <= last; {
		base := kv.slot(t.pageTable, pos) - pos%ps
		end := min(last+1, pos-pos%ps+ps)
		// Four consecutive positions of a page are four cache rows w apart.
		for ; pos+4 <= end; pos += 4 {
			off := (base+pos%ps)*w + kvh*d
			if !dot4Strided(kv.K[off:], w, q, &four) {
				break
			}
			for j, s := range four {
				s *= t.scale
				scores[pos+j] = s
				mx = max(mx, s)
			}
		}
		for ; pos < end; pos++ {
			off := (base+pos%ps)*w + kvh*d
			s := dotF32(q, kv.K[off:off+d]) * t.scale
			scores[pos] = s
			mx = max(mx, s)
		}
	}
	sum := expSubSum(scores, mx)
	clear(o)
	for pos := 0; pos <= last; {
		base := kv.slot(t.pageTable, pos) - pos%ps
		end := min(last+1, pos-pos%ps+ps)
		for ; pos+4 <= end; pos += 4 {
			off := (base+pos%ps)*w + kvh*d
			if !axpy4Strided(o, (*[4]float32)(scores[pos:pos+4]), kv.V[off:], w) {
				break
			}
		}
		for ; pos < end; pos++ {
			off := (base+pos%ps)*w + kvh*d
			axpy(o, scores[pos], kv.V[off:off+d])
		}
	}
	inv := float32(1 / sum)
	for j := range o {
		o[j] *= inv
	}
}

// Attention computes causal grouped-query attention over the paged cache for
// one sequence. q and out are [n, nHeads*HeadDim]; query row i is at position
// startPos+i and attends to positions 0..startPos+i, which must already be
// written (WriteKV). Query head h reads KV head h/(nHeads/KVHeads). scale is
// usually 1/sqrt(HeadDim). scratch needs AttentionScratch(p, n, startPos)
// floats. (row, head) pairs are split over the pool; nothing is allocated.
func (p *Pool) Attention(out, q []float32, n, nHeads int, kv PagedKV, pageTable []int32, startPos int, scale float32, scratch []float32) {
	kv.check("attention")
	if nHeads <= 0 || nHeads%kv.KVHeads != 0 {
		panic(fmt.Sprintf("cpu: attention: %d query heads is not a positive multiple of %d kv heads", nHeads, kv.KVHeads))
	}
	width := nHeads * kv.HeadDim
	if n < 0 || startPos < 0 || len(q) < n*width || len(out) < n*width {
		panic(fmt.Sprintf("cpu: attention n=%d start=%d: q has %d floats, out %d, need %d", n, startPos, len(q), len(out), n*width))
	}
	if need := AttentionScratch(p, n, startPos); len(scratch) < need {
		panic(fmt.Sprintf("cpu: attention: scratch has %d floats, need %d", len(scratch), need))
	}
	if n == 0 {
		return
	}
	if need := (startPos + n + kv.PageSize - 1) / kv.PageSize; len(pageTable) < need {
		panic(fmt.Sprintf("cpu: attention: page table has %d pages, positions up to %d need %d", len(pageTable), startPos+n-1, need))
	}
	if p.Threads() == 1 {
		t := attnTask{out: out, q: q, n: n, nHeads: nHeads, kv: kv, pageTable: pageTable, startPos: startPos, scale: scale, scratch: scratch}
		sc := scratch[:startPos+n]
		for c := range n * nHeads {
			t.one(c/nHeads, c%nHeads, sc)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at = attnTask{out: out, q: q, n: n, nHeads: nHeads, kv: kv, pageTable: pageTable, startPos: startPos, scale: scale, scratch: scratch}
	p.at.ch.reset(n * nHeads)
	p.parallel(&p.at)
	p.at = attnTask{}
}
