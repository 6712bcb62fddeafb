package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

const fakeCommit = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"

// miniHub serves one GGUF repository (org/stories260K-GGUF holding the
// repository's stories260K.gguf) with the Hugging Face Hub's routes and
// headers: model info, a resolve that redirects to a CDN path, and the
// CDN, which waits for release before sending bytes (so a test can see
// serve answer 503 while it downloads).
type miniHub struct {
	srv     *httptest.Server
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	gets    int
}

func newMiniHub(t *testing.T) *miniHub {
	data, err := os.ReadFile(sharedModel(t))
	if err != nil {
		t.Fatal(err)
	}
	return newMiniHubFiles(t, map[string][]byte{"stories260K-F32.gguf": data})
}

// newMiniHubFiles is a miniHub whose org/stories260K-GGUF holds files (LFS
// files, served by sha256 from the CDN path) and a README.
func newMiniHubFiles(t *testing.T, files map[string][]byte) *miniHub {
	h := &miniHub{release: make(chan struct{})}
	shas := map[string]string{}
	bySHA := map[string][]byte{}
	siblings := []any{map[string]any{"rfilename": "README.md"}}
	for name, data := range files {
		sum := sha256.Sum256(data)
		shas[name] = hex.EncodeToString(sum[:])
		bySHA[shas[name]] = data
		siblings = append(siblings, map[string]any{"rfilename": name, "size": len(data), "lfs": map[string]any{"sha256": shas[name], "size": len(data)}})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/models/org/stories260K-GGUF/revision/main", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"id": "org/stories260K-GGUF", "sha": fakeCommit, "siblings": siblings})
	})
	mux.HandleFunc("/org/stories260K-GGUF/resolve/{rev}/{file...}", func(w http.ResponseWriter, r *http.Request) {
		sha, ok := shas[r.PathValue("file")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", fakeCommit)
		w.Header().Set("X-Linked-Etag", `"`+sha+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(bySHA[sha])))
		http.Redirect(w, r, "http://127.0.0.1:"+portOf(h.srv.URL)+"/cdn/"+sha, http.StatusFound)
	})
	mux.HandleFunc("GET /cdn/{sha}", func(w http.ResponseWriter, r *http.Request) {
		<-h.release
		h.mu.Lock()
		h.gets++
		h.mu.Unlock()
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(bySHA[r.PathValue("sha")]))
	})
	h.srv = httptest.NewServer(mux)
	t.Cleanup(func() { h.open(); h.srv.Close() })
	return h
}

func (h *miniHub) open() { h.once.Do(func() { close(h.release) }) }

func portOf(u string) string { return u[strings.LastIndexByte(u, ':')+1:] }

// hubEnv points huggingface_hub's variables at the fake hub and a fresh
// cache, as a user's shell would.
func hubEnv(t *testing.T, h *miniHub) string {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_ENDPOINT", h.srv.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("HF_HUB_CACHE", "")
	return home
}

// syncBuf is a goroutine-safe buffer for a command's output.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// waitFor polls f until it returns a non-empty string.
func waitFor(t *testing.T, what string, d time.Duration, f func() string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s := f(); s != "" {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
	return ""
}

var listenURL = regexp.MustCompile(`listening.*url=(http://127\.0\.0\.1:\d+)`)

// TestNewcomerFlow is the README's path on a fresh clone: pull a model
// from the hub (a fake one), list it, serve it by its hub id — the port
// answers 503 while the model downloads and loads, then serves — and chat
// with it in the terminal; then rm it.
func TestNewcomerFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the end-to-end newcomer flow in -short mode")
	}
	h := newMiniHub(t)
	home := hubEnv(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// serve by hub id: bound at once, 503 while downloading.
	var out, errb syncBuf
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--model", "hf://org/stories260K-GGUF", "--addr", "127.0.0.1:0", "--device-memory", "256MiB", "--threads", "2", "--log-format", "text"}, &out, &errb)
	}()
	url := waitFor(t, "the listening line", 10*time.Second, func() string {
		if m := listenURL.FindStringSubmatch(errb.String()); m != nil {
			return m[1]
		}
		return ""
	})
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "downloading org/stories260K-GGUF") {
		t.Fatalf("/health while downloading: %d %s", resp.StatusCode, body)
	}
	h.open()
	waitFor(t, "/ready 200", 60*time.Second, func() string {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, errb.String())
		default:
		}
		resp, err := http.Get(url + "/ready")
		if err != nil {
			return ""
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			return "ok"
		}
		return ""
	})
	snap := filepath.Join(home, "hub", "models--org--stories260K-GGUF", "snapshots", fakeCommit, "stories260K-F32.gguf")
	if _, err := os.Stat(snap); err != nil {
		t.Fatalf("not in the huggingface_hub layout: %v", err)
	}

	// chat in the terminal against it.
	stdinReader = strings.NewReader("Once upon a time\n/clear\nTell me about a cat\n/bye\nnever read\n")
	defer func() { stdinReader = os.Stdin }()
	var chatOut bytes.Buffer
	if err := run(ctx, []string{"chat", "--url", url, "--temperature", "0", "--max-tokens", "24"}, &chatOut, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(chatOut.String()), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "chatting with stories260K") || lines[len(lines)-1] != "bye" || !strings.Contains(chatOut.String(), "(conversation cleared)") {
		t.Fatalf("chat transcript:\n%s", chatOut.String())
	}
	if len(strings.TrimSpace(lines[1])) < 10 {
		t.Errorf("the first answer is nearly empty: %q", lines[1])
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "kvhost is serving stories260K") {
		t.Errorf("serve stdout: %s", out.String())
	}

	// pull again: the cache answers, nothing is downloaded.
	var pullOut bytes.Buffer
	if err := run(context.Background(), []string{"pull", "org/stories260K-GGUF"}, &pullOut, io.Discard); err != nil {
		t.Fatal(err)
	}
	if h.gets != 1 || !strings.Contains(pullOut.String(), "0 B downloaded") || !strings.Contains(pullOut.String(), snap) {
		t.Errorf("second pull: %d CDN GETs, output %s", h.gets, pullOut.String())
	}
	var listOut bytes.Buffer
	if err := run(context.Background(), []string{"list"}, &listOut, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(listOut.String(), "org/stories260K-GGUF") || !strings.Contains(listOut.String(), "1.0 MiB") || !strings.Contains(listOut.String(), "stories260K-F32.gguf") {
		t.Errorf("list:\n%s", listOut.String())
	}
	var rmOut bytes.Buffer
	if err := run(context.Background(), []string{"rm", "org/stories260K-GGUF"}, &rmOut, io.Discard); err != nil || !strings.Contains(rmOut.String(), "removed org/stories260K-GGUF") {
		t.Fatalf("rm: %v %s", err, rmOut.String())
	}
	listOut.Reset()
	run(context.Background(), []string{"list"}, &listOut, io.Discard)
	if !strings.HasPrefix(listOut.String(), "no models in") {
		t.Errorf("list after rm: %s", listOut.String())
	}
	// Offline, an uncached model is refused without a request.
	t.Setenv("HF_HUB_OFFLINE", "1")
	err = run(context.Background(), []string{"pull", "org/stories260K-GGUF"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Errorf("offline pull: %v", err)
	}
}

func TestServeFailsFastOnBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	err = run(context.Background(), []string{"serve", "--model", sharedModel(t), "--addr", ln.Addr().String()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve on a busy port: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("failing on a busy port took %v (the model must not load first)", d)
	}
}

func TestServeRefusesUnknownModel(t *testing.T) {
	err := run(context.Background(), []string{"serve", "--model", "./no/such/file.gguf", "--addr", "127.0.0.1:0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("%v", err)
	}
}

// TestChatInProcess drives chat --model (the model served in-process) with
// a scripted stdin that ends without /bye.
func TestChatInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: loads a model")
	}
	stdinReader = strings.NewReader("Hello\n")
	defer func() { stdinReader = os.Stdin }()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"chat", "--model", sharedModel(t), "--device-memory", "256MiB", "--threads", "2", "--max-tokens", "8", "--system", "You tell stories."}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "chatting with stories260K at http://127.0.0.1:") {
		t.Fatalf("transcript %q", lines)
	}
}
