package model

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model/hf"
)

// Arch is one architecture the host serves: everything that differs
// between model families, in one registry entry (arch_<name>.go registers
// it from init). The forward, the captured decode graphs, plan's dry run
// and the loaders are written once over it.
type Arch struct {
	// Name is kvhost's name (Config.Arch), by convention GGUF's
	// general.architecture.
	Name string
	// GGUF lists the general.architecture values read as this
	// architecture; HF the config.json "architectures" class names. HF[0]
	// is the class a configurator is asked about for a model read from
	// GGUF (plan.ConfigJSON's "architectures", which ConfigJSON below may
	// rewrite: a llama GGUF with a sliding window is MistralForCausalLM).
	GGUF, HF []string
	// FromGGUF reads the hyper-parameters from a GGUF header (g.arch is
	// the file's general.architecture, the prefix of its keys).
	FromGGUF func(g ggufMeta) (Config, error)
	// FromHF reads them from config.json (parsed common fields and the raw
	// bytes for the architecture's own).
	FromHF func(hc hf.Config, raw []byte, path string) (Config, error)
	// HFTensor maps a canonical (GGUF) tensor name to its Hugging Face
	// name; the loader asks for tensors by canonical name only.
	HFTensor func(canon string) string
	// HFRead, when set, reads a tensor by canonical name instead of the
	// plain HFTensor lookup: for checkpoints whose tensors the converter
	// transforms (Gemma's 1 + w norms, gpt-oss's MXFP4 expert blocks).
	HFRead func(s hfSource, canon string) ([]byte, device.DType, []int, bool, error)
	// ConfigJSON adds the architecture's own fields to the config.json
	// equivalent of a GGUF model that a KV configurator reads (nil: the
	// common fields say everything).
	ConfigJSON func(c Config, out map[string]any)
	// Layers loads every layer's weights through b and returns the
	// layers' parts, in order; len == c.Layers.
	Layers func(b *Builder) ([]Layer, error)
	// KVNeeds is what each layer keeps between forwards, the need a
	// configurator's declaration must meet (kv.NewLayout).
	KVNeeds func(c Config) []kv.LayerNeed
	// Params counts the parameters the configuration implies.
	Params func(c Config) int64
}

// Layer is one decoder layer: a sequence mixer (attention, MLA, Mamba)
// and a feed-forward part (dense MLP, MoE), either of which may be absent
// (Nemotron-H's layers hold one or the other). Both run on the residual
// stream x in place: each normalises x itself, computes its branch and
// adds it (with whatever post-norm or scale the architecture has).
type Layer struct {
	Mixer Mixer
	FFN   FFN
}

// Mixer is a layer's sequence mixer: the only part that sees other
// positions (through the step's caches, Step.Attend, Step.State).
type Mixer interface {
	// Mix adds the mixer's branch to x [s.Rows, Hidden]. h is the layer's
	// scratch of the same shape (the normed input, then the branch's
	// output). Temporaries come from s.Buf and are freed with s.Free
	// before it returns.
	Mix(s *Step, x, h device.Buf) error
}

// FFN is a layer's position-wise feed-forward part.
type FFN interface {
	// Forward adds the part's branch to x [s.Rows, Hidden]; h as for Mix.
	Forward(s *Step, x, h device.Buf) error
}

var (
	archMu   sync.RWMutex
	archs    = map[string]*Arch{}
	ggufArch = map[string]*Arch{}
	hfArch   = map[string]*Arch{}
)

// register adds an architecture; called from init. A duplicate name,
// GGUF or HF name panics, as database/sql's Register does: it is a
// programming error.
func register(a *Arch) {
	archMu.Lock()
	defer archMu.Unlock()
	if a.Name == "" || a.FromGGUF == nil || a.FromHF == nil || a.HFTensor == nil || a.Layers == nil || a.KVNeeds == nil || a.Params == nil || len(a.HF) == 0 {
		panic("model: register: architecture " + a.Name + " is incomplete")
	}
	if len(a.GGUF) == 0 {
		a.GGUF = []string{a.Name}
	}
	if _, dup := archs[a.Name]; dup {
		panic("model: register called twice for " + a.Name)
	}
	for _, g := range a.GGUF {
		if _, dup := ggufArch[g]; dup {
			panic("model: GGUF architecture " + g + " registered twice")
		}
	}
	for _, h := range a.HF {
		if _, dup := hfArch[h]; dup {
			panic("model: Hugging Face architecture " + h + " registered twice")
		}
	}
	archs[a.Name] = a
	for _, g := range a.GGUF {
		ggufArch[g] = a
	}
	for _, h := range a.HF {
		hfArch[h] = a
	}
}

// LookupArch returns the architecture kvhost calls name (Config.Arch).
func LookupArch(name string) (*Arch, bool) {
	archMu.RLock()
	defer archMu.RUnlock()
	a, ok := archs[name]
	return a, ok
}

func lookupIn(m map[string]*Arch, name string) (*Arch, bool) {
	archMu.RLock()
	defer archMu.RUnlock()
	a, ok := m[name]
	return a, ok
}

// names lists the keys of m, sorted.
func names(m map[string]*Arch) []string {
	archMu.RLock()
	defer archMu.RUnlock()
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// supported lists the keys of m for an error message.
func supported(m map[string]*Arch) string { return strings.Join(names(m), ", ") }

// Archs lists kvhost's names of the registered architectures, sorted.
func Archs() []string { return names(archs) }

// arch is c's architecture; an unregistered name (a Config made by hand)
// is an error.
func (c Config) arch() (*Arch, error) {
	a, ok := LookupArch(c.Arch)
	if !ok {
		return nil, fmt.Errorf("model: architecture %q is not registered (registered: %s)", c.Arch, supported(archs))
	}
	return a, nil
}
