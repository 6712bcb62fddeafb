//go:build cuda

package gpucheck

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cuda"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/plan"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Loaded is a model on a device with its KV pool and allocators.
type Loaded struct {
	M     *model.Model
	Pools *kv.Set  // declared by the built-in configurator, f32
	Pool  *kv.Pool // its one token pool
	Act   *alloc.Allocator
	W     *alloc.Direct
	KV    *alloc.Direct
}

// LoadModel loads path onto dev with a KV pool of pages×16 positions.
func LoadModel(dev device.Device, path string, pages int) (*Loaded, error) {
	l := &Loaded{Act: alloc.New("activations", dev), W: alloc.NewDirect("weights", dev), KV: alloc.NewDirect("kv", dev)}
	m, err := model.Load(path, model.Options{Device: dev, Weights: l.W, Activations: l.Act})
	if err != nil {
		return nil, err
	}
	l.M = m
	c := m.Config
	reg, err := plan.DefaultConfigurators()
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	kc, err := plan.ConfigureKV(context.Background(), reg, plan.KVRequest{Config: c, KVDType: "fp32", PageSize: 16})
	if err == nil {
		l.Pools, err = kv.Allocate(kc.Layout, []int{pages * 16}, l.KV)
	}
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	l.Pool = l.Pools.TokenPools()[0]
	return l, nil
}

// Close frees the pool, weights and cached activations.
func (l *Loaded) Close() {
	l.Pools.Close()
	_ = l.M.Close()
	_ = l.Act.EmptyCache()
}

// Greedy decodes steps tokens greedily after prompt, returning the tokens
// and the first step's logits.
func Greedy(l *Loaded, prompt []int32, steps int) ([]int32, []float32, error) {
	c := l.M.Config
	pages, err := l.Pool.Grow(nil, len(prompt)+steps)
	if err != nil {
		return nil, nil, err
	}
	defer l.Pool.Release(pages)
	logits := make([]float32, c.Vocab)
	var first []float32
	toks := append([]int32(nil), prompt...)
	seq := model.Seq{Tokens: prompt, Start: 0, Pages: [][]int32{pages}, Slots: []int32{}, LogitRows: 1}
	var out []int32
	for s := 0; s < steps; s++ {
		if err := l.M.Forward(l.Pools, []model.Seq{seq}, logits); err != nil {
			return out, first, err
		}
		if first == nil {
			first = append([]float32(nil), logits...)
		}
		t := int32(kcpu.Argmax(logits))
		out = append(out, t)
		seq = model.Seq{Tokens: []int32{t}, Start: len(toks), Pages: [][]int32{pages}, Slots: []int32{}, LogitRows: 1}
		toks = append(toks, t)
	}
	return out, first, nil
}

// GreedyResult compares greedy decoding on the CPU and CUDA devices.
type GreedyResult struct {
	Model        string  `json:"model"`
	Steps        int     `json:"steps"`
	Equal        bool    `json:"equal"`
	CPU          []int32 `json:"cpu_tokens"`
	CUDA         []int32 `json:"cuda_tokens"`
	FirstMaxDiff float64 `json:"first_logits_max_abs_diff"`
	Error        string  `json:"error,omitempty"`
}

// CompareGreedy runs the same greedy decode on cpuL and gpuL.
func CompareGreedy(d *cuda.Device, cpuL, gpuL *Loaded, prompt []int32, steps int) GreedyResult {
	r := GreedyResult{Steps: steps}
	var errC, errG error
	var lc, lg []float32
	r.CPU, lc, errC = Greedy(cpuL, prompt, steps)
	errG = d.Run(func() error {
		var err error
		r.CUDA, lg, err = Greedy(gpuL, prompt, steps)
		return err
	})
	if errC != nil || errG != nil {
		r.Error = fmt.Sprintf("cpu: %v; cuda: %v", errC, errG)
		return r
	}
	for i := range lc {
		r.FirstMaxDiff = math.Max(r.FirstMaxDiff, math.Abs(float64(lc[i]-lg[i])))
	}
	r.Equal = len(r.CPU) == len(r.CUDA)
	for i := range r.CPU {
		if i >= len(r.CUDA) || r.CPU[i] != r.CUDA[i] {
			r.Equal = false
		}
	}
	return r
}

// DecodeResult is decode throughput at one batch size, eagerly and as
// replays of the model's captured decode graph, and whether a replay
// reproduces the eager step.
type DecodeResult struct {
	Batch           int     `json:"batch"`
	Steps           int     `json:"steps"`
	EagerTokS       float64 `json:"eager_tokens_per_s"`
	GraphTokS       float64 `json:"graph_tokens_per_s,omitempty"`
	GraphLaunches   int     `json:"graph_recorded_ops,omitempty"`
	GraphNodes      int     `json:"graph_nodes,omitempty"`
	GraphPoolBytes  int64   `json:"graph_pool_bytes,omitempty"`
	GraphBitwise    bool    `json:"graph_bitwise_equals_eager"`
	GraphArgmaxSame bool    `json:"graph_argmax_equals_eager"`
	GraphMaxDiff    float64 `json:"graph_max_abs_diff"`
	GraphError      string  `json:"graph_error,omitempty"`
	Error           string  `json:"error,omitempty"`
}

// DecodePages is the KV pages (of 16) BenchDecode needs for batch and steps.
func DecodePages(batch, steps int) int { return batch*((2*steps+4+15)/16+1) + 2 }

// BenchDecode prefills batch one-token sequences, times steps eager decode
// steps, then captures the model's decode graph for this batch
// (model.CaptureDecodeGraphs), checks one replay against the eager forward
// of the same step and times steps replays.
func BenchDecode(d *cuda.Device, l *Loaded, batch, steps int) DecodeResult {
	r := DecodeResult{Batch: batch, Steps: steps}
	c := l.M.Config
	seqs := make([]model.Seq, batch)
	tables := make([][]int32, batch)
	defer func() {
		for _, t := range tables {
			l.Pool.Release(t)
		}
	}()
	for i := range seqs {
		t, err := l.Pool.Grow(nil, 2*steps+4)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		tables[i] = t
		seqs[i] = model.Seq{Tokens: []int32{int32(1 + i%(c.Vocab-1))}, Start: 0, Pages: [][]int32{t}, Slots: []int32{}, LogitRows: 1}
	}
	logits := make([]float32, batch*c.Vocab)
	advance := func() {
		for i := range seqs {
			seqs[i].Start++
			seqs[i].Tokens = []int32{int32(kcpu.Argmax(logits[i*c.Vocab : (i+1)*c.Vocab]))}
		}
	}
	err := d.Run(func() error {
		if err := l.M.Forward(l.Pools, seqs, logits); err != nil {
			return err
		}
		advance()
		if err := d.Sync(); err != nil {
			return err
		}
		t0 := time.Now()
		for s := 0; s < steps; s++ {
			if err := l.M.Forward(l.Pools, seqs, logits); err != nil {
				return err
			}
			advance()
		}
		r.EagerTokS = float64(batch*steps) / time.Since(t0).Seconds()
		return nil
	})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if err := d.Run(func() error { return graphDecode(d, l, seqs, logits, steps, advance, &r) }); err != nil {
		r.GraphError = err.Error()
	}
	return r
}

func graphDecode(d *cuda.Device, l *Loaded, seqs []model.Seq, logits []float32, steps int, advance func(), r *DecodeResult) error {
	c := l.M.Config
	g, err := l.M.CaptureDecodeGraphs(l.Pools, []int{len(seqs)})
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	defer g.Close()
	r.GraphPoolBytes = g.PoolBytes()
	// On the owner thread: the graph just captured is the device's newest.
	if ng := d.NewestGraph(); ng != nil {
		r.GraphLaunches, r.GraphNodes = ng.Launches(), ng.Nodes()
	}
	// The eager step and the replay of the same step write the same KV rows
	// (same tokens, positions and history), so their logits must agree.
	if err := l.M.Forward(l.Pools, seqs, logits); err != nil {
		return err
	}
	eager := append([]float32(nil), logits...)
	clear(logits)
	ok, err := g.Run(seqs, logits)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if !ok {
		return fmt.Errorf("replay: the decode graphs declined a batch of %d", len(seqs))
	}
	r.GraphBitwise, r.GraphArgmaxSame = true, true
	for i := range eager {
		r.GraphMaxDiff = math.Max(r.GraphMaxDiff, math.Abs(float64(eager[i]-logits[i])))
		if eager[i] != logits[i] {
			r.GraphBitwise = false
		}
	}
	for i := range seqs {
		row := func(x []float32) []float32 { return x[i*c.Vocab : (i+1)*c.Vocab] }
		if kcpu.Argmax(row(eager)) != kcpu.Argmax(row(logits)) {
			r.GraphArgmaxSame = false
		}
	}
	advance()
	t0 := time.Now()
	for s := 0; s < steps; s++ {
		if _, err := g.Run(seqs, logits); err != nil {
			return fmt.Errorf("replay step %d: %w", s, err)
		}
		advance()
	}
	r.GraphTokS = float64(len(seqs)*steps) / time.Since(t0).Seconds()
	return nil
}

// PrefillResult is prefill throughput for one prompt.
type PrefillResult struct {
	Tokens int     `json:"tokens"`
	Runs   int     `json:"runs"`
	TokS   float64 `json:"tokens_per_s"`
	Error  string  `json:"error,omitempty"`
}

// BenchPrefill times runs forwards of one tokens-long prompt (after one
// warm-up), each producing the last position's logits.
func BenchPrefill(d *cuda.Device, l *Loaded, tokens, runs int) PrefillResult {
	r := PrefillResult{Tokens: tokens, Runs: runs}
	c := l.M.Config
	pages, err := l.Pool.Grow(nil, tokens)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer l.Pool.Release(pages)
	prompt := make([]int32, tokens)
	for i := range prompt {
		prompt[i] = int32(1 + (i*7919)%(c.Vocab-1))
	}
	seq := []model.Seq{{Tokens: prompt, Start: 0, Pages: [][]int32{pages}, Slots: []int32{}, LogitRows: 1}}
	logits := make([]float32, c.Vocab)
	err = d.Run(func() error {
		if err := l.M.Forward(l.Pools, seq, logits); err != nil {
			return err
		}
		t0 := time.Now()
		for i := 0; i < runs; i++ {
			if err := l.M.Forward(l.Pools, seq, logits); err != nil {
				return err
			}
		}
		r.TokS = float64(tokens*runs) / time.Since(t0).Seconds()
		return nil
	})
	if err != nil {
		r.Error = err.Error()
	}
	return r
}
