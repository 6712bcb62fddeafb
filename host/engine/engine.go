package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/radix"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/sampling"
)

// Config bounds the engine's concurrency and per-step work.
type Config struct {
	// MaxRunning caps sequences in the running batch.
	MaxRunning int
	// MaxQueue caps requests waiting for admission; beyond it Submit fails
	// with ErrQueueFull.
	MaxQueue int
	// ChunkedPrefill caps the new tokens of one forward; -1 disables
	// chunking: a prompt is prefilled whole, and MaxPrefillTokens bounds
	// how many prompt tokens one forward gathers (spec §2's
	// max_prefill_tokens; a single longer prompt still runs alone).
	ChunkedPrefill   int
	MaxPrefillTokens int
	// Graphs, when set, runs pure decode batches through captured graphs;
	// batches it declines (prefill chunks, beyond the largest bucket) run
	// eagerly and are counted.
	Graphs GraphRunner
	// Samplers, when set, runs every non-greedy (or explicitly named)
	// policy as a plugin, batched per policy per step.
	Samplers *sampling.Registry
	// Constraints, when set, runs requests' output constraints.
	Constraints constraint.Runner
	// PrefixCache keeps the KV of finished and prefilled prompts in a
	// radix tree (package radix) so a request sharing a prefix starts
	// after it; unlocked cached pages are evicted before anyone is
	// preempted. Models with recurrent-state pools run without it (the
	// engine takes no state snapshots).
	PrefixCache bool
	// Policy orders admission: FCFS ("" too) or LPM (needs PrefixCache).
	Policy Policy
	// KVEvents, when set, hears the prefix cache's stores and removals
	// (package events' Publisher, for KV-aware routers); needs PrefixCache.
	KVEvents KVEvents
	// AllocatorState, when set, is recorded in out-of-memory diagnoses.
	AllocatorState func() any
	Logger         *slog.Logger
}

// MaxChoices is the most choices (n) one request may ask for.
const MaxChoices = 64

// DefaultMaxPrefillTokens is SGLang's max_prefill_tokens default.
const DefaultMaxPrefillTokens = 16384

// GraphRunner replays captured decode steps (model.DecodeGraphs).
type GraphRunner interface {
	Run(seqs []model.Seq, logits []float32) (bool, error)
}

// Validate names the bad field.
func (c Config) Validate() error {
	switch {
	case c.MaxRunning <= 0:
		return fmt.Errorf("engine: max running requests %d must be positive", c.MaxRunning)
	case c.MaxQueue < 0:
		return fmt.Errorf("engine: max queue %d must be >= 0", c.MaxQueue)
	case c.ChunkedPrefill < 1 && c.ChunkedPrefill != -1:
		return fmt.Errorf("engine: chunked prefill size %d must be positive, or -1 to disable chunking", c.ChunkedPrefill)
	case c.MaxPrefillTokens < 0:
		return fmt.Errorf("engine: max prefill tokens %d must be >= 0", c.MaxPrefillTokens)
	case c.Policy != "" && !slices.Contains(Policies, c.Policy):
		return fmt.Errorf("engine: schedule policy %q, want one of %v", c.Policy, Policies)
	case c.KVEvents != nil && !c.PrefixCache:
		return fmt.Errorf("engine: KV events describe the prefix cache and need it (it is disabled)")
	case c.Policy == LPM && !c.PrefixCache:
		return fmt.Errorf("engine: schedule policy lpm orders by cached prefix and needs the prefix cache (it is disabled)")
	}
	return nil
}

// Forwarder is the part of a model the engine drives.
type Forwarder interface {
	Forward(pools *kv.Set, seqs []model.Seq, logits []float32) error
}

// group is what the choices of one request share: the stream and how many
// of them are still open.
type group struct {
	out  chan Event
	open int
}

// seq is one request's state, owned by the engine goroutine once admitted.
type seq struct {
	id      uint64
	ctx     context.Context
	req     Request
	warmup  bool // Warmup's: no prefix cache (caches)
	grp     *group
	choice  int
	tokens  []int32 // prompt, then generated
	prompt  int
	cached  int   // tokens whose K/V are in the pools
	kv      seqKV // page tables and state slots
	seed    uint64
	step    uint64
	done    bool
	arrival uint64
	topBuf  []sampling.TokenLogprob
	// prompt logprobs gathered during prefill, sent with the first token
	promptLP []PromptLogprob
	started  bool
	// policy is the plugin policy sampling this sequence ("" for the
	// host's sampler); state persists across steps (mirostat's mu). host
	// is the host path's state: the sequence's sampler when policy is "",
	// the last resort when its policy is disabled.
	policy  string
	state   sampling.SeqState
	host    sampling.SeqState
	sampled bool // chosen this step (scratch for sampleAndEmit)
	// con is the output constraint's state; conFed counts the generated
	// tokens it has consumed (it consumes each at the next step).
	con    constraint.Seq
	conFed int
	// submitted and scheduled time the queue: Submit, then the first admit.
	submitted, scheduled time.Time
	// hidden receives an Embed request's hidden states, row by row.
	hidden []float32
	// lock is the cached prefix s holds pages of (prefix cache); prefilled
	// marks that its prompt's blocks were inserted; hit is the prompt
	// tokens served from the cache at its first admission (usage's
	// cached_tokens); score is LPM's scratch.
	lock      radix.Handle
	prefilled bool
	hit       int
	score     int
	// fresh: admitted and nothing computed since past the cached prefix
	// (it may wait for another's prefill and join the prefix that cached,
	// awaitPrefix); firstRun: this is its first admission (hit is
	// recorded then).
	fresh, firstRun bool
}

// Stats is a snapshot for /health and metrics.
type Stats struct {
	Running, Waiting int
	// KVPagesTotal and KVPagesFree sum the token pools' pages, and
	// KVPagesCached those only the prefix cache holds (evictable); Pools
	// has every pool (token and state) on its own.
	KVPagesTotal  int
	KVPagesFree   int
	KVPagesCached int
	Pools         []kv.PoolStat
	Preemptions   int64
	Steps         int64
	// GraphSteps ran through captured graphs; EagerDecodeSteps were pure
	// decode batches run eagerly because no graph fit them.
	GraphSteps       int64
	EagerDecodeSteps int64
	// Prefix is the prefix cache's counters and contents (nil when off).
	Prefix *PrefixStats
}

// Engine schedules requests onto a model.
type Engine struct {
	cfg     Config
	fwd     Forwarder
	kern    device.Kernels
	pools   *kv.Set
	vocab   int
	hidden  int // the model's hidden size (Embed results)
	ctxLen  int
	eog     func(int32) bool
	log     *slog.Logger
	sampler sampling.Sampler

	mu      sync.Mutex
	waiting []*seq
	closed  bool
	wake    chan struct{}
	nextID  uint64
	seeds   uint64

	running     []*seq
	lastBeat    atomic.Int64 // unix ns the loop last went round (Stalled)
	preemptions atomic.Int64
	steps       atomic.Int64
	graphSteps  atomic.Int64
	eagerDecode atomic.Int64
	nRunning    atomic.Int64

	logits []float32
	batch  []model.Seq
	owners []*seq
	// per-step sampling scratch
	pending []pendingRow
	work    []pendingRow
	rows    [][]float32
	states  []sampling.SeqState
	choices []sampling.Choice
	group   []pendingRow
	// per-step constraint scratch
	conRows   []constraint.Row
	conOwners []pendingRow

	stop chan struct{}
	done chan struct{}

	diagMu sync.Mutex
	diags  []Diagnosis
	// lastEager marks that the last forward was a decode batch no graph held.
	lastEager bool

	// cache is the prefix cache (nil when off), owned by the engine
	// goroutine; match is its scratch; resets carries ResetPrefixCache.
	cache                     *radix.Tree
	match                     radix.Prefix
	resets                    chan chan error
	prefixQueries, prefixHits atomic.Int64
}

// New starts an engine over m and the KV pools. eog reports
// end-of-generation tokens.
func New(cfg Config, fwd Forwarder, pools *kv.Set, mc model.Config, eog func(int32) bool) (*Engine, error) {
	e, err := newEngine(cfg, fwd, pools, mc, eog)
	if err != nil {
		return nil, err
	}
	go e.loop()
	return e, nil
}

// newEngine builds an engine without its goroutine; scheduler tests drive
// admit and step by hand to check decisions deterministically.
func newEngine(cfg Config, fwd Forwarder, pools *kv.Set, mc model.Config, eog func(int32) bool) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Engine{
		cfg: cfg, fwd: fwd, pools: pools, vocab: mc.Vocab, hidden: mc.Hidden, ctxLen: mc.ContextLen, eog: eog, log: cfg.Logger,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		seeds: uint64(time.Now().UnixNano()), resets: make(chan chan error),
	}
	if cfg.PrefixCache {
		var err error
		if e.cache, err = newPrefixCache(pools, cfg.KVEvents); err != nil {
			return nil, err
		}
		if e.cache == nil {
			cfg.Logger.Info("engine: prefix cache off: the model keeps recurrent state, which the cache does not snapshot")
		}
	}
	if k, ok := fwd.(interface{ Kernels() device.Kernels }); ok {
		e.kern = k.Kernels()
	}
	return e, nil
}

// Submit admits a request without blocking. The stream ends with a Done or
// Err event; cancelling ctx ends it early and frees its pages.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	return e.submit(ctx, req, false)
}

func (e *Engine) submit(ctx context.Context, req Request, warmup bool) (*Stream, error) {
	if err := e.validate(req); err != nil {
		return nil, err
	}
	// The constraint opens outside the lock (it may compile a grammar).
	con, err := e.openConstraint(ctx, req.Constraint)
	if err != nil {
		return nil, err
	}
	admitted := false
	defer func() {
		if !admitted && con != nil {
			con.Close()
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrShuttingDown
	}
	if free := max(0, e.cfg.MaxRunning-int(e.nRunning.Load())); len(e.waiting) >= e.cfg.MaxQueue+free {
		return nil, fmt.Errorf("%w: %d requests waiting (limit %d)", ErrQueueFull, len(e.waiting), e.cfg.MaxQueue)
	}
	e.nextID++
	n := max(req.N, 1)
	g := &group{out: make(chan Event, n*(req.MaxTokens+2)), open: 1}
	s := &seq{id: e.nextID, arrival: e.nextID, ctx: ctx, req: req, warmup: warmup, grp: g, prompt: len(req.Prompt), kv: e.newSeqKV(), submitted: time.Now()}
	if req.Embed {
		s.hidden = make([]float32, len(req.Prompt)*e.hidden)
	}
	s.tokens = append(make([]int32, 0, len(req.Prompt)+req.MaxTokens), req.Prompt...)
	if req.Sampling.Seed != nil {
		s.seed = *req.Sampling.Seed
	} else {
		e.seeds = e.seeds*6364136223846793005 + 1442695040888963407
		s.seed = e.seeds
	}
	if err := e.resolvePolicy(s); err != nil {
		return nil, err
	}
	s.con, admitted = con, true
	e.waiting = append(e.waiting, s)
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return &Stream{Events: g.out}, nil
}

func (e *Engine) validate(req Request) error {
	if len(req.Prompt) == 0 {
		return &InvalidRequestError{Field: "prompt", Problem: "the prompt is empty"}
	}
	for _, t := range req.Prompt {
		if t < 0 || int(t) >= e.vocab {
			return &InvalidRequestError{Field: "prompt", Problem: fmt.Sprintf("token id %d is outside the vocabulary of %d", t, e.vocab)}
		}
	}
	if req.Embed {
		return e.validateEmbed(req)
	}
	if len(req.Prompt) >= e.ctxLen {
		return &InvalidRequestError{Field: "prompt", Problem: fmt.Sprintf("the prompt has %d tokens; the context holds %d, so at most %d prompt tokens leave room for one new token", len(req.Prompt), e.ctxLen, e.ctxLen-1)}
	}
	if req.MaxTokens < 1 {
		return &InvalidRequestError{Field: "max_tokens", Problem: fmt.Sprintf("%d must be at least 1", req.MaxTokens)}
	}
	if room := e.ctxLen - len(req.Prompt); req.MaxTokens > room {
		return &InvalidRequestError{Field: "max_tokens", Problem: fmt.Sprintf("%d new tokens do not fit: the prompt has %d tokens and the context %d, so at most %d", req.MaxTokens, len(req.Prompt), e.ctxLen, room)}
	}
	if err := e.capacityError(len(req.Prompt), max(req.N, 1), req.MaxTokens); err != nil {
		return err
	}
	if req.PromptLogprobStart < 0 || req.PromptLogprobStart > len(req.Prompt) {
		return &InvalidRequestError{Field: "logprob_start_len", Problem: fmt.Sprintf("%d out of range [0, %d]", req.PromptLogprobStart, len(req.Prompt))}
	}
	if req.PromptTopLogprobs < 0 || req.PromptTopLogprobs > 20 {
		return &InvalidRequestError{Field: "top_logprobs_num", Problem: fmt.Sprintf("%d out of range [0, 20]", req.PromptTopLogprobs)}
	}
	if req.N < 0 || req.N > MaxChoices {
		return &InvalidRequestError{Field: "n", Problem: fmt.Sprintf("%d out of range [1, %d]", req.N, MaxChoices)}
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > 20 {
		return &InvalidRequestError{Field: "top_logprobs", Problem: fmt.Sprintf("%d out of range [0, 20]", req.TopLogprobs)}
	}
	if err := req.Sampling.Validate(); err != nil {
		var fe *sampling.FieldError
		if errors.As(err, &fe) {
			return &InvalidRequestError{Field: fe.Field, Problem: fe.Problem}
		}
		return &InvalidRequestError{Field: "sampling", Problem: err.Error()}
	}
	for _, b := range req.Sampling.LogitBias {
		if int(b.Token) >= e.vocab {
			return &InvalidRequestError{Field: "logit_bias", Problem: fmt.Sprintf("token id %d is outside the vocabulary of %d", b.Token, e.vocab)}
		}
	}
	return nil
}

// validateEmbed checks what an Embed request may carry: a prompt that fits
// the context and the pool, and none of the generation fields.
func (e *Engine) validateEmbed(req Request) error {
	switch {
	case len(req.Prompt) > e.ctxLen:
		return &InvalidRequestError{Field: "input", Problem: fmt.Sprintf("the input has %d tokens; the context holds %d", len(req.Prompt), e.ctxLen)}
	case req.MaxTokens != 0 || req.N > 1 || req.Logprobs || req.PromptLogprobs || req.TopLogprobs != 0:
		return &InvalidRequestError{Field: "embed", Problem: "an embedding request generates nothing: max_tokens, n, logprobs must be unset"}
	case e.hidden <= 0:
		return &InvalidRequestError{Field: "embed", Problem: "the model's hidden size is unknown"}
	}
	if pool, need, capacity := e.tooSmall(len(req.Prompt), 1, 0); pool != "" {
		return &InvalidRequestError{Field: "input", Problem: fmt.Sprintf("the input has %d tokens, more than the whole KV pool %s holds (%d with a page of room, %d)", len(req.Prompt), pool, need, capacity)}
	}
	return nil
}

// Stats returns a snapshot of the engine's load.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	w := len(e.waiting)
	e.mu.Unlock()
	st := Stats{
		Running: int(e.nRunning.Load()), Waiting: w, Pools: e.pools.Stats(),
		Preemptions: e.preemptions.Load(), Steps: e.steps.Load(),
		GraphSteps: e.graphSteps.Load(), EagerDecodeSteps: e.eagerDecode.Load(), Prefix: e.PrefixCache(),
	}
	if st.Prefix != nil {
		// The tree's pools are the token pools, in order.
		j := 0
		for i := range st.Pools {
			if st.Pools[i].Unit == "token" {
				st.Pools[i].SetCached(st.Prefix.Evictable[j])
				j++
			}
		}
	}
	for _, p := range st.Pools {
		if p.Unit == "token" {
			st.KVPagesTotal += p.Pages
			st.KVPagesFree += p.FreePages
			st.KVPagesCached += p.CachedPages
		}
	}
	return st
}

// Close stops admitting, ends every open stream with ErrShuttingDown and
// waits for the engine goroutine to exit (or ctx to expire).
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.stop)
	}
	e.mu.Unlock()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) loop() {
	defer close(e.done)
	for {
		select {
		case <-e.stop:
			e.shutdown()
			return
		default:
		}
		e.beat()
		if e.cache != nil {
			e.serveResets()
		}
		e.admit()
		if len(e.running) == 0 {
			select {
			case <-e.wake:
			case reply := <-e.resets:
				reply <- e.resetCache()
			case <-e.stop:
			}
			continue
		}
		e.safeStep()
		if e.cfg.KVEvents != nil {
			e.cfg.KVEvents.EndStep()
		}
	}
}

func (e *Engine) shutdown() {
	e.mu.Lock()
	all := append(e.running, e.waiting...)
	e.waiting = nil
	e.mu.Unlock()
	for _, s := range all {
		e.finish(s, Event{Done: true, Err: ErrShuttingDown})
	}
	e.running = nil
	e.nRunning.Store(0)
	if e.cache != nil {
		if err := e.resetCache(); err != nil {
			e.log.Error("engine: prefix cache not emptied at shutdown", "err", err)
		}
	}
}

// pendingRow is a sequence whose next token is to be chosen from row.
type pendingRow struct {
	s   *seq
	row []float32
}

func isStop(tok int32, stops []int32) bool {
	for _, s := range stops {
		if s == tok {
			return true
		}
	}
	return false
}
