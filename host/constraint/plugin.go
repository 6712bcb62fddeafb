package constraint

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kvhost/kvhost/host/plugin"
	sdkc "github.com/kvhost/kvhost/sdk/constraint"
)

// Plugin runs a constraint plugin (constraint ABI, sdk/CONSTRAINT_ABI.md)
// on the plugin runtime: the production runner. Its instances, fuel,
// deadlines and memory caps are the runtime's (plugin.Constraint).
type Plugin struct {
	c   *plugin.Constraint
	eog []int32
	rt  *plugin.Runtime // owned (NewPluginRuntime): closed by Close

	mu   sync.Mutex // guards rows (Step is called by one goroutine; Open may race it)
	rows []plugin.ConstraintRow
}

var _ Runner = (*Plugin)(nil)

// NewPlugin loads wasm as a constraint plugin over a tokenizer's
// vocabulary of n ids (the logit row width). The plugin must accept
// compiled grammars (format "kvg1"): that is what the host sends.
func NewPlugin(ctx context.Context, rt *plugin.Runtime, name string, wasm []byte, t Tokens, n int) (*Plugin, error) {
	vocab, eog, err := Vocab(t, n)
	if err != nil {
		return nil, err
	}
	c, err := rt.LoadConstraint(ctx, name, wasm, vocab)
	if err != nil {
		return nil, err
	}
	if !c.Accepts(sdkc.SpecFormatGrammar) {
		_ = c.Close(ctx)
		return nil, fmt.Errorf("constraint: plugin %s does not accept format %q, which kvhost sends", name, sdkc.SpecFormatGrammar)
	}
	return &Plugin{c: c, eog: eog}, nil
}

// Name implements Runner: "<name>@<version>".
func (p *Plugin) Name() string { return p.c.Name() + "@" + p.c.Descriptor().Version }

// EOG implements Runner.
func (p *Plugin) EOG() []int32 { return p.eog }

// Close unloads the plugin (and closes the runtime it owns).
func (p *Plugin) Close(ctx context.Context) error {
	err := p.c.Close(ctx)
	if p.rt != nil {
		err = errors.Join(err, p.rt.Close(ctx))
	}
	return err
}

// NewPluginRuntime is NewPlugin on a runtime of its own, built with cfg
// and closed by Close.
func NewPluginRuntime(ctx context.Context, cfg plugin.Config, name string, wasm []byte, t Tokens, n int) (*Plugin, error) {
	rt, err := plugin.NewRuntime(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p, err := NewPlugin(ctx, rt, name, wasm, t, n)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	p.rt = rt
	return p, nil
}

// Stats are the plugin's call counters.
func (p *Plugin) Stats() plugin.Stats { return p.c.Stats() }

type pluginSeq struct{ q *plugin.ConstraintSeq }

// Open implements Runner: a spec the plugin refuses (status bad spec) is
// ErrSpec.
func (p *Plugin) Open(ctx context.Context, spec *Spec) (Seq, error) {
	q, err := p.c.Open(ctx, spec.Key(), spec.Wire())
	if err != nil {
		var ge *plugin.GuestError
		if errors.As(err, &ge) && ge.Status == sdkc.StatusBadSpec {
			return nil, fmt.Errorf("%w: %v", ErrSpec, err)
		}
		return nil, err
	}
	return pluginSeq{q}, nil
}

func (s pluginSeq) Fork(ctx context.Context) (Seq, error) {
	q, err := s.q.Fork(ctx)
	if err != nil {
		return nil, err
	}
	return pluginSeq{q}, nil
}

func (s pluginSeq) Close() { s.q.Close() }

// Step implements Runner.
func (p *Plugin) Step(ctx context.Context, rows []Row) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows = p.rows[:0]
	for i := range rows {
		q, ok := rows[i].Seq.(pluginSeq)
		if !ok {
			rows[i].Err = fmt.Errorf("constraint: row %d belongs to another runner", i)
			continue
		}
		p.rows = append(p.rows, plugin.ConstraintRow{Seq: q.q, Token: rows[i].Token, Budget: rows[i].Budget})
	}
	p.c.Step(ctx, p.rows)
	k := 0
	for i := range rows {
		if _, ok := rows[i].Seq.(pluginSeq); !ok {
			continue
		}
		r := &p.rows[k]
		k++
		rows[i].Mask, rows[i].Accept, rows[i].Complete, rows[i].Err = r.Mask, r.Accept, r.Complete, r.Err
	}
}
