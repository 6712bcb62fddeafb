package model

import (
	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
)

// NewDry builds c's model over a dry-run device (host/device/dry): the
// architecture's own Layers code runs, every weight a shape with an
// address and no memory, and the attention workspace and every activation
// come from act as a loaded model's do. Its Forward and
// CaptureDecodeGraphs run the real forward and decode step — the same
// allocation sequence, kernels that compute nothing — and fill no host
// buffer (Forward takes nil logits). This is how `kvhost plan` predicts
// the activation peak, the workspaces and the graph pool of any registered
// architecture without a line of its own (spec §4).
func NewDry(c Config, dev device.Device, act *alloc.Allocator) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Name: c.Arch, Config: c, dry: true}
	if err := m.build(nil, Options{Device: dev, Activations: act}); err != nil {
		return nil, err
	}
	return m, nil
}
