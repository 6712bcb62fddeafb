package kv

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
)

// NewFromArena builds a pool over per-layer K/V buffers someone else owns,
// e.g. slices of a virtual-memory reservation that host/boot maps in
// granules and grows after graph capture. Each layer's K and V must hold at
// least NumPages·PageSize rows of KVHeads·HeadDim floats with the spec's
// page size and head shape. The pool never frees the buffers: Close only
// forgets them, and the arena's owner releases the memory afterwards.
func NewFromArena(spec Spec, layers []device.KVLayer) (*Pool, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if len(layers) != spec.Layers {
		return nil, fmt.Errorf("kv: arena has %d layers, spec %d", len(layers), spec.Layers)
	}
	floats := spec.NumPages * spec.PageSize * spec.KVHeads * spec.HeadDim
	for l, kl := range layers {
		switch {
		case kl.PageSize != spec.PageSize || kl.KVHeads != spec.KVHeads || kl.HeadDim != spec.HeadDim:
			return nil, fmt.Errorf("kv: arena layer %d has page %d, %d heads × %d, spec page %d, %d heads × %d",
				l, kl.PageSize, kl.KVHeads, kl.HeadDim, spec.PageSize, spec.KVHeads, spec.HeadDim)
		case kl.K.Ptr == 0 || kl.V.Ptr == 0 || kl.K.N < floats || kl.V.N < floats:
			return nil, fmt.Errorf("kv: arena layer %d holds K %d and V %d floats, the spec needs %d each", l, kl.K.N, kl.V.N, floats)
		}
	}
	p := &Pool{spec: spec, layers: append([]device.KVLayer(nil), layers...)}
	p.initPages()
	return p, nil
}
