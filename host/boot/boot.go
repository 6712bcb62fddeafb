package boot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/events"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/host/sampling"
)

// Config is everything startup needs; host/cmd fills it from flags.
type Config struct {
	Model          string
	Device         string
	DeviceMemory   int64
	Threads        int
	MaxRunning     int
	MaxQueue       int
	ChunkedPrefill int
	// LogprobChunk bounds the logits rows of one LM-head matmul when input
	// logprobs are asked for; 0 is 2048 (spec §4).
	LogprobChunk int
	// MaxPrefillTokens bounds one forward's prompt tokens when chunking is
	// disabled (ChunkedPrefill -1); 0 is SGLang's 16384.
	MaxPrefillTokens int
	// DisableRadixCache turns the prefix cache off (SGLang's
	// --disable-radix-cache); SchedulePolicy is engine.Config.Policy.
	DisableRadixCache bool
	SchedulePolicy    engine.Policy
	// KVEvents publishes the prefix cache's stores and removals to
	// KV-aware routers when enabled (vLLM's --kv-events-config).
	KVEvents       events.Config
	PageSize       int
	MaxTotalTokens int
	// KVCacheDType is --kv-cache-dtype in the sdk's spelling (fp32, fp16,
	// bf16, fp8_e4m3, fp8_e5m2, mxfp8, nvfp4); "" is plan.DefaultKVDType.
	KVCacheDType string
	// MemFractionStatic, when in (0, 1], fixes the runtime slack at
	// P·(1−f) (spec §2) instead of kvhost's measured headroom; with
	// SGLangCompat it replaces SGLang's default f.
	MemFractionStatic float64
	// SGLangCompat sizes the KV pool with SGLang's arithmetic (spec §2–§3:
	// default f, budget = A − P·(1−f), one direct allocation per buffer)
	// instead of profiling and post-capture growth.
	SGLangCompat bool
	// GraphMaxBS is the largest decode batch captured as a graph: -1 takes
	// spec §2's default for the device's memory class (capped at
	// MaxRunning), 0 runs every decode eagerly.
	GraphMaxBS int
	// Configurators is the KV-configurator plugin registry; nil means the
	// built-in set, overlaid by PluginsDir when one is given.
	Configurators *plugin.Registry
	PluginsDir    string
	// PluginAllowlist pins the plugins that may load (sha256, optional
	// name); empty allows every plugin. Built-ins are always trusted.
	PluginAllowlist []string
	// Samplers, when set, gives the engine its sampling policy plugins.
	Samplers *sampling.Registry
	// Constraints, when set, builds the engine's output-constraint runner
	// over the loaded model's vocabulary (vocab: the logit row width).
	Constraints func(tok constraint.Tokens, vocab int) (constraint.Runner, error)
	// Timeline, when set, records how long each startup step takes.
	Timeline *Timeline
}

// Validate names the bad field.
func (c Config) Validate() error {
	switch {
	case c.MaxRunning <= 0:
		return fmt.Errorf("boot: max running requests %d must be positive", c.MaxRunning)
	case c.ChunkedPrefill <= 0 && c.ChunkedPrefill != -1:
		return fmt.Errorf("boot: chunked prefill size %d must be positive, or -1 to disable chunking", c.ChunkedPrefill)
	case c.PageSize <= 0 || c.PageSize > 1024:
		return fmt.Errorf("boot: page size %d out of range [1, 1024]", c.PageSize)
	case c.MaxTotalTokens < 0:
		return fmt.Errorf("boot: max total tokens %d must be >= 0", c.MaxTotalTokens)
	case c.KVEvents.Enabled() && c.DisableRadixCache:
		return fmt.Errorf("boot: KV events describe the prefix cache; they cannot be enabled with the radix cache disabled")
	case c.MemFractionStatic < 0 || c.MemFractionStatic > 1:
		return fmt.Errorf("boot: mem fraction static %v out of range (0, 1] (0: the policy's own)", c.MemFractionStatic)
	}
	return nil
}

// Phase names, in startup order (ARCHITECTURE.md §3).
const (
	PhaseDeviceInit = "device init"
	PhaseWeights    = "weights"
	PhaseKVPools    = "KV pools"
	PhaseWorkspaces = "workspaces"
	PhaseCapture    = "graph capture (profile forward)"
	PhaseGrowth     = "post-capture KV growth"
	PhaseReady      = "ready"
)

// Stack is everything serve builds, in build order, so it can be torn down.
type Stack struct {
	Dev     device.Device
	Weights *alloc.Direct
	Act     *alloc.Allocator
	Model   *model.Model
	Pools   *kv.Set
	Engine  *engine.Engine
	Chat    *chat.Template
	Ledger  *ledger.Ledger
	Budget  plan.Budget
	Graphs  *model.DecodeGraphs
	// Configurators is the registry the KV configurator came from.
	Configurators *plugin.Registry
	// Constraints is the engine's output-constraint runner (nil: none);
	// Close closes it when it can be closed.
	Constraints constraint.Runner
	// Events publishes KV events (nil: off); Close closes it after the
	// engine.
	Events *events.Publisher

	kv     plan.KVConfig // the configurator that sized the pool
	tl     *Timeline     // startup steps (nil: not recorded)
	out    io.Writer     // progress lines for slow steps
	direct *alloc.Direct // KV arena in SGLang-compat mode
	arena  *arena        // KV arena in kvhost mode
}

// Close stops the engine and frees everything in reverse build order.
func (s *Stack) Close(ctx context.Context) {
	if s.Engine != nil {
		_ = s.Engine.Close(ctx)
	}
	if s.Events != nil {
		_ = s.Events.Close()
	}
	if c, ok := s.Constraints.(interface{ Close(context.Context) error }); ok {
		_ = c.Close(ctx)
	}
	if s.Graphs != nil {
		s.Graphs.Close()
	}
	if s.Pools != nil {
		s.Pools.Close()
	}
	if s.arena != nil {
		_ = s.arena.release()
	}
	if s.Model != nil {
		_ = s.Model.Close()
	}
	if s.Dev != nil {
		_ = s.Dev.Close()
	}
}

// Build opens the device, loads the model, sizes and allocates the KV pool
// and starts the engine, recording each phase in the ledger. stdout receives
// human-readable progress lines for anything slow.
func Build(f Config, log *slog.Logger, stdout io.Writer) (*Stack, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Stack{out: stdout, tl: f.Timeline}
	if s.out == nil {
		s.out = io.Discard
	}
	fail := func(err error) (*Stack, error) {
		s.Close(context.Background())
		return nil, err
	}
	dev, err := device.Open(f.Device, device.Options{MemoryBytes: f.DeviceMemory, Threads: f.Threads})
	if err != nil {
		return nil, err
	}
	s.Dev = dev
	info := dev.Info()
	L := ledger.New(dev, log)
	s.Ledger = L
	log.Info("device opened", "device", info.Name, "total_bytes", info.Total)
	P := L.Phase(PhaseDeviceInit).FreeAfter
	s.tl.Mark("device")

	weights, wsrc := ledger.NewDirect("weights", dev, ledger.DevicePage(info))
	s.Weights = weights
	s.Act = alloc.New("caching", dev)
	L.AddSource(wsrc)
	L.AddSource(ledger.Caching{A: s.Act})
	L.SetRuntime(s.Act)
	start, lastPct := time.Now(), -1
	opts := model.Options{Device: dev, Weights: weights, Activations: s.Act, Progress: func(done, all int64) {
		pct := int(100 * done / max(all, 1))
		if time.Since(start) > time.Second && pct/10 != lastPct/10 {
			lastPct = pct
			fmt.Fprintf(stdout, "loading weights: %d%%\n", pct)
		}
	}}
	m, err := model.Load(f.Model, opts)
	if err != nil {
		return fail(err)
	}
	s.Model = m
	m.LogitsChunk = f.LogprobChunk
	c := m.Config
	// With chunking disabled the widest forward is a whole prompt: size
	// the budget for one at the context limit.
	engineChunk := f.ChunkedPrefill
	if f.ChunkedPrefill < 0 {
		f.ChunkedPrefill = c.ContextLen
	}
	log.Info("model loaded", "name", m.Name, "arch", c.Arch, "params", c.Params(), "weight_bytes", m.WeightBytes(), "mapped_from_file_bytes", m.MappedBytes, "context", c.ContextLen)
	for _, n := range append(c.Notes(), m.Notes...) {
		log.Info(n)
	}
	_ = s.Act.EmptyCache()
	A := L.Phase(PhaseWeights).FreeAfter
	s.tl.Mark("weights")

	b := plan.Budget{
		TotalBytes: info.Total, PBytes: P, ABytes: A, WeightBytes: wsrc.M.DeviceBytes(),
		ChunkedPrefill: f.ChunkedPrefill, MaxRunning: f.MaxRunning, ContextLen: c.ContextLen,
		MaxTotalTokens: f.MaxTotalTokens, Threads: info.Threads, MaxChoices: engine.MaxChoices,
		PageSize: f.PageSize, Granularity: ledger.DevicePage(info),
	}
	reg, err := configurators(f)
	if err != nil {
		return fail(err)
	}
	s.Configurators = reg
	hfc, err := plan.HFConfig(f.Model)
	if err != nil {
		return fail(err)
	}
	kc, err := plan.ConfigureKV(context.Background(), reg, plan.KVRequest{Config: c, HFConfig: hfc, KVDType: f.KVCacheDType, PageSize: f.PageSize,
		MaxRunning: f.MaxRunning, ChunkedPrefill: f.ChunkedPrefill, SGLangCompat: f.SGLangCompat})
	if err != nil {
		return fail(fmt.Errorf("boot: KV configurator: %w", err))
	}
	b.KVConfigurator, b.KVDType = kc.Record(), kc.StoredAs()
	s.kv = kc
	s.tl.Mark("KV configurator")
	log.Info("KV layout configured", "plugin", kc.Plugin, "version", kc.Version, "recalled", kc.Recalled(), "kv_dtype", kc.KVDType, "cell_bytes", kc.CellBytes,
		"pools", len(kc.Layout.Pools), "buffers", kc.Layout.Buffers())
	b.GraphBuckets = plan.DecodeBuckets(GraphMaxBS(f, info), f.MaxRunning)
	if f.SGLangCompat {
		err = s.sizeCompat(f, &b)
	} else {
		err = s.sizeKVHost(f, &b)
	}
	if err != nil {
		return fail(err)
	}
	b.Reservations = plan.Reservations(c, b)
	s.Budget = b
	// The pools are sized: nothing calls the configurator again while
	// serving, so its compiled code and instance are let go.
	if err := reg.Unload(context.Background(), kc.LoadedAs()); err != nil {
		log.Warn("unloading the KV configurator", "plugin", kc.LoadedAs(), "err", err)
	}
	L.SetBudget(b)
	L.SetKVPools(s.Pools.Stats)
	logPools(log, b, s.Pools)

	ecfg := engine.Config{MaxRunning: f.MaxRunning, MaxQueue: f.MaxQueue, ChunkedPrefill: engineChunk, MaxPrefillTokens: f.MaxPrefillTokens, Logger: log,
		PrefixCache: !f.DisableRadixCache, Policy: f.SchedulePolicy,
		AllocatorState: func() any { return s.Act.Stats() }, Samplers: f.Samplers}
	if s.Graphs != nil {
		ecfg.Graphs = s.Graphs
		log.Info("decode graphs captured", "buckets", s.Graphs.Buckets(), "pool_bytes", s.Graphs.PoolBytes())
	}
	if f.Constraints != nil {
		// The constraint runner (a large plugin given the whole
		// vocabulary: ~30 MiB resident) loads on the first request with a
		// constraint, which waits for it; a server that never sees one
		// never loads it.
		build, tok, vocab := f.Constraints, m.Tokenizer, c.Vocab
		ecfg.Constraints = constraint.NewOnDemand(func() (constraint.Runner, error) {
			start := time.Now()
			r, err := build(tok, vocab)
			if err != nil {
				log.Error("output constraints failed to load; requests with a constraint fail", "err", err)
				return nil, fmt.Errorf("boot: output constraints: %w", err)
			}
			log.Info("output constraints ready", "runner", r.Name(), "load_seconds", time.Since(start).Seconds())
			return r, nil
		})
		s.Constraints = ecfg.Constraints
	}
	if f.KVEvents.Enabled() {
		h, err := events.NewHasher("")
		if err != nil {
			return fail(err)
		}
		if s.Events, err = events.NewPublisher(context.Background(), f.KVEvents, h); err != nil {
			return fail(fmt.Errorf("boot: %w", err))
		}
		ecfg.KVEvents = s.Events
		log.Info("KV events published", "config", f.KVEvents.WithDefaults().String())
	}
	eng, err := engine.New(ecfg, m, s.Pools, c, m.Tokenizer.EOG)
	if err != nil {
		return fail(err)
	}
	s.Engine = eng
	s.tl.Mark("engine")
	L.SetKVPools(func() []kv.PoolStat { return eng.Stats().Pools }) // with the prefix cache's share
	L.SetDiagnoses(func() any { return eng.Diagnoses() })
	tmpl, err := chat.New(m.ChatTemplate, m.BOSText, m.EOSText)
	if err != nil {
		log.Warn("the model's chat template does not compile; using the fallback", "err", err)
		tmpl, _ = chat.New("", m.BOSText, m.EOSText)
	}
	s.Chat = tmpl
	L.Phase(PhaseReady)
	L.MarkServing()
	return s, nil
}

// logPools writes the startup line of every pool: what it holds, its
// size, and why it has that size.
func logPools(log *slog.Logger, b plan.Budget, pools *kv.Set) {
	for _, p := range pools.Stats() {
		what := fmt.Sprintf("#tokens: %d, page size: %d", p.CapacityTokens, p.PageSize)
		if p.Unit == "request" {
			what = fmt.Sprintf("#slots: %d", p.Slots)
		}
		log.Info(fmt.Sprintf("KV cache is allocated. pool %s (%s, %s): %s, cell: %d B/%s, size: %.2f GiB (GiB = 2^30 B)",
			p.Name, p.Kind, p.DType, what, p.CellBytes, p.Unit, float64(p.Bytes)/ledger.GiB),
			"policy", b.Policy, "headroom_bytes", b.HeadroomBytes, "sglang_tokens", b.SGLang.Tokens)
	}
	if b.TokenCap > 0 && b.UncappedTokens > b.Tokens {
		log.Info(fmt.Sprintf("KV pools sized to %d tokens, %s; the memory would hold %d (--max-total-tokens or --mem-fraction-static asks for more)",
			b.Tokens, b.TokenCapReason, b.UncappedTokens), "token_cap", b.TokenCap)
	}
}

// sizeCompat is SGLang's path (spec §3): budget = A − P·(1−f), units from
// the configurator for that budget, one allocation per buffer, no
// profiling. A pool too small for one request at the context is refused.
func (s *Stack) sizeCompat(f Config, b *plan.Budget) error {
	c, L := s.Model.Config, s.Ledger
	l := s.kv.Layout
	b.Policy = "sglang-compat"
	b.Caps(false, f.MemFractionStatic)
	b.MemFractionStatic, b.FractionFromFlag = f.MemFractionStatic, f.MemFractionStatic > 0
	sg := plan.SGLangFigures(s.sglangInput(f, b, f.MemFractionStatic))
	b.SGLang = &sg
	b.MemFractionStatic = sg.MemFractionStatic
	b.HeadroomBytes = int64(sg.SlackGiB * budget.GiB)
	units, err := plan.CompatUnits(context.Background(), s.kv, b, sg, c.ContextLen)
	if err != nil {
		return err
	}
	b.Units, b.Tokens, b.KVBudgetBytes = units, units[plan.Primary(l)], sg.BudgetBytes
	b.UpperBoundUnits, b.UpperBoundTokens = units, b.Tokens
	arena, src := ledger.NewDirect("kv_arena", s.Dev, ledger.DevicePage(s.Dev.Info()))
	L.AddSource(src)
	s.direct = arena
	pools, err := kv.Allocate(l, units, arena)
	if err != nil {
		return err
	}
	s.Pools = pools
	b.KVMappedBytes = src.M.DeviceBytes()
	L.Phase(PhaseKVPools)
	L.Phase(PhaseWorkspaces)
	if err := s.captureGraphs(b, pools); err != nil {
		return err
	}
	L.Phase(PhaseCapture)
	return nil
}

// sglangInput is SGLang's view of this start (spec §2–§3): the budget's
// readings, the flags, the KV cell and whether the pools are MLA's.
func (s *Stack) sglangInput(f Config, b *plan.Budget, fraction float64) plan.SGLangInput {
	return plan.SGLangInput{TotalBytes: b.TotalBytes, PBytes: b.PBytes, ABytes: b.ABytes, MemFractionStatic: fraction, ChunkedPrefill: f.ChunkedPrefill,
		TP: 1, CellBytes: float64(s.kv.CellBytes), PageSize: f.PageSize, MaxTotalTokens: f.MaxTotalTokens, ContextLen: s.Model.Config.ContextLen,
		MLA: plan.LatentLayout(s.kv.Layout)}
}

// configurators returns the registry a Config names: its own, the built-in
// set overlaid by PluginsDir, or the process's built-in set.
func configurators(f Config) (*plugin.Registry, error) {
	switch {
	case f.Configurators != nil:
		return f.Configurators, nil
	case f.PluginsDir != "" || len(f.PluginAllowlist) > 0:
		rt, err := plugin.NewRuntime(context.Background(), plugin.Config{})
		if err != nil {
			return nil, err
		}
		return plugin.NewRegistryWith(rt, builtin.FS(), f.PluginsDir, plugin.RegistryOptions{AllowSHA256: f.PluginAllowlist})
	}
	return plan.DefaultConfigurators()
}

// GraphMaxBS resolves Config.GraphMaxBS: -1 is spec §2's default for the
// device's memory (SGLang's table by total MiB, tensor-parallel size 1).
func GraphMaxBS(f Config, info device.Info) int {
	if f.GraphMaxBS >= 0 {
		return f.GraphMaxBS
	}
	return budget.GraphMaxBatch(float64(info.Total)/budget.MiB, 1)
}

// captureGraphs captures the decode graphs against pools; their private
// pool's segments are what the capture phase costs.
func (s *Stack) captureGraphs(b *plan.Budget, pools *kv.Set) error {
	if len(b.GraphBuckets) == 0 {
		return nil
	}
	g, err := s.Model.CaptureDecodeGraphs(pools, b.GraphBuckets)
	if errors.Is(err, model.ErrNoCapture) {
		b.GraphBuckets = nil
		return nil
	}
	if err != nil {
		if errors.Is(err, device.ErrOutOfMemory) {
			return &budget.InsufficientMemoryError{Phase: "graph-capture", NeedBytes: s.Act.Stats().PeakReserved, HaveBytes: b.ABytes,
				Knob: "--cuda-graph-max-bs", Suggest: fmt.Sprint(max(0, b.GraphBuckets[len(b.GraphBuckets)-1]/2))}
		}
		return err
	}
	s.Graphs = g
	b.GraphPoolBytes = g.PoolBytes()
	return nil
}

// sizeKVHost is kvhost's path: reserve the pools' upper bound as address
// space, map a prefix, profile the worst-case forwards against it, then grow
// the pools into what is measured to be left less the measured headroom.
func (s *Stack) sizeKVHost(f Config, b *plan.Budget) error {
	c, L, m := s.Model.Config, s.Ledger, s.Model
	l := s.kv.Layout
	vm, ok := s.Dev.(device.VirtualMemory)
	if !ok {
		return fmt.Errorf("boot: device %s has no virtual memory for post-capture KV growth; start with --sglang-compat", s.Dev.Info().Kind)
	}
	b.Policy = "kvhost"
	b.Granularity = vm.Granularity()
	b.Caps(s.Dev.Info().Kind == "cpu", f.MemFractionStatic)
	sg := plan.SGLangFigures(s.sglangInput(f, b, 0))
	b.SGLang = &sg
	ctx := context.Background()
	if err := b.Reserve(ctx, s.kv); err != nil {
		return err
	}
	ar, err := newArena("kv_arena", vm, l, b.UpperBoundUnits)
	if err != nil {
		return err
	}
	s.arena = ar
	L.AddSource(ar)
	if err := ar.mapTo(b.PrefixUnits); err != nil {
		return err
	}
	L.Phase(PhaseKVPools)
	L.Phase(PhaseWorkspaces)

	tmp, err := kv.Over(l, b.PrefixUnits, ar.span)
	if err != nil {
		return err
	}
	ar.use(b.PrefixUnits)
	batches := plan.ProfileBatches(c.ContextLen, f.ChunkedPrefill, f.MaxRunning)
	if _, rec := s.Dev.(device.Recorder); !rec {
		fmt.Fprintf(s.out, "measuring the runtime peak: %d profile forwards at the %d-token chunk limit, then decode graph capture ...\n", len(batches), f.ChunkedPrefill)
	}
	peak, err := profile(s.Dev, m, s.Act, tmp, batches, f.ChunkedPrefill)
	s.tl.Mark("profile forwards")
	if err == nil {
		err = s.captureGraphs(b, tmp)
		s.tl.Mark("graph capture")
	}
	tmp.Close()
	if err != nil {
		return err
	}
	simPeak, largest, err := plan.ActivationPeak(c, l, batches, b.Threads, f.LogprobChunk)
	if err != nil {
		return err
	}
	if simPeak != peak {
		slog.Default().Warn("boot: profiled activation peak differs from plan's replay", "measured", peak, "replayed", simPeak)
	}
	b.ProfilePeakBytes, b.FragmentationBytes = peak, largest
	b.HeadroomBytes = plan.Headroom(peak, largest)
	if f.MemFractionStatic > 0 {
		b.MemFractionStatic, b.FractionFromFlag = f.MemFractionStatic, true
		b.HeadroomBytes = plan.FractionHeadroom(b.PBytes, f.MemFractionStatic)
	}
	b.FreeAfterCapture = L.Phase(PhaseCapture).FreeAfter

	if err := plan.Grow(ctx, s.kv, b, c.ContextLen); err != nil {
		return err
	}
	if err := ar.mapTo(b.Units); err != nil {
		return err
	}
	pools, err := kv.Over(l, b.Units, ar.span)
	if err != nil {
		return err
	}
	ar.use(b.Units)
	s.Pools = pools
	s.tl.Mark("KV growth")
	if s.Graphs != nil {
		if err := s.Graphs.Recapture(pools); err != nil {
			return err
		}
		s.tl.Mark("graph recapture")
	}
	L.Phase(PhaseGrowth)
	return nil
}

// profile runs the worst-case forwards against small pools and returns the
// caching allocator's peak reserved bytes; the cache is emptied afterwards.
// On a device whose capture only records (device.Recorder: the CPU device)
// each forward is captured and the graph closed unlaunched: the forward's
// own code makes every allocation it makes when it runs, through the same
// allocator on the same device, so the peak is the same to the byte
// (TestRecordedProfileMatchesExecuted) at a few milliseconds instead of
// three forwards at the chunk limit. Elsewhere the forwards run.
func profile(dev device.Device, m *model.Model, act *alloc.Allocator, pools *kv.Set, batches [][]plan.SeqShape, chunk int) (int64, error) {
	rec, _ := dev.(device.Recorder)
	return profileWith(rec, m, act, pools, batches, chunk)
}

// profileWith is profile recording on rec, or running the forwards when
// rec is nil.
func profileWith(rec device.Recorder, m *model.Model, act *alloc.Allocator, pools *kv.Set, batches [][]plan.SeqShape, chunk int) (int64, error) {
	if err := act.EmptyCache(); err != nil {
		return 0, err
	}
	act.ResetPeak()
	before := act.Stats().Reserved
	rows := 0
	for _, shapes := range batches {
		n := 0
		for _, sh := range shapes {
			n += sh.LogitRows
		}
		rows = max(rows, n)
	}
	logits := make([]float32, rows*m.Config.Vocab)
	for _, shapes := range batches {
		if err := forward(rec, m, pools, plan.ProfileSeqs(shapes, pools), logits); err != nil {
			if errors.Is(err, device.ErrOutOfMemory) {
				return 0, &budget.InsufficientMemoryError{Phase: "profile-forward", NeedBytes: act.Stats().PeakReserved, HaveBytes: act.Stats().Reserved,
					Knob: "--chunked-prefill-size", Suggest: fmt.Sprint(max(1, chunk/2)), SuggestValue: float64(max(1, chunk/2)), Minimum: 1}
			}
			return 0, fmt.Errorf("boot: profile forward: %w", err)
		}
	}
	peak := act.Stats().PeakReserved - before
	return peak, act.EmptyCache()
}

// forward runs one profile forward, or records it on rec and drops the
// recording.
func forward(rec device.Recorder, m *model.Model, pools *kv.Set, seqs []model.Seq, logits []float32) error {
	if rec == nil {
		return m.Forward(pools, seqs, logits)
	}
	if err := rec.BeginCapture(); err != nil {
		return err
	}
	err := m.Forward(pools, seqs, logits)
	g, cerr := rec.EndCapture()
	if cerr == nil {
		cerr = g.Close()
	}
	return errors.Join(err, cerr)
}
