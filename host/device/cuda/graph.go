//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kvhost/kvhost/host/device"
)

var (
	_ device.Capturer      = (*Device)(nil)
	_ device.DecodeKernels = (*kernels)(nil)
	_ device.Graph         = (*Graph)(nil)
)

type opKind uint8

const (
	opLaunch opKind = iota
	opHtoD
	opGemm
	opDtoH
)

// op is one piece of recorded work with every address resolved.
type op struct {
	kind opKind
	// opLaunch
	fn   function
	dims Dims
	args []uint64
	// opHtoD: pinned host → device; opDtoH: device → pinned host at off of
	// the output buffer (resolved at EndCapture).
	host unsafe.Pointer
	dev  uintptr
	n    int64
	off  int64
	// opGemm
	gemm gemmArgs
}

type gemmArgs struct {
	out, x, w    uintptr
	xType, wType int
	m, n, k      int
}

// binding is a pinned span a graph's copy reads, and how to refill it from
// the host slices bound at record time.
type binding struct {
	host unsafe.Pointer
	n    int64
	fill func([]byte) error
}

// outBinding is a captured device → host copy: the graph lands it in the
// pinned output buffer at host; Launch delivers it to dst.
type outBinding struct {
	off  int64
	host unsafe.Pointer
	dst  []float32
}

// stageKey identifies a host slice staged while recording, so a slice the
// step stages several times (positions for every layer's RoPE and
// attention) takes one span and one copy.
type stageKey struct {
	kind   uint8
	p1, p2 uintptr
	n      int
	geo    decodeGeometry
}

// recording is an open capture: work runs eagerly and is recorded.
type recording struct {
	ops      []op
	binds    []binding
	outs     []outBinding
	outBytes int64
	staged   map[stageKey]uintptr
}

// Graph is a captured step: a CUDA graph plus the host slices it reads and
// the host slices its results go to.
type Graph struct {
	d     *Device
	g     graph
	nodes int
	ops   int
	binds []binding
	outs  []outBinding
}

// BeginCapture opens a capture. Protocol (doc.go): until EndCapture every
// kernel call runs eagerly — so the caching allocator can still call Malloc
// and the step's results are computed once — and is recorded with its
// resolved addresses and the host slices it staged. EndCapture issues the
// recorded work again under CUDA stream capture, where nothing allocates.
func (d *Device) BeginCapture() error {
	return d.do(func() error {
		if d.mode != modeEager {
			return errors.New("cuda: a capture is already open")
		}
		if err := d.st.sync(); err != nil {
			return err
		}
		d.ring.reset()
		d.rec = &recording{staged: map[stageKey]uintptr{}}
		d.mode = modeRecord
		return nil
	})
}

// EndCapture closes the capture: it sizes the pinned output buffer, then
// replays the recorded work under THREAD_LOCAL stream capture on the owner
// thread and instantiates the graph.
func (d *Device) EndCapture() (device.Graph, error) {
	var gr *Graph
	err := d.do(func() error {
		if d.mode != modeRecord {
			return errors.New("cuda: no capture is open")
		}
		rec := d.rec
		d.rec, d.mode = nil, modeEager
		if err := d.st.sync(); err != nil {
			return err
		}
		if err := d.growOut(rec.outBytes); err != nil {
			return err
		}
		for i := range rec.outs {
			rec.outs[i].host = unsafe.Add(d.outPin.p, rec.outs[i].off)
		}
		if err := beginCapture(d.st); err != nil {
			return err
		}
		d.mode = modeCapture
		issueErr := d.issue(rec.ops)
		d.mode = modeEager
		g, nodes, endErr := endCapture(d.st)
		if issueErr != nil || endErr != nil {
			if endErr == nil {
				_ = g.destroy()
			}
			return fmt.Errorf("cuda: capture: %w", errors.Join(issueErr, endErr))
		}
		gr = &Graph{d: d, g: g, nodes: nodes, ops: len(rec.ops), binds: rec.binds, outs: rec.outs}
		d.graphs = append(d.graphs, gr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gr, nil
}

// issue queues recorded work on the stream (under capture).
func (d *Device) issue(ops []op) error {
	for _, o := range ops {
		var err error
		switch o.kind {
		case opLaunch:
			copy(d.args.slots, o.args)
			if err = launchRaw(rawFunction(o.fn.f), o.dims, d.st, d.args, len(o.args)); err != nil {
				err = fmt.Errorf("%s: %w", o.fn.name, err)
			}
		case opHtoD:
			err = htodAsync(o.dev, o.host, o.n, d.st)
		case opDtoH:
			err = dtohAsync(unsafe.Add(d.outPin.p, o.off), o.dev, o.n, d.st)
		case opGemm:
			a := o.gemm
			err = d.blas.gemmRowMajor(a.out, a.x, a.xType, a.w, a.wType, a.m, a.n, a.k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// growOut makes the pinned output buffer hold n bytes; a buffer that
// captured graphs still write to is retired, not freed.
func (d *Device) growOut(n int64) error {
	if n <= d.outPin.size {
		return nil
	}
	p, err := newPinned(max(n, 2*d.outPin.size))
	if err != nil {
		return err
	}
	if err := d.retirePinned(d.outPin); err != nil {
		_ = p.free()
		return err
	}
	d.outPin = p
	return nil
}

// Launch refills the pinned spans the graph copies from with the bound
// host slices' current contents (checking page tables and positions again),
// launches the graph, waits for it and delivers its device → host copies.
func (g *Graph) Launch() error {
	d := g.d
	return d.do(func() error {
		if d.mode != modeEager {
			return errors.New("cuda: graph launch during a capture")
		}
		if g.g.e == nil {
			return errors.New("cuda: launch of a closed graph")
		}
		// Eager copies still queued may read the spans about to be refilled.
		if err := d.st.sync(); err != nil {
			return err
		}
		for _, b := range g.binds {
			if err := b.fill(unsafe.Slice((*byte)(b.host), b.n)); err != nil {
				return fmt.Errorf("cuda: graph launch refused: %w", err)
			}
		}
		if err := g.g.launch(d.st); err != nil {
			return err
		}
		if err := d.st.sync(); err != nil {
			return err
		}
		d.ring.reset()
		for _, o := range g.outs {
			src := unsafe.Slice((*float32)(o.host), len(o.dst))
			copy(o.dst, src)
		}
		return nil
	})
}

// Launches is the number of recorded launches, copies and GEMMs.
func (g *Graph) Launches() int { return g.ops }

// Nodes is the instantiated CUDA graph's node count.
func (g *Graph) Nodes() int { return g.nodes }

// NewestGraph is the most recently captured graph still open, or nil. Call
// it on the owner thread (inside Run), as a capture runs there too; gpu-check
// reads its counts after model.CaptureDecodeGraphs.
func (d *Device) NewestGraph() *Graph {
	if n := len(d.graphs); n > 0 {
		return d.graphs[n-1]
	}
	return nil
}

// Close destroys the graph (the device destroys any left at its Close).
func (g *Graph) Close() error {
	return g.d.do(func() error { return g.d.closeGraph(g) })
}

func (d *Device) closeGraph(g *Graph) error {
	if g.g.e == nil {
		return nil
	}
	err := g.g.destroy()
	g.g = graph{}
	for i, x := range d.graphs {
		if x == g {
			d.graphs = append(d.graphs[:i], d.graphs[i+1:]...)
			break
		}
	}
	return err
}

// retiredBuf is a staging buffer replaced while graphs may still read or
// write it; it lives until Close.
type retiredBuf struct {
	pin pinned
	dev cu.DevicePtr
}

// graphsMayUse reports whether replaced buffers must be kept alive.
func (d *Device) graphsMayUse() bool { return len(d.graphs) > 0 || d.mode == modeRecord }

// retirePinned frees p, or keeps it until Close while graphs may copy to or
// from it.
func (d *Device) retirePinned(p pinned) error {
	if p.p == nil {
		return nil
	}
	if !d.graphsMayUse() {
		return p.free()
	}
	d.retired = append(d.retired, retiredBuf{pin: p})
	return nil
}

// retireDev is retirePinned for device memory.
func (d *Device) retireDev(p cu.DevicePtr) error {
	if p == 0 {
		return nil
	}
	if !d.graphsMayUse() {
		return cu.MemFree(p)
	}
	d.retired = append(d.retired, retiredBuf{dev: p})
	return nil
}
