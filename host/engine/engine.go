package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
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
	// AllocatorState, when set, is recorded in out-of-memory diagnoses.
	AllocatorState func() any
	Logger         *slog.Logger
}

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
	}
	return nil
}

// Forwarder is the part of a model the engine drives.
type Forwarder interface {
	Forward(pool *kv.Pool, seqs []model.Seq, logits []float32) error
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
	grp     *group
	choice  int
	tokens  []int32 // prompt, then generated
	prompt  int
	cached  int // tokens whose K/V are in the pool
	pages   []int32
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
}

// Stats is a snapshot for /health and metrics.
type Stats struct {
	Running, Waiting int
	KVPagesTotal     int
	KVPagesFree      int
	Preemptions      int64
	Steps            int64
	// GraphSteps ran through captured graphs; EagerDecodeSteps were pure
	// decode batches run eagerly because no graph fit them.
	GraphSteps       int64
	EagerDecodeSteps int64
}

// Engine schedules requests onto a model.
type Engine struct {
	cfg     Config
	fwd     Forwarder
	kern    device.Kernels
	pool    *kv.Pool
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
}

// New starts an engine over m and pool. eog reports end-of-generation tokens.
func New(cfg Config, fwd Forwarder, pool *kv.Pool, mc model.Config, eog func(int32) bool) (*Engine, error) {
	e, err := newEngine(cfg, fwd, pool, mc, eog)
	if err != nil {
		return nil, err
	}
	go e.loop()
	return e, nil
}

// newEngine builds an engine without its goroutine; scheduler tests drive
// admit and step by hand to check decisions deterministically.
func newEngine(cfg Config, fwd Forwarder, pool *kv.Pool, mc model.Config, eog func(int32) bool) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Engine{
		cfg: cfg, fwd: fwd, pool: pool, vocab: mc.Vocab, hidden: mc.Hidden, ctxLen: mc.ContextLen, eog: eog, log: cfg.Logger,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		seeds: uint64(time.Now().UnixNano()),
	}
	if k, ok := fwd.(interface{ Kernels() device.Kernels }); ok {
		e.kern = k.Kernels()
	}
	return e, nil
}

// Submit admits a request without blocking. The stream ends with a Done or
// Err event; cancelling ctx ends it early and frees its pages.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
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
	s := &seq{id: e.nextID, arrival: e.nextID, ctx: ctx, req: req, grp: g, prompt: len(req.Prompt), submitted: time.Now()}
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
	capTokens := e.pool.Spec().NumPages * e.pool.Spec().PageSize
	if need := len(req.Prompt) + max(req.N, 1)*(req.MaxTokens+e.pool.Spec().PageSize); need > capTokens {
		return &InvalidRequestError{Field: "max_tokens", Problem: fmt.Sprintf("prompt plus max_tokens is %d tokens, more than the whole KV pool holds (%d)", need, capTokens)}
	}
	if req.PromptLogprobStart < 0 || req.PromptLogprobStart > len(req.Prompt) {
		return &InvalidRequestError{Field: "logprob_start_len", Problem: fmt.Sprintf("%d out of range [0, %d]", req.PromptLogprobStart, len(req.Prompt))}
	}
	if req.PromptTopLogprobs < 0 || req.PromptTopLogprobs > 20 {
		return &InvalidRequestError{Field: "top_logprobs_num", Problem: fmt.Sprintf("%d out of range [0, 20]", req.PromptTopLogprobs)}
	}
	if req.N < 0 || req.N > 64 {
		return &InvalidRequestError{Field: "n", Problem: fmt.Sprintf("%d out of range [1, 64]", req.N)}
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
	capTokens := e.pool.Spec().NumPages * e.pool.Spec().PageSize
	if need := len(req.Prompt) + e.pool.Spec().PageSize; need > capTokens {
		return &InvalidRequestError{Field: "input", Problem: fmt.Sprintf("the input has %d tokens, more than the whole KV pool holds (%d)", len(req.Prompt), capTokens-e.pool.Spec().PageSize)}
	}
	return nil
}

// Stats returns a snapshot of the engine's load.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	w := len(e.waiting)
	e.mu.Unlock()
	return Stats{
		Running: int(e.nRunning.Load()), Waiting: w,
		KVPagesTotal: e.pool.Spec().NumPages, KVPagesFree: e.pool.FreePages(),
		Preemptions: e.preemptions.Load(), Steps: e.steps.Load(),
		GraphSteps: e.graphSteps.Load(), EagerDecodeSteps: e.eagerDecode.Load(),
	}
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
		e.admit()
		if len(e.running) == 0 {
			select {
			case <-e.wake:
			case <-e.stop:
			}
			continue
		}
		e.safeStep()
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
}

// admit moves waiting requests into the running set, oldest first.
func (e *Engine) admit() {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Admit in arrival order while the free pages can hold each newcomer's
	// tokens: admitting what cannot fit would only preempt it again.
	free := e.pool.FreePages()
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxRunning {
		s := e.waiting[0]
		need := e.pool.PagesFor(len(s.tokens) + 1)
		if len(e.running) > 0 && need > free {
			break
		}
		free -= need
		e.waiting = e.waiting[1:]
		e.running = append(e.running, s)
		if s.scheduled.IsZero() {
			s.scheduled = time.Now()
		}
	}
	e.nRunning.Store(int64(len(e.running)))
}

// safeStep turns a panic anywhere in a step into an error for the step's
// sequences, so the engine keeps serving the others.
func (e *Engine) safeStep() {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("engine: panic in step", "panic", r, "stack", string(debug.Stack()))
			err := fmt.Errorf("engine: internal error: %v", r)
			for _, s := range e.owners {
				e.finish(s, Event{Done: true, Err: err})
			}
			e.compact()
		}
	}()
	e.step()
}

// finish sends the final event, frees pages and closes the stream.
func (e *Engine) finish(s *seq, ev Event) {
	if s.done {
		return
	}
	s.done = true
	s.closeConstraint()
	e.pool.Release(s.pages)
	s.pages = nil
	ev.PromptTokens, ev.CompletionTokens = s.prompt, len(s.tokens)-s.prompt
	ev.Choice = s.choice
	if !s.started && max(s.req.N, 1) > 1 {
		// Failed before the fork: end every choice.
		for c := 0; c < s.req.N; c++ {
			ev.Choice = c
			s.grp.out <- ev
		}
	} else {
		s.grp.out <- ev
	}
	s.grp.open--
	if s.grp.open == 0 {
		close(s.grp.out)
	}
}

// compact drops finished sequences from the running set.
func (e *Engine) compact() {
	kept := e.running[:0]
	for _, s := range e.running {
		if !s.done {
			kept = append(kept, s)
		}
	}
	for i := len(kept); i < len(e.running); i++ {
		e.running[i] = nil
	}
	e.running = kept
	e.nRunning.Store(int64(len(kept)))
}

// evict preempts victim: its pages return to the pool and it waits at the
// head of the queue to be recomputed from its tokens.
func (e *Engine) evict(victim *seq) {
	e.pool.Release(victim.pages)
	victim.pages, victim.cached = nil, 0
	for i, s := range e.running {
		if s == victim {
			e.running = append(e.running[:i], e.running[i+1:]...)
			break
		}
	}
	e.mu.Lock()
	e.waiting = append([]*seq{victim}, e.waiting...)
	e.mu.Unlock()
	e.preemptions.Add(1)
	e.log.Debug("engine: preempted", "seq", victim.id, "tokens", len(victim.tokens))
}

var errCancelled = errors.New("engine: request cancelled")

func (e *Engine) step() {
	for _, s := range e.running {
		if s.ctx.Err() != nil {
			e.finish(s, Event{Done: true, Err: errCancelled})
		}
	}
	e.compact()
	e.batch, e.owners = e.batch[:0], e.owners[:0]
	budget, chunking := e.cfg.ChunkedPrefill, true
	if budget < 0 {
		budget, chunking = e.cfg.MaxPrefillTokens, false
		if budget == 0 {
			budget = DefaultMaxPrefillTokens
		}
	}
	prefills := 0
	// Decodes first: each running sequence with everything cached but its
	// last token contributes that token.
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		if s.done || len(s.tokens)-s.cached != 1 {
			continue
		}
		if !e.reserve(s, len(s.tokens)) {
			continue
		}
		if err := e.pool.Unshare(s.pages, (len(s.tokens)-1)/e.pool.Spec().PageSize, e.kern); err != nil {
			if errors.Is(err, kv.ErrNoPages) && e.preemptOther(s) {
				i--
				continue
			}
			continue
		}
		e.add(s, 1)
		budget--
	}
	// Then prompt chunks in arrival order.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		rest := len(s.tokens) - s.cached
		if s.done || rest <= 1 && s.cached > 0 || e.inBatch(s) {
			continue
		}
		n := min(rest, budget)
		if !chunking {
			// Whole prompts only: one that does not fit the budget waits,
			// unless it is the step's first, which runs alone.
			if rest > budget && prefills > 0 {
				continue
			}
			n = rest
		}
		if !e.reserve(s, s.cached+n) {
			continue
		}
		e.add(s, n)
		budget -= n
		prefills++
	}
	if len(e.batch) == 0 {
		e.compact()
		return
	}
	e.run()
	e.compact()
}

func (e *Engine) inBatch(s *seq) bool {
	for _, o := range e.owners {
		if o == s {
			return true
		}
	}
	return false
}

// reserve grows s's pages to cover n tokens, preempting newer sequences if
// the pool is full. It fails the request if even an empty pool is too small.
func (e *Engine) reserve(s *seq, n int) bool {
	for {
		pages, err := e.pool.Grow(s.pages, n)
		if err == nil {
			s.pages = pages
			return true
		}
		if !e.preemptOther(s) {
			if len(e.owners) == 0 && len(e.running) == 1 {
				e.finish(s, Event{Done: true, Err: fmt.Errorf("engine: the KV pool cannot hold %d tokens", n)})
			}
			return false
		}
	}
}

// preemptOther evicts the newest running sequence that arrived after s and
// is not in this step's batch; older requests are never evicted for newer.
func (e *Engine) preemptOther(s *seq) bool {
	var victim *seq
	for _, r := range e.running {
		if r != s && !r.done && !e.inBatch(r) && (victim == nil || r.arrival > victim.arrival) {
			victim = r
		}
	}
	if victim == nil || victim.arrival < s.arrival {
		return false
	}
	e.evict(victim)
	return true
}

func (e *Engine) add(s *seq, n int) {
	rows := 0
	if s.cached+n == len(s.tokens) {
		rows = 1
	}
	if s.req.PromptLogprobs && !s.started {
		// Position p's logits score prompt token p+1: rows from
		// PromptLogprobStart-1 to the chunk's end are wanted.
		first := max(0, s.req.PromptLogprobStart-1)
		rows = max(rows, min(n, s.cached+n-max(s.cached, first)))
	}
	ms := model.Seq{Tokens: s.tokens[s.cached : s.cached+n], Start: s.cached, Pages: s.pages, LogitRows: rows}
	if s.req.Embed {
		ms.LogitRows, ms.Hidden = 0, s.hidden[s.cached*e.hidden:(s.cached+n)*e.hidden]
	}
	e.batch = append(e.batch, ms)
	e.owners = append(e.owners, s)
}

// run executes the batch; if it fails for lack of memory, each sequence is
// retried alone so only those that cannot run even alone fail.
func (e *Engine) run() {
	e.steps.Add(1)
	if err := e.forward(e.batch, e.owners); err != nil {
		if errors.Is(err, device.ErrOutOfMemory) {
			e.record(e.diagnose(e.batch, e.owners, e.lastEager, err))
		}
		if len(e.batch) == 1 || !errors.Is(err, device.ErrOutOfMemory) {
			for _, s := range e.owners {
				e.finish(s, Event{Done: true, Err: err})
			}
			return
		}
		e.log.Warn("engine: batch forward out of memory; retrying sequences one by one", "seqs", len(e.batch), "err", err)
		for i := range e.batch {
			if err := e.forward(e.batch[i:i+1], e.owners[i:i+1]); err != nil {
				if errors.Is(err, device.ErrOutOfMemory) {
					e.record(e.diagnose(e.batch[i:i+1], e.owners[i:i+1], e.lastEager, err))
				}
				e.finish(e.owners[i], Event{Done: true, Err: err})
			}
		}
	}
}

func (e *Engine) forward(batch []model.Seq, owners []*seq) error {
	rows := 0
	for _, b := range batch {
		rows += b.LogitRows
	}
	if need := rows * e.vocab; cap(e.logits) < need {
		e.logits = make([]float32, need)
	}
	logits := e.logits[:rows*e.vocab]
	ran := false
	e.lastEager = false
	if e.cfg.Graphs != nil && isDecode(batch) {
		var err error
		if ran, err = e.cfg.Graphs.Run(batch, logits); err != nil {
			return err
		}
		if ran {
			e.graphSteps.Add(1)
		} else {
			e.eagerDecode.Add(1)
			e.lastEager = true
		}
	}
	if !ran {
		if err := e.fwd.Forward(e.pool, batch, logits); err != nil {
			return err
		}
	}
	r := 0
	for i, b := range batch {
		s := owners[i]
		first := b.Start + len(b.Tokens) - b.LogitRows
		s.cached += len(b.Tokens)
		if s.req.Embed && s.cached == len(s.tokens) {
			e.finish(s, Event{Done: true, FinishReason: "embed", Hidden: s.hidden, Queue: s.scheduled.Sub(s.submitted)})
			continue
		}
		for j := 0; j < b.LogitRows; j++ {
			pos := first + j
			row := logits[(r+j)*e.vocab : (r+j+1)*e.vocab]
			switch {
			case pos+1 < s.prompt && !s.started:
				e.scorePrompt(s, pos+1, row)
			case pos == len(s.tokens)-1:
				e.pending = append(e.pending, pendingRow{s, row})
			}
		}
		r += b.LogitRows
	}
	return e.sampleAndEmit()
}

// scorePrompt records the logprob of prompt token idx from the row that
// predicts it.
func (e *Engine) scorePrompt(s *seq, idx int, row []float32) {
	if idx < s.req.PromptLogprobStart {
		return
	}
	var lp float32
	lp, s.topBuf = sampling.LogSoftmaxAt(row, s.tokens[idx], s.req.PromptTopLogprobs, s.topBuf)
	pl := PromptLogprob{Index: idx, Token: s.tokens[idx], Logprob: lp}
	for _, c := range s.topBuf {
		pl.Top = append(pl.Top, TokenLogprob{Token: c.Token, Logprob: c.Logprob})
	}
	s.promptLP = append(s.promptLP, pl)
}

// fork creates the other n-1 choices of s after its prompt is cached: they
// share its pages (copy-on-write) and sample from the same last row.
func (e *Engine) fork(s *seq, row []float32) {
	n := max(s.req.N, 1)
	for c := 1; c < n; c++ {
		child := &seq{
			id: s.id, arrival: s.arrival, ctx: s.ctx, req: s.req, grp: s.grp, choice: c, prompt: s.prompt,
			tokens: append(make([]int32, 0, cap(s.tokens)), s.tokens[:s.prompt]...), cached: s.prompt,
			pages: e.pool.Share(s.pages), seed: s.seed + uint64(c)*0x9e3779b97f4a7c15, started: true,
		}
		s.grp.open++
		e.running = append(e.running, child)
		if err := e.resolvePolicy(child); err != nil {
			e.finish(child, Event{Done: true, Err: err})
			continue
		}
		if s.con != nil {
			// s has not consumed its first token yet (it does so next
			// step): the fork starts where the children start.
			c, err := s.con.Fork(s.ctx)
			if err != nil {
				e.finish(child, Event{Done: true, Err: fmt.Errorf("engine: constraint: %w", err)})
				continue
			}
			child.con = c
		}
		e.pending = append(e.pending, pendingRow{child, row})
	}
}

// emit streams tok, the token chosen for s from row, and forks the other
// choices after a prompt's first token.
func (e *Engine) emit(s *seq, row []float32, tok int32, version string) {
	if !s.started && max(s.req.N, 1) > 1 {
		defer e.fork(s, row)
	}
	s.step++
	ev := Event{Token: tok, Choice: s.choice, SamplerVersion: version}
	if !s.started {
		s.started = true
		ev.Prompt, s.promptLP = s.promptLP, nil
		ev.Queue = s.scheduled.Sub(s.submitted)
	}
	if s.req.Logprobs {
		var lp float32
		lp, s.topBuf = sampling.LogSoftmaxAt(row, tok, s.req.TopLogprobs, s.topBuf)
		ev.Logprob = lp
		for _, c := range s.topBuf {
			ev.TopLogprobs = append(ev.TopLogprobs, TokenLogprob{Token: c.Token, Logprob: c.Logprob})
		}
	}
	s.tokens = append(s.tokens, tok)
	s.grp.out <- ev
	generated := len(s.tokens) - s.prompt
	switch {
	case !s.req.IgnoreEOS && e.eog(tok), isStop(tok, s.req.StopTokens):
		e.finish(s, Event{Done: true, FinishReason: "stop"})
	case generated >= s.req.MaxTokens || len(s.tokens) >= e.ctxLen:
		e.finish(s, Event{Done: true, FinishReason: "length"})
	}
}

// pendingRow is a sequence whose next token is to be chosen from row.
type pendingRow struct {
	s   *seq
	row []float32
}

// resolvePolicy decides how s samples (sampling.UsesPolicy): the host's
// sampler, or the named (or default) plugin policy when the engine has a
// registry, with the parameters the server compiled or, when it did not,
// compiled here by the same sampling.Registry.Compile.
func (e *Engine) resolvePolicy(s *seq) error {
	r := s.req
	s.host = sampling.NewSeqState(r.Sampling, nil, r.Prompt, s.seed)
	if e.cfg.Samplers == nil || r.SamplerParams == nil && !sampling.UsesPolicy(r.Sampler, nil, r.Sampling) {
		return nil
	}
	c := r.SamplerParams
	if c == nil {
		cc, err := e.cfg.Samplers.Compile(r.Sampler, nil, r.Sampling)
		if err != nil {
			var pe *sampling.ParamError
			if errors.As(err, &pe) && pe.FromRequest {
				return &InvalidRequestError{Field: pe.Param, Problem: fmt.Sprintf("%s (sampler %q)", pe.Problem, pe.Policy)}
			}
			return &InvalidRequestError{Field: "sampler", Problem: err.Error()}
		}
		c = &cc
	}
	s.policy = c.Policy()
	s.state = sampling.NewSeqState(r.Sampling, c, r.Prompt, s.seed)
	return nil
}

// sampleAndEmit chooses the next token of every pending row — host argmax
// or sampler, or one plugin call per policy for the whole step — and
// streams them. A policy that fails fails only its own sequences.
func (e *Engine) sampleAndEmit() error {
	pend := append(e.work[:0], e.pending...)
	e.pending = e.pending[:0]
	defer func() { e.work = pend[:0] }()
	if e.cfg.Constraints != nil {
		pend = e.constrain(pend)
	}
	for i := 0; i < len(pend); i++ {
		p := pend[i]
		if p.s.policy != "" {
			continue
		}
		e.emit(p.s, p.row, e.sampleHost(p), "")
		pend = append(pend, e.pending...) // forks of this row
		e.pending = e.pending[:0]
	}
	for {
		e.group = e.group[:0]
		policy := ""
		for _, p := range pend {
			if p.s.policy != "" && !p.s.done && (policy == "" || p.s.policy == policy) && !p.s.sampled {
				policy = p.s.policy
				e.group = append(e.group, p)
			}
		}
		if len(e.group) == 0 {
			break
		}
		e.rows, e.states = e.rows[:0], e.states[:0]
		for _, p := range e.group {
			st := &p.s.state
			st.Step, st.Generated = p.s.step, p.s.tokens[p.s.prompt:]
			e.rows = append(e.rows, p.row)
			e.states = append(e.states, *st)
		}
		if cap(e.choices) < len(e.group) {
			e.choices = make([]sampling.Choice, len(e.group))
		}
		out := e.choices[:len(e.group)]
		err := e.cfg.Samplers.SampleBatch(context.Background(), policy, e.rows, e.states, out)
		disabled := errors.Is(err, sampling.ErrPolicyDisabled)
		for i, p := range e.group {
			p.s.sampled = true
			switch {
			case disabled:
				// The policy failed repeatedly and so did (or is) the
				// default: the host's own sampler takes over.
				e.emit(p.s, p.row, e.sampleHost(p), "host")
			case err != nil:
				e.finish(p.s, Event{Done: true, Err: fmt.Errorf("engine: sampler %s: %w", policy, err)})
			default:
				p.s.state.State = e.states[i].State
				e.emit(p.s, p.row, out[i].Token, out[i].Policy+"@"+out[i].Version)
			}
		}
		pend = append(pend, e.pending...)
		e.pending = e.pending[:0]
	}
	for _, p := range pend {
		p.s.sampled = false
	}
	return nil
}

// sampleHost picks p's next token with the host's sampler.
func (e *Engine) sampleHost(p pendingRow) int32 {
	st := &p.s.host
	st.Step, st.Generated = p.s.step, p.s.tokens[p.s.prompt:]
	return e.sampler.SampleSeq(p.row, st)
}

func isDecode(batch []model.Seq) bool {
	for _, b := range batch {
		if len(b.Tokens) != 1 || b.LogitRows != 1 || b.Hidden != nil {
			return false
		}
	}
	return true
}

func isStop(tok int32, stops []int32) bool {
	for _, s := range stops {
		if s == tok {
			return true
		}
	}
	return false
}
