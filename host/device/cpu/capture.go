package cpu

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

var (
	_ device.Capturer      = (*Device)(nil)
	_ device.DecodeKernels = (*kernels)(nil)
	_ device.Recorder      = (*Device)(nil)
)

// RecordsOnly implements device.Recorder: a capture here records closures
// and runs no kernel until the graph is launched.
func (d *Device) RecordsOnly() {}

// record appends a launch to the open capture. Every kernel method runs
// its kernel directly when no capture is open and builds the closure only
// inside its capturing branch, so an eager step allocates nothing for
// dispatch. Only the device-owning goroutine launches kernels, so the
// recording needs no lock.
func (k *kernels) record(f func()) error {
	k.d.rec = append(k.d.rec, f)
	return nil
}

// graph is a recorded launch sequence: replaying it runs the same kernels on
// the same buffers, reading the bound host slices' current contents.
type graph struct{ launches []func() }

func (g *graph) Launch() error {
	for _, f := range g.launches {
		f()
	}
	return nil
}

func (g *graph) Launches() int { return len(g.launches) }

// Close drops the recorded launches (and the buffers their closures hold).
func (g *graph) Close() error { g.launches = nil; return nil }

// BeginCapture starts recording kernel launches instead of running them.
func (d *Device) BeginCapture() error {
	if d.capturing {
		return errors.New("cpu device: a capture is already open")
	}
	d.capturing, d.rec = true, nil
	return nil
}

// EndCapture closes the capture and returns its graph.
func (d *Device) EndCapture() (device.Graph, error) {
	if !d.capturing {
		return nil, errors.New("cpu device: no capture is open")
	}
	g := &graph{launches: d.rec}
	d.capturing, d.rec = false, nil
	return g, nil
}

// decodeRows checks a batched decode call's positions and page tables; in
// a capture they are placeholders the runner rewrites before each replay,
// and the kernels check what they read then.
func (k *kernels) decodeRows(kv device.KVLayer, positions []int32, tables [][]int32, window, maxLen int) error {
	if len(tables) < len(positions) {
		return fmt.Errorf("cpu device: %d positions, %d page tables", len(positions), len(tables))
	}
	if k.d.capturing {
		return nil
	}
	for i, pos := range positions {
		if pos < 0 || int(pos) >= maxLen {
			return fmt.Errorf("cpu device: decode row %d at position %d outside [0, %d)", i, pos, maxLen)
		}
		if err := checkPages(kv, tables[i], windowStart(int(pos), window), int(pos)+1); err != nil {
			return fmt.Errorf("cpu device: decode row %d: %w", i, err)
		}
	}
	return nil
}

func (k *kernels) WriteKVRows(kv device.KVLayer, key, val device.Buf, positions []int32, tables [][]int32) error {
	p, err := k.paged(kv)
	if err != nil {
		return err
	}
	if err := k.decodeRows(kv, positions, tables, 1, math.MaxInt32); err != nil {
		return err
	}
	ks, vs, err := k.kvInputs(kv, key, val, len(positions))
	if err != nil {
		return err
	}
	if k.d.capturing {
		pc := p // only a recorded launch keeps the cache view (it is too large to capture by value)
		return k.record(func() { kcpu.WriteKVRows(pc, ks, vs, positions, tables) })
	}
	kcpu.WriteKVRows(p, ks, vs, positions, tables)
	return nil
}

func (k *kernels) DecodeAttention(out, q device.Buf, heads int, kv device.KVLayer, positions []int32, tables [][]int32, opts device.AttnOpts, scratch device.Buf, maxLen int) error {
	p, ko, o, qs, sc, err := k.attentionBufs(kv, heads, len(positions), opts, out, q, scratch)
	if err != nil {
		return err
	}
	if err := k.decodeRows(kv, positions, tables, opts.Window, maxLen); err != nil {
		return err
	}
	if k.d.capturing {
		pc, kc := p, ko
		return k.record(func() { k.d.pool.DecodeAttention(o, qs, heads, pc, positions, tables, kc, sc) })
	}
	k.d.pool.DecodeAttention(o, qs, heads, p, positions, tables, ko, sc)
	return nil
}
