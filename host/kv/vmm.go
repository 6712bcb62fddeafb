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
	for l, kl := range layers {
		switch {
		case kl.PageSize != spec.PageSize || kl.KVHeads != spec.KVHeads || kl.HeadDim != spec.HeadDim:
			return nil, fmt.Errorf("kv: arena layer %d has page %d, %d heads × %d, spec page %d, %d heads × %d",
				l, kl.PageSize, kl.KVHeads, kl.HeadDim, spec.PageSize, spec.KVHeads, spec.HeadDim)
		case kl.Slots < spec.NumPages*spec.PageSize:
			return nil, fmt.Errorf("kv: arena layer %d holds %d slots, the spec needs %d", l, kl.Slots, spec.NumPages*spec.PageSize)
		}
		if err := kl.Validate(); err != nil {
			return nil, fmt.Errorf("kv: arena layer %d: %w", l, err)
		}
	}
	p := &Pool{spec: spec, layers: append([]device.KVLayer(nil), layers...)}
	p.initPages()
	return p, nil
}
