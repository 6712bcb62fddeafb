package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the Hugging Face Hub (HF_ENDPOINT overrides it).
const DefaultEndpoint = "https://huggingface.co"

// Options configure a Client. The zero value is not usable: take
// OptionsFromEnv's and adjust it.
type Options struct {
	// Endpoint is the hub's base URL (default DefaultEndpoint).
	Endpoint string `json:"endpoint"`
	// Token is sent as "Authorization: Bearer" to the endpoint's host only.
	Token string `json:"-"`
	// CacheDir is the huggingface_hub cache (HF_HUB_CACHE).
	CacheDir string `json:"cache_dir"`
	// Offline sends no request: only what the cache holds can be used.
	Offline bool `json:"offline"`
	// HTTP is the client used (default: a client with a 30 s response
	// header timeout; bodies are not time-limited, they may be gigabytes).
	HTTP *http.Client `json:"-"`
	// Attempts bounds the tries of one blob download, each resuming where
	// the previous stopped (default 5); RetryWait is the first pause between
	// them, doubled each time (default 1 s).
	Attempts  int           `json:"attempts"`
	RetryWait time.Duration `json:"retry_wait"`
	// Progress receives download progress; nil reports nothing.
	Progress Reporter `json:"-"`
	// Logger receives one line per file fetched or reused; nil discards.
	Logger *slog.Logger `json:"-"`
	// UserAgent is sent with every request.
	UserAgent string `json:"user_agent"`
}

// Validate names the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.CacheDir == "":
		return errors.New("hub: cache_dir is empty (set HF_HUB_CACHE or HF_HOME, or HOME)")
	case o.Attempts < 0 || o.Attempts > 100:
		return fmt.Errorf("hub: attempts %d out of range [0, 100] (0 selects 5)", o.Attempts)
	case o.RetryWait < 0:
		return fmt.Errorf("hub: retry_wait %v must be >= 0", o.RetryWait)
	}
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("hub: endpoint %q is not an http(s) URL", o.Endpoint)
		}
	}
	return nil
}

// OptionsFromEnv reads huggingface_hub's environment through getenv:
// HF_ENDPOINT, HF_TOKEN (else HUGGING_FACE_HUB_TOKEN, else the token file
// HF_TOKEN_PATH or $HF_HOME/token that `hf auth login` writes),
// HF_HUB_OFFLINE, HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and HOME.
func OptionsFromEnv(getenv func(string) string) Options {
	home := getenv("HF_HOME")
	if home == "" {
		xdg := getenv("XDG_CACHE_HOME")
		if xdg == "" && getenv("HOME") != "" {
			xdg = filepath.Join(getenv("HOME"), ".cache")
		}
		if xdg != "" {
			home = filepath.Join(xdg, "huggingface")
		}
	}
	o := Options{Endpoint: strings.TrimRight(getenv("HF_ENDPOINT"), "/"), CacheDir: getenv("HF_HUB_CACHE")}
	if o.CacheDir == "" && home != "" {
		o.CacheDir = filepath.Join(home, "hub")
	}
	o.Token = getenv("HF_TOKEN")
	if o.Token == "" {
		o.Token = getenv("HUGGING_FACE_HUB_TOKEN")
	}
	if o.Token == "" {
		tp := getenv("HF_TOKEN_PATH")
		if tp == "" && home != "" {
			tp = filepath.Join(home, "token")
		}
		if b, err := os.ReadFile(tp); tp != "" && err == nil {
			o.Token = strings.TrimSpace(string(b))
		}
	}
	switch strings.ToLower(strings.TrimSpace(getenv("HF_HUB_OFFLINE"))) {
	case "1", "true", "yes", "on":
		o.Offline = true
	}
	return o
}

// Client talks to one hub and fills one cache.
type Client struct {
	o     Options
	cache Cache
	host  string // the endpoint's host: the only one that sees the token
	http  *http.Client
	log   *slog.Logger
}

// New returns a client; it fails when o does not Validate.
func New(o Options) (*Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Endpoint == "" {
		o.Endpoint = DefaultEndpoint
	}
	o.Endpoint = strings.TrimRight(o.Endpoint, "/")
	if o.Attempts == 0 {
		o.Attempts = 5
	}
	if o.RetryWait == 0 {
		o.RetryWait = time.Second
	}
	if o.UserAgent == "" {
		o.UserAgent = "kvhost"
	}
	u, _ := url.Parse(o.Endpoint)
	c := &Client{o: o, cache: Cache{Dir: o.CacheDir}, host: u.Host, http: o.HTTP, log: o.Logger}
	if c.http == nil {
		c.http = &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: 30 * time.Second,
			TLSHandshakeTimeout: 15 * time.Second, IdleConnTimeout: 90 * time.Second,
		}}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Cache is the client's cache.
func (c *Client) Cache() Cache { return c.cache }

// Endpoint is the hub the client talks to.
func (c *Client) Endpoint() string { return c.o.Endpoint }

// ErrOffline is wrapped by errors that offline mode caused.
var ErrOffline = errors.New("hub: offline mode (HF_HUB_OFFLINE) and not in the cache")

// request builds a request carrying the user agent, and the token when it
// goes to the hub's own host.
func (c *Client) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	req.Header.Set("User-Agent", c.o.UserAgent)
	if c.o.Token != "" && req.URL.Host == c.host {
		req.Header.Set("Authorization", "Bearer "+c.o.Token)
	}
	return req, nil
}

// do sends req, following only relative redirects (a renamed repository,
// as huggingface_hub does) and returning an absolute one (the CDN) as is,
// so the caller decides what to send there. Cross-host redirects never carry
// the token: it is added per request, by host.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	for hops := 0; ; hops++ {
		resp, err := c.noRedirect().Do(req)
		if err != nil {
			return nil, fmt.Errorf("hub: %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		if resp.StatusCode < 300 || resp.StatusCode > 399 || resp.Header.Get("Location") == "" || hops == 10 {
			return resp, nil
		}
		rel, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || rel.Host != "" || rel.Scheme != "" {
			return resp, nil // absolute: the caller decides (the CDN)
		}
		loc := req.URL.ResolveReference(rel)
		resp.Body.Close()
		next, err := c.request(req.Context(), req.Method, loc.String())
		if err != nil {
			return nil, err
		}
		for k, v := range req.Header {
			if k != "Authorization" {
				next.Header[k] = v
			}
		}
		req = next
	}
}

func (c *Client) noRedirect() *http.Client {
	cl := *c.http
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cl
}

// statusError turns a hub error response into an error that says what to do.
func (c *Client) statusError(resp *http.Response, repo, what string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := strings.TrimSpace(resp.Header.Get("X-Error-Message"))
	if msg == "" {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil {
			msg = e.Error
		}
	}
	code := resp.Header.Get("X-Error-Code")
	hint := ""
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || code == "GatedRepo":
		hint = " (private or gated: accept the model's terms on the hub and set HF_TOKEN)"
		if c.o.Token != "" {
			hint = " (HF_TOKEN is set: check it has access to this repository)"
		}
	case code == "RevisionNotFound":
		hint = " (no such branch, tag or commit)"
	case code == "EntryNotFound":
		hint = " (no such file in the repository)"
	case resp.StatusCode == http.StatusNotFound:
		hint = " (no such repository, or it is private: set HF_TOKEN)"
	}
	if msg != "" {
		msg = ": " + msg
	}
	return &StatusError{Status: resp.StatusCode, Code: code, Err: fmt.Errorf("hub: %s: %s on %s: HTTP %d%s%s", repo, what, c.o.Endpoint, resp.StatusCode, msg, hint)}
}

// StatusError is an HTTP error the hub answered.
type StatusError struct {
	Status int
	Code   string // the hub's X-Error-Code, if any
	Err    error
}

func (e *StatusError) Error() string { return e.Err.Error() }
func (e *StatusError) Unwrap() error { return e.Err }

// sibling is one file of a repository as the model info lists it.
type sibling struct {
	Name string `json:"rfilename"`
	Size int64  `json:"size"`
	Blob string `json:"blobId"`
	LFS  *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

type modelInfo struct {
	ID       string    `json:"id"`
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

// info is GET /api/models/REPO/revision/REV?blobs=true: the commit the
// revision points at and every file with its size and LFS sha256.
func (c *Client) info(ctx context.Context, repo, rev string) (modelInfo, error) {
	u := fmt.Sprintf("%s/api/models/%s/revision/%s?blobs=true", c.o.Endpoint, repo, url.PathEscape(rev))
	req, err := c.request(ctx, http.MethodGet, u)
	if err != nil {
		return modelInfo{}, err
	}
	resp, err := c.do(req)
	if err != nil {
		return modelInfo{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return modelInfo{}, c.statusError(resp, repo, "model info at revision "+rev)
	}
	var mi modelInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&mi); err != nil {
		return modelInfo{}, fmt.Errorf("hub: %s: model info: %w", repo, err)
	}
	if !commitHash.MatchString(mi.SHA) {
		return modelInfo{}, fmt.Errorf("hub: %s: model info has no commit sha (got %q)", repo, mi.SHA)
	}
	return mi, nil
}

// fileMeta is what HEAD /REPO/resolve/COMMIT/FILE says of one file.
type fileMeta struct {
	commit   string
	etag     string // normalized: no quotes, no W/
	size     int64
	location string // where to GET the bytes (the CDN for LFS files)
}

// head asks for a file's metadata, as huggingface_hub's
// get_hf_file_metadata does (Accept-Encoding: identity, so Content-Length
// is the file's size; X-Linked-* describe the LFS object behind a redirect).
func (c *Client) head(ctx context.Context, repo, rev, file string) (fileMeta, error) {
	u := fmt.Sprintf("%s/%s/resolve/%s/%s", c.o.Endpoint, repo, url.PathEscape(rev), escapePath(file))
	req, err := c.request(ctx, http.MethodHead, u)
	if err != nil {
		return fileMeta{}, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.do(req)
	if err != nil {
		return fileMeta{}, err
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fileMeta{}, c.statusError(resp, repo, "file "+file)
	}
	m := fileMeta{commit: resp.Header.Get("X-Repo-Commit"), location: resp.Request.URL.String()}
	m.etag = normalizeETag(resp.Header.Get("X-Linked-Etag"))
	if m.etag == "" {
		m.etag = normalizeETag(resp.Header.Get("ETag"))
	}
	size := resp.Header.Get("X-Linked-Size")
	if size == "" {
		size = resp.Header.Get("Content-Length")
	}
	m.size = -1
	if n, err := strconv.ParseInt(size, 10, 64); err == nil && n >= 0 {
		m.size = n
	}
	if resp.StatusCode >= 300 {
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil {
			return fileMeta{}, fmt.Errorf("hub: %s: %s: bad redirect: %w", repo, file, err)
		}
		m.location = loc.String()
	}
	switch {
	case m.etag == "" || strings.ContainsAny(m.etag, "/\\") || m.etag == "." || m.etag == "..":
		return fileMeta{}, fmt.Errorf("hub: %s: %s: the hub sent no usable ETag (%q); cannot verify or cache the file", repo, file, m.etag)
	case !commitHash.MatchString(m.commit):
		return fileMeta{}, fmt.Errorf("hub: %s: %s: the hub sent no X-Repo-Commit; is %s a Hugging Face hub?", repo, file, c.o.Endpoint)
	case m.size < 0:
		return fileMeta{}, fmt.Errorf("hub: %s: %s: the hub sent no size (X-Linked-Size or Content-Length)", repo, file)
	}
	return m, nil
}

// normalizeETag strips the quotes and weak marker of an ETag header, as
// huggingface_hub's _normalize_etag does: the result names the blob.
func normalizeETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.Trim(s, `"`)
}

// escapePath escapes each segment of a repository path.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
