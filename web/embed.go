package web

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvhost/kvhost/host/budget"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var embedded embed.FS

// Static is the embedded dashboard (index.html at its root).
func Static() fs.FS {
	sub, err := fs.Sub(embedded, "static")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return sub
}

// Param is one entry of a sampling policy's parameter schema (the JSON of
// sdk/sampler.Param).
type Param struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"` // "float" or "int"
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Default float64 `json:"default"`
}

// Plugin is one plugin as the Plugins panel shows it.
type Plugin struct {
	Kind     string `json:"kind"` // "configurator" or "sampler"
	Name     string `json:"name"`
	Version  string `json:"version"`
	ABI      int    `json:"abi"`
	Source   string `json:"source"` // "builtin" or the file it came from
	SHA256   string `json:"sha256"`
	Calls    uint64 `json:"calls"`
	Failures uint64 `json:"failures"`
	// Params is a sampler's declared schema (its describe); the playground
	// builds its form from it.
	Params []Param `json:"params,omitempty"`
	// PreOps are the host pre-ops a sampler declared.
	PreOps []string `json:"preops,omitempty"`
}

// Options are the hooks behind /ui/api/*; a nil hook leaves its endpoint
// out (404) and the page hides the panel.
type Options struct {
	// Work returns the load snapshot (metrics.Work in practice) for
	// GET /ui/api/work.
	Work func(ctx context.Context) (any, error)
	// Plugins lists configurators and samplers for GET /ui/api/plugins.
	Plugins func(ctx context.Context) ([]Plugin, error)
	// Plan computes the ledger `kvhost plan` would produce for a bundled
	// model config and a GPU preset, for GET /ui/api/plan?model=&gpu=.
	Plan func(ctx context.Context, modelConfig, gpuPreset string) (any, error)
	// PlanModels and PlanGPUs are the choices offered by the Plan panel.
	PlanModels []string
	PlanGPUs   []string
	// DefaultSampler is the server's default policy name, preselected in
	// the playground ("" for none).
	DefaultSampler string
	// Admin says the admin API is on (an admin key is set); without it the
	// page disables the upload form and says how to turn it on.
	Admin bool
	// APITimeout bounds each /ui/api call; default 10s.
	APITimeout time.Duration
}

// Config is GET /ui/api/config: what the page may show.
type Config struct {
	Work           bool     `json:"work"`
	Plugins        bool     `json:"plugins"`
	Plan           bool     `json:"plan"`
	PlanModels     []string `json:"plan_models"`
	PlanGPUs       []string `json:"plan_gpus"`
	DefaultSampler string   `json:"default_sampler"`
	Admin          bool     `json:"admin"`
}

// asset is one embedded file with its precomputed validator.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	".md":   "text/markdown; charset=utf-8",
	".map":  "application/json",
}

// APIPrefix is where the dashboard's JSON routes live. They show the
// host's state (load, plugins, plans), so the server puts them behind its
// API key like every route but the static shell.
const APIPrefix = "/ui/api/"

// IsStatic reports a path of the dashboard's static shell: index.html at /
// (and /index.html), every other embedded file under /ui/ (so the
// dashboard's names never shadow a future API route), but not APIPrefix.
// Those paths serve embedded files only, never host data: the server
// leaves them open when it requires an API key, so the page can load and
// ask for the key.
func IsStatic(path string) bool {
	return path == "/" || path == "/index.html" || strings.HasPrefix(path, "/ui/") && !strings.HasPrefix(path, APIPrefix)
}

// Handler serves the dashboard at / (its files under /ui/) and its JSON
// under /ui/api/.
func Handler(o Options) http.Handler {
	if o.APITimeout <= 0 {
		o.APITimeout = 10 * time.Second
	}
	assets := map[string]asset{}
	err := fs.WalkDir(Static(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return nil // not served (LICENSE files and the like are still embedded)
		}
		b, err := fs.ReadFile(Static(), p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		assets[p] = asset{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("web: embedded assets: %v", err))
	}
	mux := http.NewServeMux()
	api := &apiHandler{o: o}
	mux.HandleFunc("GET "+APIPrefix+"config", api.config)
	mux.HandleFunc("GET "+APIPrefix+"work", api.work)
	mux.HandleFunc("GET "+APIPrefix+"plugins", api.plugins)
	mux.HandleFunc("GET "+APIPrefix+"plan", api.plan)
	mux.HandleFunc(APIPrefix, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "web: use GET")
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("web: no endpoint %s", r.URL.Path))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, assets)
	})
	return securityHeaders(mux)
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		// Everything comes from the host itself; Chart.js sets inline
		// styles on its canvases.
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}

func serveAsset(w http.ResponseWriter, r *http.Request, assets map[string]asset) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "web: use GET", http.StatusMethodNotAllowed)
		return
	}
	var p string
	switch u := r.URL.Path; {
	case !IsStatic(u):
	case u == "/" || u == "/index.html":
		p = "index.html"
	case u != "/ui/index.html":
		p = strings.TrimPrefix(u, "/ui/")
	}
	a, ok := assets[p]
	if !ok {
		http.Error(w, "web: not found: "+r.URL.Path, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("ETag", a.etag)
	// Revalidate every time: the binary may change under the same URLs.
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(a.body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(a.body)
}

type apiHandler struct{ o Options }

func (a *apiHandler) config(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Config{
		Work: a.o.Work != nil, Plugins: a.o.Plugins != nil, Plan: a.o.Plan != nil,
		PlanModels: nonNil(a.o.PlanModels), PlanGPUs: nonNil(a.o.PlanGPUs), DefaultSampler: a.o.DefaultSampler, Admin: a.o.Admin,
	})
}

func (a *apiHandler) work(w http.ResponseWriter, r *http.Request) {
	if a.o.Work == nil {
		writeError(w, http.StatusNotFound, "web: no work source is wired")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.o.APITimeout)
	defer cancel()
	v, err := a.o.Work(ctx)
	respond(w, v, err)
}

func (a *apiHandler) plugins(w http.ResponseWriter, r *http.Request) {
	if a.o.Plugins == nil {
		writeError(w, http.StatusNotFound, "web: no plugin lister is wired")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.o.APITimeout)
	defer cancel()
	ps, err := a.o.Plugins(ctx)
	if ps == nil {
		ps = []Plugin{}
	}
	respond(w, map[string]any{"plugins": ps}, err)
}

// ErrBadPlanRequest marks a Plan hook error caused by the request (unknown
// model or preset): the endpoint answers 400 instead of 500.
var ErrBadPlanRequest = errors.New("web: bad plan request")

func (a *apiHandler) plan(w http.ResponseWriter, r *http.Request) {
	if a.o.Plan == nil {
		writeError(w, http.StatusNotFound, "web: no planner is wired")
		return
	}
	q := r.URL.Query()
	model, gpu := q.Get("model"), q.Get("gpu")
	if msg := checkChoice("model", model, a.o.PlanModels); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if msg := checkChoice("gpu", gpu, a.o.PlanGPUs); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.o.APITimeout)
	defer cancel()
	v, err := a.o.Plan(ctx, model, gpu)
	if errors.Is(err, ErrBadPlanRequest) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var ime *budget.InsufficientMemoryError
	if errors.As(err, &ime) {
		// The model does not fit: 422 with the numbers and the knob, which
		// the Plan tab turns into what to change.
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": map[string]any{
			"message": err.Error(), "type": "insufficient_memory", "phase": ime.Phase,
			"need_bytes": ime.NeedBytes, "have_bytes": ime.HaveBytes, "knob": ime.Knob, "suggest": ime.Suggest,
		}})
		return
	}
	respond(w, v, err)
}

// checkChoice refuses a value outside the offered list (when a list is
// given) so the hook never sees arbitrary paths.
func checkChoice(field, v string, allowed []string) string {
	if v == "" {
		return fmt.Sprintf("web: %s is required", field)
	}
	if len(allowed) == 0 {
		return ""
	}
	for _, a := range allowed {
		if a == v {
			return ""
		}
	}
	return fmt.Sprintf("web: %s %q is not one of %s", field, v, strings.Join(allowed, ", "))
}

func respond(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("web: encode: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// errorBody is the host's error shape ({error: {message, type}}).
type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	var e errorBody
	e.Error.Message = msg
	e.Error.Type = "invalid_request_error"
	if status >= 500 {
		e.Error.Type = "server_error"
	}
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
