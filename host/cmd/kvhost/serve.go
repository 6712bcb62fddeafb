package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/device"
	_ "github.com/kvhost/kvhost/host/device/cpu" // the embedded default device
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/kv/events"
	"github.com/kvhost/kvhost/host/metrics"
	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/model/tokenizer"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/allowlist"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/host/sampling"
	"github.com/kvhost/kvhost/host/sampling/admin"
	"github.com/kvhost/kvhost/host/server"
	"github.com/kvhost/kvhost/web"
)

type serveFlags struct {
	config         string
	model          string
	addr           string
	dev            string
	devMemory      byteSize
	threads        int
	maxRunning     int
	maxQueue       int
	chunkedPrefill int
	maxPrefill     int
	noRadixCache   bool
	skipWarmup     bool
	schedPolicy    string
	kvEventsJSON   string
	kvEvents       events.Config
	logprobChunk   int
	pageSize       int
	maxTotalTokens int
	memFraction    float64
	sglangCompat   bool
	graphMaxBS     int
	maxTokensCap   int
	maxBody        byteSize
	logLevel       string
	maxPrompt      int
	apiKey         string
	apiKeyFile     string
	adminKey       string
	adminKeyFile   string
	pluginsDir     string
	samplerDefault string
	allowlist      string
	disableAfter   int
	stallTimeout   time.Duration
	shutdownWait   time.Duration
	logFormat      string
	origins        stringList
	pooling        string
	kvDType        *kvDTypeValue
	kvCacheDType   string // kvDType resolved
	publicMetrics  bool
}

// stringList is a flag.Value of comma-separated strings.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// parseServeFlags reads serve's settings: flags, then KVHOST_* variables,
// then the config file (see settle). It returns the flag set and each
// setting's source for the effective configuration printed at startup.
func parseServeFlags(args []string, stderr io.Writer, getenv func(string) string) (serveFlags, *flag.FlagSet, map[string]string, error) {
	var f serveFlags
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&f.config, "config", "", "YAML file of settings named like these flags (or KVHOST_CONFIG); flags and KVHOST_* variables override it")
	fs.StringVar(&f.model, "model", "", "model to serve: a GGUF file, a Hugging Face directory, or a hub id (hf://ORG/NAME[:QUANT|:FILE], or a bare ORG/NAME that is not a local path), pulled into the Hugging Face cache (required)")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&f.dev, "device", "cpu", "device kind: "+strings.Join(device.Kinds(), ", "))
	fs.Var(&f.devMemory, "device-memory", "CPU device memory capacity, e.g. 6GiB (default: 8 GiB or half of RAM, whichever is smaller)")
	fs.IntVar(&f.threads, "threads", 0, "CPU kernel threads (default: all cores)")
	fs.IntVar(&f.maxRunning, "max-running-requests", 32, "sequences decoded together at most")
	fs.IntVar(&f.maxQueue, "max-queue", 256, "requests waiting for admission at most; more get 429")
	fs.IntVar(&f.chunkedPrefill, "chunked-prefill-size", 512, "new tokens in one forward at most (bounds the activation peak); -1 disables chunking")
	fs.IntVar(&f.logprobChunk, "logprob-chunk-size", 2048, "rows of full-vocabulary logits one LM-head matmul computes for input logprobs (freed chunk by chunk)")
	fs.BoolVar(&f.noRadixCache, "disable-radix-cache", false, "turn the prefix cache off: every prompt is computed from scratch")
	fs.BoolVar(&f.skipWarmup, "skip-server-warmup", false, "say ready without first serving one short warm-up request (the first client request then pays the cold forward)")
	fs.StringVar(&f.schedPolicy, "schedule-policy", "fcfs", "admission order: fcfs (arrival) or lpm (longest cached prefix first; needs the prefix cache)")
	fs.StringVar(&f.kvEventsJSON, "kv-events-config", "", `publish the prefix cache's stores and removals to KV-aware routers, vLLM's JSON: {"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","topic":"kv@pod@model"} (off by default)`)
	fs.IntVar(&f.maxPrefill, "max-prefill-tokens", 16384, "with chunking disabled, prompt tokens one forward gathers at most (a longer prompt runs alone)")
	fs.IntVar(&f.pageSize, "page-size", 16, "KV cache page size in tokens")
	fs.IntVar(&f.maxTotalTokens, "max-total-tokens", 0, "cap on KV pool tokens (0: as many as memory allows)")
	fs.Float64Var(&f.memFraction, "mem-fraction-static", 0, "fix the runtime slack at P·(1−f) as SGLang does, instead of kvhost's measured headroom (0: measured)")
	fs.BoolVar(&f.sglangCompat, "sglang-compat", false, "size the KV pool with SGLang's arithmetic (default f, no profiling, no post-capture growth)")
	fs.IntVar(&f.graphMaxBS, "cuda-graph-max-bs", -1, "largest decode batch captured as a graph (-1: by device memory class as SGLang; 0: no graphs)")
	fs.IntVar(&f.maxTokensCap, "max-tokens-cap", 0, "largest max_tokens a request may ask for (0: the context window)")
	f.maxBody = 4 << 20
	fs.Var(&f.maxBody, "max-body", "largest request body")
	fs.IntVar(&f.maxPrompt, "max-prompt-tokens", 0, "longest prompt in tokens a request may send (0: the context window)")
	fs.StringVar(&f.apiKey, "api-key", "", "require this bearer key on every route but /health, /ready and the dashboard shell, /metrics included (or KVHOST_API_KEY)")
	fs.StringVar(&f.apiKeyFile, "api-key-file", "", "file with bearer keys for --api-key's routes, one per line")
	fs.StringVar(&f.adminKey, "admin-key", "", "bearer key for the /admin routes (or KVHOST_ADMIN_KEY); without one they are disabled")
	fs.StringVar(&f.adminKeyFile, "admin-key-file", "", "file holding the admin bearer key")
	fs.StringVar(&f.pluginsDir, "plugins", "", "folder of .wasm plugins (KV configurators, samplers); a file named like a built-in overrides it")
	fs.StringVar(&f.samplerDefault, "sampler-default", "standard", "sampling policy of requests that name none (temperature 0 stays a host-side argmax)")
	fs.StringVar(&f.allowlist, "plugin-allowlist", "", "file of sha256 pins (one per line, optional name); when set, only listed plugins (and the built-ins) load; re-read when it changes for samplers in --plugins")
	fs.IntVar(&f.disableAfter, "sampler-disable-after", 0, "consecutive failed steps after which a sampler policy is disabled and the default serves its requests (0: 3; -1: never)")
	fs.DurationVar(&f.stallTimeout, "stall-timeout", 30*time.Second, "/health and /ready answer 503 \"engine stalled\" when the engine has work but completed no step for this long")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug | info | warn | error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text | json (one JSON object per line)")
	fs.DurationVar(&f.shutdownWait, "shutdown-timeout", 30*time.Second, "how long running streams may finish on shutdown")
	f.kvDType = kvDTypeFlag(fs, "the KV configurator declares its pools in it")
	fs.BoolVar(&f.publicMetrics, "public-metrics", false, "serve /metrics without the API key (for scrapers that send none, such as the Gateway API inference extension's endpoint picker); every other route keeps requiring it")
	fs.Var(&f.origins, "allowed-origins", "browser origins allowed to call the API (CORS), comma-separated: https://app.example.com, or * for any (default: none)")
	fs.StringVar(&f.pooling, "embeddings-pooling", server.PoolingMean, "how /v1/embeddings pools the final hidden states: mean | last")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kvhost serve --model MODEL [flags]\n\nEvery flag can also be set as KVHOST_<FLAG> (--max-queue: KVHOST_MAX_QUEUE) or in the --config file (max-queue: 64); a flag beats the variable, which beats the file.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, fs, nil, err
	}
	if fs.NArg() > 0 {
		return f, fs, nil, fmt.Errorf("serve: unexpected argument %q (flags only; the model is --model)", fs.Arg(0))
	}
	src, err := settle(fs, getenv)
	if err != nil {
		return f, fs, nil, fmt.Errorf("serve: %w", err)
	}
	if pol := engine.Policy(f.schedPolicy); !slices.Contains(engine.Policies, pol) {
		return f, fs, nil, fmt.Errorf("serve: --schedule-policy %q: use fcfs or lpm", f.schedPolicy)
	} else if pol == engine.LPM && f.noRadixCache {
		return f, fs, nil, errors.New("serve: --schedule-policy lpm orders by cached prefix; it cannot be used with --disable-radix-cache")
	}
	if f.kvEventsJSON != "" {
		if f.kvEvents, err = events.ParseConfig(f.kvEventsJSON); err != nil {
			return f, fs, nil, fmt.Errorf("serve: %w", err)
		}
		if f.kvEvents.Enabled() && f.noRadixCache {
			return f, fs, nil, errors.New("serve: --kv-events-config describes the prefix cache; it cannot be enabled with --disable-radix-cache")
		}
	}
	if f.model == "" {
		return f, fs, nil, errors.New("serve: --model is required (try: make run, which serves models/stories260K.gguf; or --model hf://ORG/NAME:Q4_K_M)")
	}
	return f, fs, src, nil
}

// keys collects bearer keys from a flag value and a key file (one per line,
// blank lines and # comments ignored). Keys never reach a log line.
func keys(flagKey, file string) ([]string, error) {
	var out []string
	if flagKey != "" {
		out = append(out, flagKey)
	}
	if file == "" {
		return out, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("key file %s holds no key", file)
	}
	return out, nil
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// specialTokenizer recognises special-token text ("<|im_start|>") in
// prompts, as llama.cpp's server and Hugging Face tokenizers do: rendered
// chat templates depend on it.
type specialTokenizer struct{ tokenizer.Tokenizer }

func (t specialTokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	if e, ok := t.Tokenizer.(interface {
		EncodeWithOptions(string, tokenizer.EncodeOptions) ([]int32, error)
	}); ok {
		return e.EncodeWithOptions(text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: true})
	}
	return t.Tokenizer.Encode(text, addSpecial)
}

// backend adapts the stack to the server's Backend interface.
type backend struct{ s *boot.Stack }

func (b backend) ModelName() string           { return b.s.Model.Name }
func (b backend) ContextLen() int             { return b.s.Model.Config.ContextLen }
func (b backend) Tokenizer() server.Tokenizer { return specialTokenizer{b.s.Model.Tokenizer} }
func (b backend) Chat() *chat.Template        { return b.s.Chat }
func (b backend) Submit(ctx context.Context, r engine.Request) (*engine.Stream, error) {
	return b.s.Engine.Submit(ctx, r)
}

// EmbeddingSize and Embed make the model serve /v1/embeddings: an Embed
// request through the engine, batched with generation.
func (b backend) EmbeddingSize() int { return b.s.Model.Config.Hidden }
func (b backend) Embed(ctx context.Context, prompt []int32) ([]float32, error) {
	st, err := b.s.Engine.Submit(ctx, engine.Request{Prompt: prompt, Embed: true})
	if err != nil {
		return nil, err
	}
	return server.EmbedStream(st)
}

var _ server.Embedder = backend{}

// Stalled is the liveness signal of /health and /ready.
func (b backend) Stalled(threshold time.Duration) error { return b.s.Engine.Stalled(threshold) }

var _ server.Liveness = backend{}

// The metrics observe everything the server reports.
var (
	_ server.Observer            = (*metrics.Metrics)(nil)
	_ server.PromptObserver      = (*metrics.Metrics)(nil)
	_ server.PhaseObserver       = (*metrics.Metrics)(nil)
	_ server.ErrorDetailObserver = (*metrics.Metrics)(nil)
)

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, fs, src, err := parseServeFlags(args, stderr, os.Getenv)
	if err != nil {
		return err
	}
	log, err := newLogger(f.logLevel, f.logFormat, stderr)
	if err != nil {
		return err
	}
	apiKeys, err := keys(f.apiKey, f.apiKeyFile)
	if err != nil {
		return err
	}
	adminKeys, err := keys(f.adminKey, f.adminKeyFile)
	if err != nil {
		return err
	}
	if err := (server.Options{AllowedOrigins: f.origins, EmbeddingPooling: f.pooling}).Validate(); err != nil {
		return err
	}
	if f.kvCacheDType, err = f.kvDType.resolve(autoCPUKVDType); err != nil {
		return err
	}
	tl := boot.NewTimeline()
	log.Info("effective configuration", effectiveConfig(fs, src))
	// Bind first: a busy port fails now, not after the model loaded, and
	// probes get 503 "loading" (not connection refused) meanwhile.
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("serve: --addr %s: %w", f.addr, err)
	}
	gate := server.NewGate()
	srv := server.NewHTTPServer(gate, f.addr)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening; /health answers 503 until the model is loaded", "url", "http://"+ln.Addr().String())
	tl.Mark("listen")
	s, sreg, err := load(ctx, f, gate, log, stdout, stderr, tl)
	if err != nil {
		_ = srv.Close()
		return err
	}
	defer sreg.Close(context.Background())
	if !f.skipWarmup && s.Engine != nil {
		// One short request before /health says ready, as llama.cpp and
		// SGLang warm up: the first client does not pay the cold forward
		// (the mapped weights faulted in, the arenas touched, the decode
		// graph, the sampling plugin's first instance).
		gate.SetPhase("warming up")
		if err := s.Engine.Warmup(ctx); err != nil {
			log.Warn("warm-up request failed; serving anyway", "err", err)
		}
		tl.Mark("warm-up")
	}
	h, _ := assemble(f, s, sreg.reg, apiKeys, adminKeys, log)
	// Loading (parsing, plugin compilation, profile forwards) leaves garbage
	// the collector would keep as heap for a long while at an idle
	// server's allocation rate: collect it and return the pages now.
	debug.FreeOSMemory()
	tl.Mark("assemble")
	gate.Open(h)
	if bg, ok := s.Constraints.(*constraint.Background); ok {
		// The same for what loading the constraint plugin leaves, once
		// it has loaded in the background.
		go func() {
			<-bg.Ready()
			debug.FreeOSMemory()
		}()
	}
	log.Info("ready", "url", "http://"+ln.Addr().String(), "model", s.Model.Name, "startup_seconds", tl.Since().Seconds(), "timeline_wall_cpu", tl.String())
	fmt.Fprintf(stdout, "kvhost is serving %s at http://%s (OpenAI API under /v1)\n", s.Model.Name, ln.Addr())
	select {
	case err := <-errc:
		s.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	return shutdown(h, srv, s, f.shutdownWait, log)
}

// samplers owns, for serve's lifetime, the plugin runtime and the one
// registry of every plugin kind, and the sampler registry over it (reg is
// nil when no policy plugin is available); Close is safe on any of them.
type samplers struct {
	reg     *sampling.Registry
	stop    func()
	plugins *plugin.Registry
	rt      *plugin.Runtime
}

func (s samplers) Close(ctx context.Context) {
	if s.stop != nil {
		s.stop()
	}
	if s.reg != nil {
		_ = s.reg.Close(ctx)
	}
	if s.plugins != nil {
		_ = s.plugins.Close(ctx)
	}
	if s.rt != nil {
		_ = s.rt.Close(ctx)
	}
}

// load resolves the model (pulling a hub reference into the cache), builds
// the sampler registry and boots the stack, saying what it does through the
// gate's phase.
func load(ctx context.Context, f serveFlags, gate *server.Gate, log *slog.Logger, stdout, stderr io.Writer, tl *boot.Timeline) (*boot.Stack, samplers, error) {
	var sm samplers
	path, err := resolveModel(ctx, f.model, gate, log, stderr)
	if err != nil {
		return nil, sm, err
	}
	var allow []string
	if f.allowlist != "" {
		if allow, err = allowlist.ReadFile(f.allowlist); err != nil {
			return nil, sm, err
		}
	}
	tl.Mark("resolve model")
	gate.SetPhase("loading plugins")
	// One plugin runtime and one registry for every plugin kind: the
	// built-ins overlaid by --plugins, under one allow-list. The sampling
	// policies come from it, and so does the KV configurator.
	// Configurator answers are recalled across starts (the same version,
	// the same question): a warm start loads no configurator. One that
	// must run is interpreted, not compiled: it answers a few calls once.
	// A sampler's (and the constraint plugin's) I/O region holds MaxBatch
	// rows in every instance: sized for the rows one decode step can hold
	// (the running sequences and the extra choices of one request) rather
	// than 256, it is ~0.5 MiB less resident per sampling policy; a larger
	// batch is split into calls as before.
	rows := min(plugin.DefaultMaxBatch, f.maxRunning+engine.MaxChoices-1)
	if sm.rt, err = plugin.NewRuntime(ctx, plugin.Config{Logger: log, RecallAnswers: true, InterpretConfigurators: true, MaxBatch: rows}); err != nil {
		return nil, sm, fmt.Errorf("serve: plugin runtime: %w", err)
	}
	if sm.plugins, err = plugin.NewRegistryWith(sm.rt, builtin.FS(), f.pluginsDir, plugin.RegistryOptions{AllowSHA256: allow, Logger: log}); err != nil {
		sm.Close(context.Background())
		return nil, samplers{}, fmt.Errorf("serve: plugins: %w", err)
	}
	reg, err := sampling.NewRegistry(ctx, sampling.Options{Plugins: sm.plugins, Default: f.samplerDefault, Logger: log, AllowlistFile: f.allowlist, DisableAfter: f.disableAfter})
	if err != nil {
		sm.Close(context.Background())
		return nil, samplers{}, fmt.Errorf("serve: sampling policies: %w", err)
	}
	sm.reg = reg
	if len(reg.List()) == 0 && f.pluginsDir == "" {
		log.Warn("no sampling policy plugins are built in (make plugins needs clang: scripts/install-wasm-toolchain.sh); requests use the host-native sampler")
		_ = reg.Close(context.Background())
		sm.reg = nil
	}
	if f.pluginsDir != "" && sm.reg != nil {
		sm.stop = sm.reg.Watch(ctx, f.pluginsDir, time.Second)
	}
	tl.Mark("plugins and samplers")
	gate.SetPhase("loading model " + path)
	s, err := boot.Build(boot.Config{
		Model: path, Device: f.dev, DeviceMemory: int64(f.devMemory), Threads: f.threads, KVCacheDType: f.kvCacheDType,
		MaxRunning: f.maxRunning, MaxQueue: f.maxQueue, ChunkedPrefill: f.chunkedPrefill, MaxPrefillTokens: f.maxPrefill, LogprobChunk: f.logprobChunk,
		DisableRadixCache: f.noRadixCache, SchedulePolicy: engine.Policy(f.schedPolicy), KVEvents: f.kvEvents,
		PageSize: f.pageSize, MaxTotalTokens: f.maxTotalTokens,
		MemFractionStatic: f.memFraction, SGLangCompat: f.sglangCompat, GraphMaxBS: f.graphMaxBS,
		Configurators: sm.plugins, PluginsDir: f.pluginsDir, PluginAllowlist: allow, Samplers: sm.reg,
		Constraints: constraintRunner(ctx, sm.plugins, log), Timeline: tl,
	}, log, stdout)
	if err != nil {
		sm.Close(context.Background())
		return nil, samplers{}, err
	}
	return s, sm, nil
}

// shutdown stops admitting (new requests get 503), lets running streams
// finish within grace, then ends what is left cleanly (each open stream gets
// a final error event) and closes the listener and the device.
func shutdown(h *server.Server, srv *http.Server, s *boot.Stack, grace time.Duration, log *slog.Logger) error {
	log.Info("shutting down: draining", "in_flight", h.InFlight(), "grace", grace)
	h.Drain("the server is shutting down")
	deadline := time.Now().Add(grace)
	for h.InFlight() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := h.InFlight(); n > 0 {
		log.Warn("shutting down: grace period over, ending open streams", "in_flight", n)
	}
	ectx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.Engine != nil {
		_ = s.Engine.Close(ectx)
	}
	err := srv.Shutdown(ectx)
	s.Close(ectx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Info("shut down")
	_ = os.Stdout.Sync()
	return nil
}

// assemble builds the HTTP handler over a stack: the API, /v1/memory,
// metrics, the admin routes and the dashboard.
func assemble(f serveFlags, s *boot.Stack, sreg *sampling.Registry, apiKeys, adminKeys []string, log *slog.Logger) (*server.Server, *metrics.Metrics) {
	m := metrics.New(metrics.Sources{
		Engine: func() metrics.Load { return metrics.Load(s.Engine.Stats()) }, Ledger: s.Ledger, Plugins: pluginStats(s, sreg),
		ModelName: s.Model.Name, KVPageSize: f.pageSize,
	})
	adminKey := ""
	if len(adminKeys) > 0 {
		adminKey = adminKeys[0]
	}
	opts := server.Options{
		MaxBodyBytes: int64(f.maxBody), MaxTokensCap: f.maxTokensCap, MaxPromptTokens: f.maxPrompt,
		APIKeys: apiKeys, Logger: log, Memory: s.Ledger.Handler(),
		AllowedOrigins: f.origins, EmbeddingPooling: f.pooling, StallThreshold: f.stallTimeout, PublicMetrics: f.publicMetrics,
		Observer: m, Metrics: m.Handler(),
	}
	wo := web.Options{
		Work:    func(context.Context) (any, error) { return m.Work(), nil },
		Plugins: func(context.Context) ([]web.Plugin, error) { return webPlugins(s, sreg), nil },
		Plan:    planHook, PlanModels: plan.Bundled(), PlanGPUs: presetNames(),
	}
	// Without sampling policy plugins (none built, none in --plugins) the
	// sampler extension and the admin routes are absent: a request naming a
	// policy gets a 400 and the host's sampler serves the rest.
	var samplers http.Handler
	if sreg != nil {
		opts.Sampler = sreg
		samplers = swapObserver(m, admin.Handler(sreg, adminKey, 0))
		wo.DefaultSampler = sreg.Default()
		wo.Admin = adminKey != ""
	}
	opts.Admin = adminRoutes(adminKey, samplers, s.Engine)
	opts.Web = web.Handler(wo)
	h := server.New(backend{s}, opts)
	if adminKey == "" {
		log.Info("admin API disabled: no --admin-key")
	}
	return h, m
}
