package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"

	"github.com/kvhost/kvhost/host/boot"
	"github.com/kvhost/kvhost/host/metrics"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/sampling"
	"github.com/kvhost/kvhost/host/sampling/admin"
	"github.com/kvhost/kvhost/host/server"
	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/web"
)

// The registry compiles requests' sampling for the server: one mapping
// from request fields to policy parameters (sampling.Registry.Compile),
// which the engine also uses for requests that reach it uncompiled.
var _ server.SamplerCompiler = (*sampling.Registry)(nil)

// adminRoutes are the /admin routes, every one behind the admin key: the
// sampler administration (samplers, nil without policy plugins) and the
// prefix cache's reset (vLLM's and SGLang's names).
func adminRoutes(key string, samplers http.Handler, cache server.PrefixCacheResetter) http.Handler {
	mux := http.NewServeMux()
	guard := admin.RequireKey(key)
	none := guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "no admin route " + r.Method + " " + r.URL.Path, "code": http.StatusNotFound}})
	}))
	mux.Handle("/admin", none)
	mux.Handle("/admin/", none)
	if samplers != nil {
		mux.Handle("/admin/samplers", samplers)
		mux.Handle("/admin/samplers/", samplers)
	}
	reset := guard(server.ResetPrefixCacheHandler(cache))
	for _, p := range server.ResetRoutes {
		mux.Handle(p, reset)
	}
	return mux
}

// swapObserver records sampler uploads and removals in the metrics.
func swapObserver(m *metrics.Metrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		name, ok := strings.CutPrefix(r.URL.Path, "/admin/samplers/")
		if !ok || name == "" {
			return
		}
		op := map[string]string{http.MethodPut: "upload", http.MethodDelete: "remove"}[r.Method]
		if op == "" || rec.code == http.StatusUnauthorized || rec.code == http.StatusNotFound && op == "upload" {
			return
		}
		var err error
		if rec.code >= 300 {
			err = errors.New(http.StatusText(rec.code))
		}
		m.SamplerSwap(name, op, err)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// pluginStats lists configurators and samplers for metrics.
func pluginStats(s *boot.Stack, reg *sampling.Registry) func() []metrics.PluginStat {
	return func() []metrics.PluginStat {
		var out []metrics.PluginStat
		for _, p := range webPlugins(s, nil) {
			ps := metrics.PluginStat{Kind: p.Kind, Name: p.Name, Version: p.Version, SHA256: p.SHA256, Source: p.Source, Calls: p.Calls, Failures: p.Failures}
			if pl, ok := s.Configurators.Loaded(p.Name); ok {
				_, _, ps.Seconds = pl.CallStats()
			}
			out = append(out, ps)
		}
		if reg != nil {
			for _, in := range reg.List() {
				// Seconds approximates time in calls from the current
				// version's mean step.
				out = append(out, metrics.PluginStat{Kind: "sampler", Name: in.Name, Version: in.Version, SHA256: in.SHA256, Source: in.Source,
					Calls: uint64(in.Calls), Failures: uint64(in.Failures), Seconds: in.MeanStep.Seconds() * float64(in.Calls),
					Disabled: in.Disabled, Fallbacks: uint64(in.Fallbacks)})
			}
		}
		return out
	}
}

// webPlugins lists every plugin the host runs, for the dashboard. It
// compiles nothing: a configurator that was never loaded (only the one
// that claimed the model is) shows its recorded descriptor, if any.
func webPlugins(s *boot.Stack, reg *sampling.Registry) []web.Plugin {
	var out []web.Plugin
	if c := s.Configurators; c != nil {
		for _, name := range c.Names() {
			if kind, err := c.Kind(name); err != nil || kind != plugin.KindConfigurator {
				continue
			}
			src, _ := c.Source(name)
			sha, _ := c.SHA256(name)
			p := web.Plugin{Kind: "configurator", Name: name, Source: src.Origin}
			if pl, ok := c.Loaded(name); ok {
				d := pl.Descriptor()
				p.Version, p.ABI, p.SHA256 = d.Version, d.ABI, pl.SHA256()
				calls, failures, _ := pl.CallStats()
				p.Calls, p.Failures = uint64(calls), uint64(failures)
			} else if _, raw, ok := c.Recorded(name); ok {
				if d, err := sdk.ParseDescriptor(raw); err == nil {
					p.Version, p.ABI, p.SHA256 = d.Version, d.ABI, sha
				}
			}
			out = append(out, p)
		}
	}
	if reg != nil {
		for _, in := range reg.List() {
			p := web.Plugin{Kind: "sampler", Name: in.Name, Version: in.Version, ABI: 1, Source: in.Source, SHA256: in.SHA256,
				Calls: uint64(in.Calls), Failures: uint64(in.Failures), PreOps: in.PreOps}
			for _, pa := range in.Params {
				p.Params = append(p.Params, web.Param{Name: pa.Name, Type: pa.Type, Min: pa.Min, Max: pa.Max, Default: pa.Default})
			}
			out = append(out, p)
		}
	}
	return out
}

// planHook serves the dashboard's Plan tab from the bundled configs.
func planHook(_ context.Context, modelName, gpu string) (any, error) {
	c, ts, err := plan.LoadBundled(modelName)
	if err != nil {
		return nil, errors.Join(web.ErrBadPlanRequest, err)
	}
	return plan.Plan(plan.Input{Name: modelName, Config: c, Weights: ts, Device: gpu, GraphMaxBS: -1})
}

func presetNames() []string {
	var out []string
	for name := range plan.Presets {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
