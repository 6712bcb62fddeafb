package cpu

import (
	"fmt"
	"math"
)

// GatedRMSNorm is Mamba-2's gated, grouped RMSNorm with the gate applied
// first (norm_before_gate false, as Nemotron-H, Granite-4.0-H and Mamba2
// use it): per row, g = y·silu(z), then each run of group values is scaled
// by 1/sqrt(mean(g²) + eps) and multiplied by weight. Nemotron-H normalises
// groups of Inner/n_groups (HF group_size, llama.cpp's {d_inner/n_group,
// n_group} ssm_norm); HF Granite-4.0-H normalises the whole row
// (group = dim), which is the same thing for its n_groups 1. out may alias
// y or z.
func (p *Pool) GatedRMSNorm(out, y, z, weight []float32, rows, dim, group int, eps float32) {
	if rows < 0 || dim < 1 || group < 1 || dim%group != 0 {
		panic(fmt.Sprintf("cpu: gated rmsnorm: %d rows of %d in groups of %d", rows, dim, group))
	}
	if len(out) < rows*dim || len(y) < rows*dim || len(z) < rows*dim || len(weight) < dim {
		panic(fmt.Sprintf("cpu: gated rmsnorm %dx%d: out has %d floats, y %d, z %d, weight %d", rows, dim, len(out), len(y), len(z), len(weight)))
	}
	if rows == 0 {
		return
	}
	per := max(1, 16384/dim)
	items := (rows + per - 1) / per
	if p.Threads() == 1 || items == 1 {
		gatedNormRows(out, y, z, weight, 0, rows, dim, group, eps)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &p.mb
	t.kind, t.out, t.y, t.z, t.nw = kindNorm, out, y, z, weight
	t.normRows, t.dim, t.group, t.eps, t.rowsPerItem = rows, dim, group, eps, per
	t.ch.reset(items)
	p.run(t)
	t.release()
}

func (t *mambaTask) norm(item int) {
	r0 := item * t.rowsPerItem
	gatedNormRows(t.out, t.y, t.z, t.nw, r0, min(r0+t.rowsPerItem, t.normRows), t.dim, t.group, t.eps)
}

func gatedNormRows(out, y, z, weight []float32, r0, r1, dim, group int, eps float32) {
	for r := r0; r < r1; r++ {
		o := out[r*dim : (r+1)*dim]
		SiLUMul(o, z[r*dim:(r+1)*dim], y[r*dim:(r+1)*dim])
		for g0 := 0; g0 < dim; g0 += group {
			grp := o[g0 : g0+group]
			ss := float64(dotF32(grp, grp))
			sc := float32(1 / math.Sqrt(ss/float64(group)+float64(eps)))
			w := weight[g0 : g0+group]
			for c, v := range grp {
				grp[c] = v * sc * w[c]
			}
		}
	}
}
