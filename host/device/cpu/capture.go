package cpu

import (
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

var (
	_ device.Capturer      = (*Device)(nil)
	_ device.DecodeKernels = (*kernels)(nil)
)

// run executes f now, or records it while a capture is open. Only the
// device-owning goroutine launches kernels, so the recording needs no lock.
func (k *kernels) run(f func()) error {
	if k.d.capturing {
		k.d.rec = append(k.d.rec, f)
		return nil
	}
	f()
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

func (k *kernels) WriteKVRows(kv device.KVLayer, key, val device.Buf, positions []int32, tables [][]int32) error {
	if len(tables) < len(positions) {
		return fmt.Errorf("cpu device: %d positions, %d page tables", len(positions), len(tables))
	}
	p, err := k.paged(kv)
	if err != nil {
		return err
	}
	ks, err := k.f32(key)
	if err != nil {
		return err
	}
	vs, err := k.f32(val)
	if err != nil {
		return err
	}
	row := kv.KVHeads * kv.HeadDim
	if err := need("kv rows input", min(len(ks), len(vs)), len(positions)*row); err != nil {
		return err
	}
	return k.run(func() { kcpu.WriteKVRows(p, ks, vs, positions, tables) })
}

func (k *kernels) DecodeAttentionScratch(maxLen int) int {
	return kcpu.DecodeAttentionScratch(k.d.pool, maxLen)
}

func (k *kernels) DecodeAttention(out, q device.Buf, heads int, kv device.KVLayer, positions []int32, tables [][]int32, opts device.AttnOpts, scratch device.Buf, maxLen int) error {
	scale, err := attnOpts(opts)
	if err != nil {
		return err
	}
	if kv.KVHeads == 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cpu device: %d query heads do not group over %d KV heads", heads, kv.KVHeads)
	}
	p, o, qs, sc, err := k.attentionBufs(kv, out, q, scratch)
	if err != nil {
		return err
	}
	width := len(positions) * heads * kv.HeadDim
	if err := need("decode attention output", len(o), width); err != nil {
		return err
	}
	if err := need("decode attention query", len(qs), width); err != nil {
		return err
	}
	if err := need("decode attention scratch", len(sc), kcpu.DecodeAttentionScratch(k.d.pool, maxLen)); err != nil {
		return err
	}
	return k.run(func() {
		k.d.pool.DecodeAttention(o[:width], qs[:width], heads, p, positions, tables, scale, sc, maxLen)
	})
}
