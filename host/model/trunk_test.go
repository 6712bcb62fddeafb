package model

import (
	"math"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
)

// TestTrunkMatchesFloat64Reference: with an embedding scale, a logit scale
// and a final soft cap (Builder.SetTrunk), every logit of a prefill, of
// eager decode steps and of a captured decode graph's replay equals the
// float64 reference forward with the same transforms.
func TestTrunkMatchesFloat64Reference(t *testing.T) {
	path := writeTiny(t, "f32")
	r := load(t, path, 64)
	tr := Trunk{EmbedScale: 3, LogitScale: 0.5, LogitSoftCap: 1.5}
	if err := (&Builder{C: r.m.Config, m: r.m}).SetTrunk(tr); err != nil {
		t.Fatal(err)
	}
	ref, plain := newRefModel(t, path), newRefModel(t, path)
	ref.embScale, ref.logitScale, ref.softCap = 3, 0.5, 1.5
	prompt := []int32{1, 17, 230, 5, 99, 42, 7, 300, 12, 64}
	V := r.m.Config.Vocab
	var pages []int32
	got := r.run(t, &pages, prompt, 0, len(prompt))
	worst, changed := 0.0, 0.0
	for i, tok := range prompt {
		want, base := ref.step(tok), plain.step(tok)
		worst = math.Max(worst, maxDiff(got[i*V:(i+1)*V], want))
		for j := range want {
			changed = math.Max(changed, math.Abs(want[j]-base[j]))
		}
	}
	pos := len(prompt)
	for step := 0; step < 4; step++ {
		tok := int32(3 + 11*step)
		worst = math.Max(worst, maxDiff(r.run(t, &pages, []int32{tok}, pos, 1), ref.step(tok)))
		pos++
	}
	g, err := r.m.CaptureDecodeGraphs(r.pools, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for step := 0; step < 3; step++ {
		tok := int32(50 + step)
		if pages, err = r.pool.Grow(pages, pos+1); err != nil {
			t.Fatal(err)
		}
		logits := make([]float32, V)
		ran, err := g.Run([]Seq{{Tokens: []int32{tok}, Start: pos, Pages: one(pages), LogitRows: 1}}, logits)
		if err != nil || !ran {
			t.Fatalf("graph replay ran=%v: %v", ran, err)
		}
		worst = math.Max(worst, maxDiff(logits, ref.step(tok)))
		pos++
	}
	t.Logf("max |logit - float64 reference| %.3g; the trunk moves logits by up to %.3g", worst, changed)
	if changed < 0.1 {
		t.Fatalf("the trunk transforms change the reference logits by only %.3g: the test cannot tell them apart", changed)
	}
	if worst > 1e-4 {
		t.Fatalf("logits differ from the float64 reference by %.3g > 1e-4", worst)
	}
}

// TestSetTrunkRefuses: a negative soft cap, and any transform on a device
// without Elementwise kernels, are refused by name.
func TestSetTrunkRefuses(t *testing.T) {
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := &Model{dev: dev, k: dev.Kernels(), act: alloc.New("caching", dev)}
	b := &Builder{C: Config{Arch: "x"}, m: m}
	if err := b.SetTrunk(Trunk{LogitSoftCap: -1}); err == nil || !strings.Contains(err.Error(), "soft cap -1") {
		t.Fatalf("negative soft cap: %v", err)
	}
	m.k = struct{ device.Kernels }{dev.Kernels()} // hides the optional capabilities
	if err := b.SetTrunk(Trunk{EmbedScale: 2}); err == nil || !strings.Contains(err.Error(), "Elementwise") {
		t.Fatalf("device without Elementwise: %v", err)
	}
	if err := b.SetTrunk(Trunk{}); err != nil || m.trunk != (Trunk{}) {
		t.Fatalf("the zero trunk: %v", err)
	}
}
