//go:build cuda

package cuda

import (
	"errors"
	"fmt"
)

// Graph is a captured decode step: a CUDA graph plus the tape of the work
// it holds, so each replay can prove it asks for exactly that work.
type Graph struct {
	d     *Device
	g     graph
	nodes int
	tape  tape
}

// Capture records one step under stream capture (THREAD_LOCAL, on the owner
// thread). step must have run eagerly at least once with the same shapes so
// that allocations come from the caching allocator and GEMM scratch is
// sized: a cuMemAlloc during capture fails it. outBytes sizes the pinned
// buffer that receives CopyToHost results at replay. The capture computes
// nothing; results come from Replay.
func (d *Device) Capture(outBytes int64, step func() error) (*Graph, error) {
	var gr *Graph
	err := d.do(func() error {
		if d.mode != modeEager {
			return errors.New("cuda: nested capture")
		}
		if err := d.st.sync(); err != nil {
			return err
		}
		if d.outPin.size < outBytes {
			if err := d.outPin.free(); err != nil {
				return err
			}
			d.outPin = pinned{}
			p, err := newPinned(outBytes)
			if err != nil {
				return err
			}
			d.outPin, d.outRing = p, ring{size: outBytes}
		}
		d.ring.reset()
		d.outRing = ring{size: d.outPin.size}
		d.tape.record()
		if err := beginCapture(d.st); err != nil {
			d.tape.stop()
			return err
		}
		d.mode = modeCapture
		stepErr := step()
		d.mode = modeEager
		d.tape.stop()
		g, nodes, endErr := endCapture(d.st)
		if stepErr != nil || endErr != nil {
			if endErr == nil {
				_ = g.destroy()
			}
			return errors.Join(stepErr, endErr)
		}
		gr = &Graph{d: d, g: g, nodes: nodes, tape: tape{words: d.tape.words}}
		d.tape = tape{}
		return nil
	})
	return gr, err
}

// Nodes is the captured graph's node count.
func (g *Graph) Nodes() int { return g.nodes }

// Calls is the number of launches, copies and GEMMs the graph holds.
func (g *Graph) Calls() int {
	n := 0
	for i := 0; i < len(g.tape.words); i += 2 + int(g.tape.words[i+1]) {
		n++
	}
	return n
}

// Replay re-runs step in stage-only mode (host inputs go to the same pinned
// spans, nothing is launched), checks it against the capture, launches the
// graph, waits for it and delivers the CopyToHost results.
func (g *Graph) Replay(step func() error) error {
	d := g.d
	return d.do(func() error {
		if d.mode != modeEager {
			return errors.New("cuda: nested replay")
		}
		if g.g.e == nil {
			return errors.New("cuda: replay of a closed graph")
		}
		if err := d.st.sync(); err != nil {
			return err
		}
		d.ring.reset()
		d.outRing = ring{size: d.outPin.size}
		d.pending = d.pending[:0]
		d.tape = g.tape
		d.tape.verify()
		d.mode = modeReplay
		err := step()
		if err == nil {
			err = d.tape.done()
		}
		d.mode = modeEager
		d.tape = tape{}
		if err != nil {
			return fmt.Errorf("cuda: replay refused: %w", err)
		}
		if err := g.g.launch(d.st); err != nil {
			return err
		}
		if err := d.st.sync(); err != nil {
			return err
		}
		d.ring.reset()
		out := d.outPin.bytes()
		for _, p := range d.pending {
			src := out[p.off : p.off+int64(4*len(p.dst))]
			for i := range p.dst {
				p.dst[i] = f32frombytes(src[4*i:])
			}
		}
		d.pending = d.pending[:0]
		return nil
	})
}

// Close destroys the graph.
func (g *Graph) Close() error {
	return g.d.do(func() error {
		if g.g.e == nil {
			return nil
		}
		err := g.g.destroy()
		g.g = graph{}
		return err
	})
}
