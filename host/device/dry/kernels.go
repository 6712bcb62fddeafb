package dry

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
)

// kernels checks every launch's shapes as the real kernels do and computes
// nothing, so a dry run fails where a real forward would misuse a buffer.
type kernels struct{ d *Device }

var (
	_ device.Kernels       = (*kernels)(nil)
	_ device.DecodeKernels = (*kernels)(nil)
	_ device.Elementwise   = (*kernels)(nil)
	_ device.Experts       = (*kernels)(nil)
	_ device.Mamba         = (*kernels)(nil)
	_ device.Sizer         = (*kernels)(nil)
)

// need checks that a buffer of have floats holds want.
func need(name string, have, want int) error {
	if have < want {
		return fmt.Errorf("dry device: %s holds %d floats, needs %d", name, have, want)
	}
	return nil
}

// check is one buffer's floats against what a launch needs of it.
type check struct {
	name       string
	have, want int
}

// needAll checks every buffer of a launch.
func needAll(cs ...check) error {
	for _, c := range cs {
		if err := need(c.name, c.have, c.want); err != nil {
			return err
		}
	}
	return nil
}

func (k *kernels) MatMul(out, x device.Buf, m int, w device.Weight) error {
	return needAll(check{"matmul output", out.N, m * w.Rows}, check{"matmul input", x.N, m * w.Cols})
}

func (k *kernels) AddBias(out device.Buf, bias device.Weight, m int) error {
	return need("bias output", out.N, m*bias.Cols)
}

func (k *kernels) Add(out, a, b device.Buf) error {
	if a.N != out.N || b.N != out.N {
		return fmt.Errorf("dry device: add of %d, %d into %d floats", a.N, b.N, out.N)
	}
	return nil
}

func (k *kernels) RMSNorm(out, x device.Buf, w device.Weight, rows, dim int, _ float32) error {
	if w.Cols != dim {
		return fmt.Errorf("dry device: rmsnorm weight has %d values for dim %d", w.Cols, dim)
	}
	return needAll(check{"rmsnorm output", out.N, rows * dim}, check{"rmsnorm input", x.N, rows * dim})
}

func (k *kernels) SiLUMul(out, gate, up device.Buf) error { return k.gated("silu-mul", out, gate, up) }

func (k *kernels) gated(name string, out, gate, up device.Buf) error {
	if gate.N != out.N || up.N != out.N {
		return fmt.Errorf("dry device: %s of %d, %d into %d floats", name, gate.N, up.N, out.N)
	}
	return nil
}

type rope struct{ s device.RopeSpec }

func (r rope) Spec() device.RopeSpec { return r.s }

func (k *kernels) NewRope(s device.RopeSpec) (device.Rope, error) { return rope{s}, nil }

func (k *kernels) ApplyRope(r device.Rope, x device.Buf, n, heads int, positions []int32) error {
	if len(positions) < n {
		return fmt.Errorf("dry device: rope over %d rows with %d positions", n, len(positions))
	}
	return need("rope input", x.N, n*heads*r.Spec().HeadDim)
}

func (k *kernels) Embedding(out device.Buf, table device.Weight, ids []int32) error {
	return need("embedding output", out.N, len(ids)*table.Cols)
}

func (k *kernels) WriteKV(kv device.KVLayer, key, val device.Buf, n int, _ []int32, _ int) error {
	if err := need("kv key rows", key.N, n*kv.KRowElems()); err != nil || kv.VInK {
		return err
	}
	return need("kv value rows", val.N, n*kv.VRowElems())
}

func (k *kernels) attention(out, q device.Buf, n, heads int, kv device.KVLayer, scratch device.Buf) error {
	return needAll(check{"attention output", out.N, n * heads * kv.VHeadDim}, check{"attention query", q.N, n * heads * kv.HeadDim}, check{"attention scratch", scratch.N, k.AttentionScratch(device.AttnShape{Heads: heads, KVHeads: kv.KVHeads, HeadDim: kv.HeadDim, VHeadDim: kv.VHeadDim})})
}

func (k *kernels) Attention(out, q device.Buf, n, heads int, kv device.KVLayer, _ []int32, _ int, _ device.AttnOpts, scratch device.Buf) error {
	return k.attention(out, q, n, heads, kv, scratch)
}

func (k *kernels) AttentionScratch(s device.AttnShape) int { return k.d.sizer.AttentionScratch(s) }

func (k *kernels) GatherRows(out, _ device.Buf, dim int, idx []int32) error {
	return need("gathered rows", out.N, len(idx)*dim)
}

func (k *kernels) CopyToHost(dst []float32, src device.Buf) error {
	if dst != nil && len(dst) < src.N {
		return fmt.Errorf("dry device: copy of %d floats into a host slice of %d", src.N, len(dst))
	}
	return nil
}

func (k *kernels) CopyFromHost(dst device.Buf, src []float32) error {
	return need("copy destination", dst.N, len(src))
}

func (k *kernels) Upload(device.Ptr, []byte) error { return nil }

func (k *kernels) WriteKVRows(kv device.KVLayer, key, val device.Buf, positions []int32, tables [][]int32) error {
	if len(tables) < len(positions) {
		return fmt.Errorf("dry device: %d positions, %d page tables", len(positions), len(tables))
	}
	return k.WriteKV(kv, key, val, len(positions), nil, 0)
}

func (k *kernels) DecodeAttention(out, q device.Buf, heads int, kv device.KVLayer, positions []int32, tables [][]int32, _ device.AttnOpts, scratch device.Buf, _ int) error {
	if len(tables) < len(positions) {
		return fmt.Errorf("dry device: %d positions, %d page tables", len(positions), len(tables))
	}
	return k.attention(out, q, len(positions), heads, kv, scratch)
}
