package synth

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"

	"github.com/kvhost/kvhost/host/model/gguf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// chunkElems is the values drawn per generator chunk (and per write).
const chunkElems = 1 << 20

// maxHeader bounds the GGUF header (metadata and tensor infos) kept in
// memory while it is produced.
const maxHeader = 256 << 20

func (p tensorPlan) dims() []uint64 {
	d := []uint64{uint64(p.cols), uint64(p.rows)}
	if p.vec {
		d = d[:1]
	}
	if p.depth > 0 {
		d = append(d, uint64(p.depth))
	}
	return d
}

// stream writes exactly what gguf.Write(w, kvs, tensors, 0) writes for the
// generated tensors, without holding them: the header comes from gguf.Write
// itself, run over tensors whose data all alias one zeroed buffer (never
// written, so it costs address space, not memory) into a writer that keeps
// only the header; then each tensor is generated and written in chunks at
// the offsets gguf.Write laid out (aligned, padded after each tensor).
func stream(w io.Writer, s Spec, kvs []gguf.KV, plans []tensorPlan, progress func(done, total int)) error {
	_, ft, err := lookupFType(s.DType)
	if err != nil {
		return err
	}
	mx := &mixture{f: ft, gqa: s.Heads / s.KVHeads, layers: s.Layers}
	specs := make([]gguf.TensorSpec, len(plans))
	var largest, dataLen uint64
	for i, p := range plans {
		t := gguf.TensorSpec{Name: p.name, Dims: p.dims(), Type: gguf.TypeF32}
		switch {
		case p.mxfp4:
			t.Type = gguf.TypeMXFP4
		case !p.vec:
			t.Type = mx.typeOf(p)
		}
		n, err := t.Type.Bytes(t.Dims)
		if err != nil {
			return fmt.Errorf("synth: tensor %s: %w", p.name, err)
		}
		largest = max(largest, n)
		dataLen = alignUp(dataLen+n, gguf.DefaultAlignment)
		specs[i] = t
	}
	zero := make([]byte, largest)
	for i := range specs {
		n, _ := specs[i].Type.Bytes(specs[i].Dims)
		specs[i].Data = zero[:n]
	}
	hw := &headerWriter{}
	if err := gguf.Write(hw, kvs, specs, 0); err != nil {
		return err
	}
	if hw.n < dataLen || hw.n-dataLen > uint64(len(hw.buf)) {
		return fmt.Errorf("synth: gguf header of %d bytes does not fit the %d kept", hw.n-dataLen, len(hw.buf))
	}
	hdr := hw.buf[:hw.n-dataLen]
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("synth: write: %w", err)
	}
	g := &generator{w: w, r: rng(s.Seed), seed: s.Seed, parallel: s.Parallel}
	var off uint64
	for i, p := range plans {
		n, err := g.tensor(i, p, specs[i].Type)
		if err != nil {
			return err
		}
		off += n
		if pad := alignUp(off, gguf.DefaultAlignment) - off; pad > 0 {
			if _, err := w.Write(make([]byte, pad)); err != nil {
				return fmt.Errorf("synth: write: %w", err)
			}
			off += pad
		}
		if progress != nil {
			progress(i+1, len(plans))
		}
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// headerWriter counts everything written and keeps the first maxHeader
// bytes.
type headerWriter struct {
	buf []byte
	n   uint64
}

func (h *headerWriter) Write(p []byte) (int, error) {
	if keep := maxHeader - len(h.buf); keep > 0 {
		h.buf = append(h.buf, p[:min(keep, len(p))]...)
	}
	h.n += uint64(len(p))
	return len(p), nil
}

// generator draws tensors: sequentially from one stream r (the small
// presets' bytes), or in parallel chunks. Every file type draws the same
// values (a quantized file holds its f32 twin's values quantized).
type generator struct {
	w        io.Writer
	r        rng
	seed     uint64
	parallel bool
}

// encBytes is how many bytes m values (whole blocks) of type t take.
func encBytes(t gguf.TensorType, m int) int {
	return m / int(t.BlockSize()) * int(t.TypeSize())
}

// tensor writes tensor i of type t and returns its byte count.
func (g *generator) tensor(i int, p tensorPlan, t gguf.TensorType) (uint64, error) {
	if p.vec {
		n := p.cols * max(1, p.depth)
		data := make([]byte, 4*n)
		for j := 0; j < n; j++ {
			v := float32(1) // a norm's weight
			switch {
			case p.bias:
				v = float32(0.1 * g.r.normal())
			case p.std > 0:
				v = float32(p.mean + g.r.normal()*p.std)
			}
			binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(v))
		}
		_, err := g.w.Write(data)
		return uint64(len(data)), wrapWrite(err)
	}
	n := p.rows * p.cols * max(p.depth, 1)
	chunks := (n + chunkElems - 1) / chunkElems
	if !g.parallel {
		buf := make([]byte, encBytes(t, chunkElems))
		for c := 0; c < chunks; c++ {
			b := buf[:encBytes(t, min(chunkElems, n-c*chunkElems))]
			fill(t, b, &g.r, p.std)
			if _, err := g.w.Write(b); err != nil {
				return 0, wrapWrite(err)
			}
		}
		return uint64(encBytes(t, n)), nil
	}
	// Parallel: workers fill chunk buffers; they are written in order.
	workers := max(1, runtime.GOMAXPROCS(0))
	type job struct {
		c   int
		buf []byte
		ok  chan struct{}
	}
	jobs := make(chan *job, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				r := rng(chunkSeed(g.seed, i, j.c))
				fill(t, j.buf, &r, p.std)
				close(j.ok)
			}
		}()
	}
	window := make([]*job, 0, 2*workers)
	var werr error
	flush := func(j *job) {
		<-j.ok
		if werr == nil {
			_, werr = g.w.Write(j.buf)
		}
	}
	for c := 0; c < chunks; c++ {
		m := min(chunkElems, n-c*chunkElems)
		j := &job{c: c, buf: make([]byte, encBytes(t, m)), ok: make(chan struct{})}
		if len(window) >= 2*workers {
			flush(window[0])
			window = window[1:]
		}
		window = append(window, j)
		jobs <- j
	}
	close(jobs)
	for _, j := range window {
		flush(j)
	}
	wg.Wait()
	return uint64(encBytes(t, n)), wrapWrite(werr)
}

func wrapWrite(err error) error {
	if err != nil {
		return fmt.Errorf("synth: write: %w", err)
	}
	return nil
}

// chunkSeed derives an independent generator seed for chunk c of tensor t.
func chunkSeed(seed uint64, t, c int) uint64 {
	r := rng(seed ^ uint64(t)<<32 ^ uint64(c))
	r.next()
	return r.next()
}

// fill draws the values buf holds ~ N(0, std²) from r into buf in type t
// (quantized types: drawn as float32 and quantized block by block as
// llama.cpp's reference quantizers do).
func fill(t gguf.TensorType, buf []byte, r *rng, std float64) {
	switch t {
	case gguf.TypeF16:
		for j := 0; j < len(buf); j += 2 {
			binary.LittleEndian.PutUint16(buf[j:], kcpu.F32ToF16(float32(r.normal()*std)))
		}
	case gguf.TypeBF16:
		for j := 0; j < len(buf); j += 2 {
			binary.LittleEndian.PutUint16(buf[j:], kcpu.F32ToBF16(float32(r.normal()*std)))
		}
	case gguf.TypeF32:
		for j := 0; j < len(buf); j += 4 {
			binary.LittleEndian.PutUint32(buf[j:], math.Float32bits(float32(r.normal()*std)))
		}
	default:
		vals := make([]float32, len(buf)/int(t.TypeSize())*int(t.BlockSize()))
		for j := range vals {
			vals[j] = float32(r.normal() * std)
		}
		if err := gguf.Quantize(t, buf, vals); err != nil {
			panic(err) // whole blocks by construction (the mixture checks row lengths)
		}
	}
}
