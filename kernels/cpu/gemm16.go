package cpu

import "unsafe"

// Small-batch GEMM for MatMul with gemmMinM <= m <= gemmTMR x rows (batch
// decode). The packed GEMM (gemm.go) transposes every weight panel for each
// call, and at sixteen x rows that packing costs as much as the FMAs. Here the
// x block is packed instead, once per call, k-major and padded with zero rows
// to sixteen (xt[k*16+i] = x[i][k]; packPanel on x as a 16-row matrix), and
// the AVX-512 kernel (gemm16_amd64.s) reads sixteen weight rows in natural
// order: per k one zmm of x values and sixteen FMAs, each with one weight
// element as its embedded broadcast, accumulating the 16×16 tile transposed
// (tile[r*16+i]); the tile is scattered into out once per weight tile.
//
// F32 weights are read in place, except where their row stride is a multiple
// of 4 KiB (sixteen rows would share one L1 set; gemm16Alias) and for a last
// partial tile: those, and f16 and bf16, are staged chunk by chunk into a
// small f32 buffer with a padded stride, converted but not transposed. When
// the columns are a multiple of 16, each worker's tiles are pipelined
// (pipeTiles): the kernel that multiplies one staged chunk also stages the
// next (this tile's next chunk, or the first of the worker's next tile,
// which may be the next work item's or, in a MatMuls group, another
// weight's) into a second buffer and prefetches the same columns of the
// tile after that, so the weights' loads from memory wait beside the FMAs
// instead of in a staging loop of their own (gemmTPipe turns it off for the
// tests that compare the two schedules bit for bit).
// Without AVX-512 (or with a nil Pool, which has no room for xt) MatMul keeps
// the packed GEMM, whose AVX2 and Go kernels compute the same products.
const (
	gemmTMR     = 16          // x rows the kernel covers: one zmm per k
	gemmTStride = gemmKC + 16 // staged row stride in floats: not a 4 KiB multiple
)

// gemmTTask is one small-batch MatMul split into work items of grp
// consecutive 16-row weight tiles.
type gemmTTask struct {
	out, xt []float32
	m       int
	w       Matrix
	rb      int
	direct  bool // f32 full tiles read in place
	piped   bool // staged full tiles pipelined (gemmTPipe, cols a multiple of 16)
	ntile   int
	grp     int
	ch      chunker
}

// gemmT runs MatMul's small-batch path and reports whether it did (false:
// the kernel is not in use, p is nil, or m is too large).
func (p *Pool) gemmT(out, x []float32, m int, w Matrix, rb int) bool {
	if !p.gemmTFor(m) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.gt
	threads := p.Threads()
	t.init(out, p.packXT(x, m, w.Cols), m, w, rb, threads)
	if threads == 1 {
		t.run(0)
	} else {
		p.parallel(t)
	}
	t.release()
	return true
}

// gemmTFor reports whether MatMul's small-batch path serves m x rows of a
// float weight (m at least gemmMinM).
func (p *Pool) gemmTFor(m int) bool { return p != nil && m <= gemmTMR && gemmTOn() }

// packXT packs m rows of x (cols each) k-major into the pool's xt buffer,
// padded with zero rows to sixteen. p.mu must be held.
func (p *Pool) packXT(x []float32, m, cols int) []float32 {
	n := gemmTMR*cols + 16
	if cap(p.xt) < n {
		p.xt = make([]float32, n)
	}
	buf := p.xt[:n]
	off := int(-uintptr(unsafe.Pointer(&buf[0]))&63) / 4
	xt := buf[off : off+gemmTMR*cols]
	xm := Matrix{Type: F32, Rows: m, Cols: cols, Data: unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*m*cols)}
	packPanel(xt, xm, 4*cols, 0, m, 0, cols)
	return xt
}

// init lays out w's tiles over the packed x block xt for threads workers.
func (t *gemmTTask) init(out, xt []float32, m int, w Matrix, rb, threads int) {
	t.out, t.xt, t.m, t.w, t.rb = out, xt, m, w, rb
	t.direct = w.Type == F32 && rb%(4*gemm16Alias) != 0
	t.piped = gemmTPipe && !t.direct && w.Cols%16 == 0 && (w.Type == F32 || w.Type == F16 || w.Type == BF16)
	t.ntile = (w.Rows + gemmNR - 1) / gemmNR
	t.grp = max(1, t.ntile/(8*threads)) // about eight items per worker
	t.ch.reset(t.items())
}

// items is the number of work items init laid out.
func (t *gemmTTask) items() int { return (t.ntile + t.grp - 1) / t.grp }

// release drops the caller's memory.
func (t *gemmTTask) release() { t.out, t.xt, t.w.Data = nil, nil, nil }

// gemmTPipe enables the pipelined schedule for staged tiles (the tests turn
// it off to compare).
var gemmTPipe = true

// gemmTScratch is a worker's tile and two staging buffers, on its stack as
// in gemmTask.run.
type gemmTScratch struct {
	tile [gemmTMR * gemmNR]float32
	buf  [2*gemmNR*gemmTStride + 16]float32
}

// stage is staging buffer j (0 or 1), 64-byte aligned.
func (s *gemmTScratch) stage(j int) []float32 {
	off := int(-uintptr(unsafe.Pointer(&s.buf[0]))&63)/4 + j*gemmNR*gemmTStride
	return s.buf[off : off+gemmNR*gemmTStride]
}

func (t *gemmTTask) run(int) {
	var s gemmTScratch
	if t.piped {
		src := tileSource{task: t}
		pipeTiles(&src, src.claim(), &s)
		return
	}
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		for i := c * t.grp; i < min((c+1)*t.grp, t.ntile); i++ {
			t.tile(i, &s.tile, s.stage(0))
		}
	}
}

// tileRun is the tiles [i0, e) of a work item of a pipelined task, at tile
// i. A zero tileRun (t nil) ends a pipeline.
type tileRun struct {
	t    *gemmTTask
	i, e int
}

// nr is the number of weight rows in r's tile (sixteen but in a partial
// last tile).
func (r tileRun) nr() int { return min(gemmNR, r.t.w.Rows-r.i*gemmNR) }

// rows is r's tile's weight rows from column k0 to the end of the matrix
// and their stride, or nothing for a zero tileRun: what the kernel
// prefetches while staging the tile before it.
func (r tileRun) rows(k0 int) ([]byte, int) {
	if r.t == nil {
		return nil, 0
	}
	return r.t.w.Data[r.i*gemmNR*r.t.rb+rowBytesOf(r.t.w.Type)*k0:], r.t.rb
}

// runOf is item c's tileRun, at its first tile.
func (t *gemmTTask) runOf(c int) tileRun {
	return tileRun{t: t, i: c * t.grp, e: min((c+1)*t.grp, t.ntile)}
}

// tileSource hands a worker's pipeline its next run: the next item of one
// task, or of a MatMuls group (matmul_group.go), where an item that is not
// a pipelined run ends the pipeline and waits in pending for the worker.
type tileSource struct {
	task    *gemmTTask
	g       *groupTask
	pending int // the group item claimed and not piped, or -1
}

func (src *tileSource) claim() tileRun {
	if src.g == nil {
		if c := src.task.ch.take(); c >= 0 {
			return src.task.runOf(c)
		}
		return tileRun{}
	}
	c := src.g.ch.take()
	if c < 0 {
		return tileRun{}
	}
	if i, lc := src.g.locate(c); src.g.kind[i] == groupTiles && src.g.gt[i].piped {
		return src.g.gt[i].runOf(lc)
	}
	src.pending = c
	return tileRun{}
}

// after is the tile the worker computes after r's: the next of r's run, or
// the first of a run claimed now.
func (src *tileSource) after(r tileRun) tileRun {
	switch {
	case r.t == nil:
		return r
	case r.i+1 < r.e:
		r.i++
		return r
	}
	return src.claim()
}

// pipeTiles computes the tiles of run r and of the runs after it that src
// hands out, chunk by chunk, each kernel call staging the chunk after its
// own into the other buffer and prefetching the same columns of the tile
// after that one. The worker claims a run when its first tile becomes the
// one to prefetch, about a tile before it is staged, so its weights are on
// their way as a run's own tiles' are and a worker stages only its first
// chunk on its own (the other workers share one tile less at the end). The
// last tile of a task whose rows are not a multiple of sixteen stages its
// nr rows only; rows past nr keep stale values, whose sums are never
// stored.
func pipeTiles(src *tileSource, r tileRun, s *gemmTScratch) {
	if r.t == nil {
		return
	}
	cur, next := s.stage(0), s.stage(1)
	r.t.stageChunk(cur, r.i*gemmNR, r.nr(), 0, min(gemmKC, r.t.w.Cols))
	nx := src.after(r)
	nn := src.after(nx)
	for r.t != nil {
		t := r.t
		cols := t.w.Cols
		for k0 := 0; k0 < cols; k0 += gemmKC {
			kc := min(gemmKC, cols-k0)
			st, sk, pt := r, k0+gemmKC, nx // staged: this tile's next chunk
			if sk >= cols {
				st, sk, pt = nx, 0, nn // or the next tile's first
			}
			xt := t.xt[k0*gemmTMR:]
			if u := st.t; u != nil {
				pf, pfs := pt.rows(sk)
				gemmTKernelStage(cur, gemmTStride, xt, kc, &s.tile, k0 > 0,
					next, u.w, u.rb, st.i*gemmNR, st.nr(), sk, min(gemmKC, u.w.Cols-sk), pf, pfs)
			} else {
				gemmTKernel(cur, gemmTStride, xt, kc, &s.tile, k0 > 0)
			}
			cur, next = next, cur
		}
		gemmTStore(&s.tile, t.out, r.i*gemmNR, t.w.Rows, t.m, r.nr())
		r, nx = nx, nn
		nn = src.after(nx)
	}
}

// stageChunk stages kc columns from k0 of the nr weight rows from r0 into
// stage (row stride gemmTStride): sixteen rows by the SIMD stager as far as
// it goes, the rest a row at a time. Staged rows past nr keep stale values:
// their sums are never stored.
func (t *gemmTTask) stageChunk(stage []float32, r0, nr, k0, kc int) {
	done := 0
	if nr == gemmNR {
		done = stageSIMD(stage, t.w, t.rb, r0, k0, kc)
	}
	if done < kc {
		for j := range nr {
			row := t.w.Data[(r0+j)*t.rb:][:t.rb]
			stageRow(stage[j*gemmTStride+done:][:kc-done], t.w.Type, row, k0+done)
		}
	}
}

// tile computes out for weight rows [16·i, 16·i+16) (fewer in the last
// tile) and all m x rows.
func (t *gemmTTask) tile(i int, tile *[gemmTMR * gemmNR]float32, stage []float32) {
	cols, rows := t.w.Cols, t.w.Rows
	r0 := i * gemmNR
	nr := min(gemmNR, rows-r0)
	if t.direct && nr == gemmNR {
		gemmTKernel(bytesF32(t.w.Data[r0*t.rb:]), cols, t.xt, cols, tile, false)
	} else {
		for k0 := 0; k0 < cols; k0 += gemmKC {
			kc := min(gemmKC, cols-k0)
			t.stageChunk(stage, r0, nr, k0, kc)
			gemmTKernel(stage, gemmTStride, t.xt[k0*gemmTMR:], kc, tile, k0 > 0)
		}
	}
	gemmTStore(tile, t.out, r0, rows, t.m, nr)
}

// stageRow converts len(dst) weights of a row from column k0 to f32.
func stageRow(dst []float32, t DType, row []byte, k0 int) {
	if t == F32 {
		copy(dst, bytesF32(row)[k0:])
		return
	}
	dequantRow(dst, t, row[2*k0:])
}
