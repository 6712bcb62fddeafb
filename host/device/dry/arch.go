package dry

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
)

// The optional capabilities: shapes checked as the CPU device checks them
// where the check needs no device memory, nothing computed.

func (k *kernels) GeGLUTanh(out, gate, up device.Buf) error {
	return k.gated("gelu-tanh-mul", out, gate, up)
}

func (k *kernels) SwiGLUOAI(out, gate, up device.Buf, _, _ float32) error {
	return k.gated("swiglu-oai", out, gate, up)
}

func (k *kernels) ReLUSquare(out, x device.Buf) error { return need("relu² input", x.N, out.N) }

func (k *kernels) SoftCap(_ device.Buf, c float32) error {
	if !(c > 0) {
		return fmt.Errorf("dry device: soft cap %v must be positive", c)
	}
	return nil
}

func (k *kernels) Scale(device.Buf, float32) error { return nil }

func (k *kernels) AddScaled(out, a, b device.Buf, _ float32) error {
	return needAll(check{"add-scaled a", a.N, out.N}, check{"add-scaled b", b.N, out.N})
}

func (k *kernels) RouteExperts(r device.Router, logits device.Buf, n int, _ device.Weight, ids device.Span, weights device.Buf) error {
	if err := device.NeedInts("expert ids", ids, n*r.TopK); err != nil {
		return err
	}
	return needAll(check{"router logits", logits.N, n * r.Experts}, check{"router weights", weights.N, n * r.TopK})
}

func (k *kernels) GroupExperts(ids device.Span, _ device.Buf, n int, g device.ExpertGroups) error {
	if err := g.Validate(n); err != nil {
		return err
	}
	return device.NeedInts("expert ids", ids, n*g.K)
}

func (k *kernels) GatherRowsAt(out, _ device.Buf, dim int, idx device.Span, n int) error {
	if err := device.NeedInts("gather indices", idx, n); err != nil {
		return err
	}
	return need("gathered rows", out.N, n*dim)
}

func (k *kernels) ExpertMatMul(out, x device.Buf, n int, w device.Weight, g device.ExpertGroups) error {
	if err := g.Validate(n); err != nil {
		return err
	}
	if g.Experts <= 0 || w.Rows%g.Experts != 0 {
		return fmt.Errorf("dry device: expert matrix of %d rows for %d experts", w.Rows, g.Experts)
	}
	return needAll(check{"expert matmul output", out.N, n * g.K * (w.Rows / g.Experts)}, check{"expert matmul input", x.N, n * g.K * w.Cols})
}

func (k *kernels) ScatterAdd(out, y device.Buf, dim int, g device.ExpertGroups, n int, _ bool) error {
	if err := g.Validate(n); err != nil {
		return err
	}
	return needAll(check{"scatter output", out.N, n * dim}, check{"scatter input", y.N, n * g.K * dim})
}

func (k *kernels) MambaConv(s device.Mamba2, out, xbc device.Buf, _, _ device.Weight, _ device.MambaStates, b device.MambaBatch) error {
	if err := s.Validate(); err != nil {
		return err
	}
	rows, err := b.Check(int(^uint32(0) >> 1))
	if err != nil {
		return err
	}
	return needAll(check{"mamba conv input", xbc.N, rows * s.ConvDim()}, check{"mamba conv output", out.N, rows * s.ConvDim()})
}

func (k *kernels) MambaScan(s device.Mamba2, y, xbc, _ device.Buf, _ device.MambaParams, _ device.MambaStates, b device.MambaBatch, scratch device.Buf) error {
	if err := s.Validate(); err != nil {
		return err
	}
	rows, err := b.Check(int(^uint32(0) >> 1))
	if err != nil {
		return err
	}
	return needAll(check{"mamba scan output", y.N, rows * s.Inner()}, check{"mamba scan input", xbc.N, rows * s.ConvDim()}, check{"mamba scan scratch", scratch.N, k.MambaScanScratch(s, rows, len(b.Slots))})
}

func (k *kernels) MambaScanScratch(s device.Mamba2, tokens, seqs int) int {
	return k.d.sizer.MambaScanScratch(s, tokens, seqs)
}

func (k *kernels) GatedRMSNorm(out, y, z device.Buf, w device.Weight, rows, dim, group int, _ float32) error {
	if w.Cols != dim || group <= 0 || dim%group != 0 {
		return fmt.Errorf("dry device: gated rmsnorm weight of %d values, dim %d, group %d", w.Cols, dim, group)
	}
	return needAll(check{"gated rmsnorm output", out.N, rows * dim}, check{"gated rmsnorm y", y.N, rows * dim}, check{"gated rmsnorm z", z.N, rows * dim})
}
