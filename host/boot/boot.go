package boot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/chat"
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
	PageSize       int
	MaxTotalTokens int
}

const gib = float64(1 << 30)

// logPhase logs a startup phase as SGLang does (GiB = 2^30 bytes).
func logPhase(log *slog.Logger, dev device.Device, phase string, before int64) int64 {
	free, _ := dev.MemGetInfo()
	log.Info(fmt.Sprintf("%s: avail mem=%.2f GiB, mem usage=%.2f GiB (GiB = 2^30 B)", phase, float64(free)/gib, float64(before-free)/gib))
	return free
}

// stack is everything serve builds, in build order, so it can be torn down.
type Stack struct {
	Dev     device.Device
	Weights *alloc.Direct
	Arena   *alloc.Direct
	Act     *alloc.Allocator
	Model   *model.Model
	Pool    *kv.Pool
	Engine  *engine.Engine
	Chat    *chat.Template
}

func (s *Stack) Close(ctx context.Context) {
	if s.Engine != nil {
		_ = s.Engine.Close(ctx)
	}
	if s.Pool != nil {
		s.Pool.Close()
	}
	if s.Model != nil {
		_ = s.Model.Close()
	}
	if s.Dev != nil {
		_ = s.Dev.Close()
	}
}

// activationReserve bounds the memory one forward of chunk tokens needs
// beyond the weights and the KV pool: the widest per-layer moment
// (spec §4), the logits of every running sequence, attention scratch, and
// allocator rounding (a 20 MiB segment per live buffer at worst).
func ActivationReserve(c model.Config, chunk, running, threads int) int64 {
	t := int64(chunk)
	h, q, kvr, i := int64(c.Hidden), int64(c.QRow()), int64(c.KVRow()), int64(c.Intermediate)
	attn := t * (2*h + 2*q + 2*kvr)
	ffn := t * (2*h + 2*i)
	scratch := int64(threads+1) * int64(c.ContextLen+chunk) * 2
	logits := int64(running+1) * (int64(c.Vocab) + h)
	floats := max(attn, ffn) + scratch + logits
	return floats*4 + 8*(20<<20)
}

// Build opens the device, loads the model, sizes and allocates the KV pool
// and starts the engine, logging each phase. progress receives human-readable
// progress lines for anything slow.
func Build(f Config, log *slog.Logger, stdout io.Writer) (*Stack, error) {
	s := &Stack{}
	dev, err := device.Open(f.Device, device.Options{MemoryBytes: f.DeviceMemory, Threads: f.Threads})
	if err != nil {
		return nil, err
	}
	s.Dev = dev
	info := dev.Info()
	free0, total := dev.MemGetInfo()
	log.Info("device opened", "device", info.Name, "total_bytes", total)
	free := logPhase(log, dev, "device init", free0)
	s.Weights = alloc.NewDirect("weights", dev)
	s.Arena = alloc.NewDirect("kv_arena", dev)
	s.Act = alloc.New("caching", dev)

	start, lastPct := time.Now(), -1
	opts := model.Options{Device: dev, Weights: s.Weights, Activations: s.Act, Progress: func(done, all int64) {
		pct := int(100 * done / max(all, 1))
		if time.Since(start) > time.Second && pct/10 != lastPct/10 {
			lastPct = pct
			fmt.Fprintf(stdout, "loading weights: %d%%\n", pct)
		}
	}}
	m, err := model.Load(f.Model, opts)
	if err != nil {
		s.Close(context.Background())
		return nil, err
	}
	s.Model = m
	c := m.Config
	log.Info("model loaded", "name", m.Name, "arch", c.Arch, "params", c.Params(), "weight_bytes", m.WeightBytes(), "context", c.ContextLen)
	free = logPhase(log, dev, "load weights", free)

	reserve := ActivationReserve(c, f.ChunkedPrefill, f.MaxRunning, info.Threads)
	spec := kv.Spec{Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, PageSize: f.PageSize}
	tokens := (free - reserve) / spec.BytesPerToken()
	if f.MaxTotalTokens > 0 && int64(f.MaxTotalTokens) < tokens {
		tokens = int64(f.MaxTotalTokens)
	}
	spec.NumPages = int(tokens / int64(f.PageSize))
	if spec.NumPages*f.PageSize < c.ContextLen {
		s.Close(context.Background())
		return nil, fmt.Errorf("serve: after the weights %.2f GiB are free and the runtime reserve is %.2f GiB, the KV pool would hold %d tokens, less than one context of %d; raise --device-memory or lower --chunked-prefill-size",
			float64(free)/gib, float64(reserve)/gib, max(tokens, 0), c.ContextLen)
	}
	pool, err := kv.New(spec, s.Arena)
	if err != nil {
		s.Close(context.Background())
		return nil, err
	}
	s.Pool = pool
	log.Info(fmt.Sprintf("KV cache is allocated. #tokens: %d, page size: %d, cell: %d B/token, K+V size: %.2f GiB", spec.NumPages*spec.PageSize, spec.PageSize, spec.BytesPerToken(), float64(spec.Bytes())/gib))
	logPhase(log, dev, "KV pool", free)

	eng, err := engine.New(engine.Config{MaxRunning: f.MaxRunning, MaxQueue: f.MaxQueue, ChunkedPrefill: f.ChunkedPrefill, Logger: log}, m, pool, c, m.Tokenizer.EOG)
	if err != nil {
		s.Close(context.Background())
		return nil, err
	}
	s.Engine = eng
	tmpl, err := chat.New(m.ChatTemplate, m.BOSText, m.EOSText)
	if err != nil {
		log.Warn("the model's chat template does not compile; using the fallback", "err", err)
		tmpl, _ = chat.New("", m.BOSText, m.EOSText)
	}
	s.Chat = tmpl
	return s, nil
}
