package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvhost/kvhost/host/hub"
	"github.com/kvhost/kvhost/host/server"
)

func init() {
	extraCommands["pull"] = pullCmd
	extraCommands["list"] = listCmd
	extraCommands["rm"] = rmCmd
}

// hubClient is a hub client configured from huggingface_hub's environment
// (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_CACHE, HF_HOME), reporting
// progress to w: a bar on a terminal, a log line every few seconds
// otherwise.
func hubClient(w io.Writer, log *slog.Logger) (*hub.Client, error) {
	o := hub.OptionsFromEnv(os.Getenv)
	o.Logger = log
	o.UserAgent = "kvhost/" + version
	o.Progress = newProgress(w, log)
	return hub.New(o)
}

// resolveModel turns serve's --model into a local path: an existing file or
// directory is itself; a hub reference (hf://ORG/NAME[:QUANT], or a bare
// ORG/NAME that is not a local path) is pulled into the cache first.
func resolveModel(ctx context.Context, model string, gate *server.Gate, log *slog.Logger, stderr io.Writer) (string, error) {
	if _, err := os.Stat(model); err == nil {
		return model, nil
	}
	if !hub.LooksLikeRef(model) {
		return "", fmt.Errorf("serve: --model %s: no such file or directory, and not a Hugging Face id (hf://ORG/NAME[:QUANT])", model)
	}
	ref, err := hub.ParseRef(model)
	if err != nil {
		return "", err
	}
	c, err := hubClient(stderr, log)
	if err != nil {
		return "", err
	}
	gate.SetPhase("downloading " + ref.String() + " from " + c.Endpoint())
	res, err := c.Pull(ctx, ref)
	if err != nil {
		return "", err
	}
	log.Info("model from the hub", "ref", ref.String(), "commit", res.Commit, "path", res.Model, "downloaded_bytes", res.Fetched)
	return res.Model, nil
}

const pullUsage = `Usage: kvhost pull [--json] ORG/NAME[@REVISION][:QUANT|:FILE]

Downloads a model from the Hugging Face Hub into the Hugging Face cache
(shared with Python tools): a GGUF file picked by quantization (Q4_K_M, Q8_0,
...) or by name (a split GGUF: all its shards), or a safetensors repository
(config, tokenizer, shards).
Interrupted downloads resume. Prints the path to give to kvhost serve --model.

Environment: HF_TOKEN (gated or private models), HF_ENDPOINT (a mirror;
default https://huggingface.co), HF_HUB_CACHE or HF_HOME (the cache; default
~/.cache/huggingface/hub), HF_HUB_OFFLINE=1 (use the cache only).

Example:
  kvhost pull bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M
`

func pullCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pull", stderr)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	fs.Usage = func() { fmt.Fprint(fs.Output(), pullUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("pull: expected one model id")
	}
	ref, err := hub.ParseRef(fs.Arg(0))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := hubClient(stderr, log)
	if err != nil {
		return err
	}
	res, err := c.Pull(ctx, ref)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"ref": res.Ref.String(), "commit": res.Commit, "model": res.Model, "files": res.Files, "downloaded_bytes": res.Fetched})
	}
	fmt.Fprintf(stdout, "%s (commit %s, %s downloaded)\n%s\n\nserve it with: kvhost serve --model %s\n", res.Ref, res.Commit[:12], humanBytes(res.Fetched), res.Model, res.Ref)
	return nil
}

func listCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("list", stderr)
	asJSON := fs.Bool("json", false, "print the cache as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: kvhost list [--json]\n\nLists the models in the Hugging Face cache (HF_HUB_CACHE, HF_HOME), including those Python tools downloaded.\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := hub.OptionsFromEnv(os.Getenv)
	repos, err := (hub.Cache{Dir: o.CacheDir}).List()
	if err != nil {
		return err
	}
	if *asJSON {
		if repos == nil {
			repos = []hub.CachedRepo{}
		}
		return json.NewEncoder(stdout).Encode(repos)
	}
	if len(repos) == 0 {
		fmt.Fprintf(stdout, "no models in %s (kvhost pull ORG/NAME:QUANT fetches one)\n", o.CacheDir)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tSIZE\tREVISION\tMODIFIED\tFILES")
	for _, r := range repos {
		rev := "-"
		if c, ok := r.Refs["main"]; ok {
			rev = "main@" + c[:min(12, len(c))]
		} else if len(r.Snapshots) > 0 {
			rev = r.Snapshots[0].Commit[:min(12, len(r.Snapshots[0].Commit))]
		}
		var snap hub.Snapshot
		if len(r.Snapshots) > 0 {
			snap = r.Snapshots[0]
		}
		size := humanBytes(r.Bytes)
		if r.Partial > 0 {
			size += fmt.Sprintf(" (%s partial)", humanBytes(r.Partial))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Repo, size, rev, r.Modified.Format("2006-01-02 15:04"), summarize(snap))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ncache: %s\n", o.CacheDir)
	return nil
}

// summarize names the models of a snapshot (GGUF models by file name, a
// split model once with its shard count; other files counted).
func summarize(s hub.Snapshot) string {
	var names []string
	for _, m := range s.Models {
		switch {
		case len(m.Missing) > 0:
			names = append(names, fmt.Sprintf("%s (%d of %d shards)", m.File, len(m.Shards), len(m.Shards)+len(m.Missing)))
		case m.Shards != nil:
			names = append(names, fmt.Sprintf("%s (%d shards)", m.File, len(m.Shards)))
		default:
			names = append(names, m.File)
		}
	}
	if len(names) > 0 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%d files", len(s.Files))
}

func rmCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rm", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: kvhost rm ORG/NAME...\n\nRemoves models from the Hugging Face cache: every revision, partial download and lock.\n")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("rm: expected at least one model id")
	}
	cache := hub.Cache{Dir: hub.OptionsFromEnv(os.Getenv).CacheDir}
	var errs []error
	for _, a := range fs.Args() {
		ref, err := hub.ParseRef(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ref.File != "" || ref.Quant != "" || ref.Revision != "" {
			errs = append(errs, fmt.Errorf("rm: %s: rm removes a whole repository; give ORG/NAME", a))
			continue
		}
		n, err := cache.Remove(ref.Repo)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", ref.Repo, humanBytes(n))
	}
	return errors.Join(errs...)
}

// humanBytes writes n in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// progress reports downloads: on a terminal, a bar redrawn in place with
// bytes, rate and ETA; elsewhere, a log line every logEvery.
type progress struct {
	w     io.Writer
	log   *slog.Logger
	tty   bool
	file  string
	size  int64
	done  int64
	start time.Time
	base  int64 // bytes on disk when this transfer began (resumed)
	last  time.Time
}

const logEvery = 5 * time.Second

func newProgress(w io.Writer, log *slog.Logger) *progress {
	p := &progress{w: w, log: log}
	if f, ok := w.(*os.File); ok {
		p.tty = isTerminal(f)
	}
	return p
}

var _ hub.Reporter = (*progress)(nil)

func (p *progress) Begin(file string, size, resumed int64) {
	p.file, p.size, p.done, p.base = file, size, resumed, resumed
	p.start, p.last = time.Now(), time.Now()
	if resumed > 0 {
		p.log.Info("resuming download", "file", file, "from_byte", resumed, "bytes", size)
	}
	p.draw(false)
}

func (p *progress) Add(n int64) {
	p.done += n
	every := logEvery
	if p.tty {
		every = 200 * time.Millisecond
	}
	if time.Since(p.last) >= every {
		p.last = time.Now()
		p.draw(false)
	}
}

func (p *progress) End(file string, err error) {
	p.draw(true)
	if err != nil && !p.tty {
		p.log.Warn("download stopped", "file", file, "err", err)
	}
}

// line is the progress text: bytes, percent, rate and ETA.
func (p *progress) line() string {
	el := time.Since(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(p.done-p.base) / el
	}
	eta := "?"
	if rate > 0 {
		eta = time.Duration(float64(p.size-p.done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if p.size > 0 {
		pct = 100 * float64(p.done) / float64(p.size)
	}
	return fmt.Sprintf("%s / %s (%.0f%%) %s/s ETA %s", humanBytes(p.done), humanBytes(p.size), pct, humanBytes(int64(rate)), eta)
}

func (p *progress) draw(final bool) {
	if !p.tty {
		if final {
			p.log.Info("downloaded", "file", p.file, "progress", p.line())
		} else {
			p.log.Info("downloading", "file", p.file, "progress", p.line())
		}
		return
	}
	const width = 24
	filled := width
	if p.size > 0 {
		filled = int(int64(width) * p.done / p.size)
	}
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	name := p.file
	if len(name) > 32 {
		name = "…" + name[len(name)-31:]
	}
	fmt.Fprintf(p.w, "\r\033[K%s [%s] %s", name, bar, p.line())
	if final {
		fmt.Fprintln(p.w)
	}
}
