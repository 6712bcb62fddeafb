package hub

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHub serves the Hugging Face Hub routes kvhost uses: model info, HEAD
// and GET on resolve (small files from the hub itself, LFS files by a
// redirect to a CDN on another host), with the hub's headers. Hooks let a
// test truncate or corrupt transfers and see every request.
type fakeHub struct {
	t     *testing.T
	hub   *httptest.Server
	cdn   *httptest.Server
	token string // when set, gated repos need it

	mu       sync.Mutex
	repos    map[string]*fakeRepo
	log      []string       // "METHOD host-kind path [range]"
	cdnAuth  []string       // Authorization headers the CDN saw (must stay empty)
	truncate map[string]int // sha → bytes to send before dropping the connection (once)
	corrupt  map[string]bool
	noRange  bool // the CDN ignores Range (answers 200 with the whole file)
}

type fakeRepo struct {
	commit string
	gated  bool
	files  map[string]fakeFile
}

type fakeFile struct {
	data []byte
	lfs  bool
}

func (f fakeFile) sha256() string { s := sha256.Sum256(f.data); return hex.EncodeToString(s[:]) }

func (f fakeFile) gitSHA1() string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(f.data))
	h.Write(f.data)
	return hex.EncodeToString(h.Sum(nil))
}

func newFakeHub(t *testing.T) *fakeHub {
	f := &fakeHub{t: t, repos: map[string]*fakeRepo{}, truncate: map[string]int{}, corrupt: map[string]bool{}}
	f.cdn = httptest.NewServer(http.HandlerFunc(f.serveCDN))
	f.hub = httptest.NewServer(http.HandlerFunc(f.serveHub))
	t.Cleanup(func() { f.hub.Close(); f.cdn.Close() })
	return f
}

func (f *fakeHub) add(repo, commit string, files map[string]fakeFile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repos[repo] = &fakeRepo{commit: commit, files: files}
}

func (f *fakeHub) record(s string) {
	f.mu.Lock()
	f.log = append(f.log, s)
	f.mu.Unlock()
}

// requests returns the log lines containing sub.
func (f *fakeHub) requests(sub string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.log {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

func (f *fakeHub) repoFor(w http.ResponseWriter, r *http.Request, org, name string) *fakeRepo {
	f.mu.Lock()
	repo := f.repos[org+"/"+name]
	f.mu.Unlock()
	if repo == nil {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
		return nil
	}
	if repo.gated && r.Header.Get("Authorization") != "Bearer "+f.token {
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, `{"error":"Access to model is restricted"}`, http.StatusUnauthorized)
		return nil
	}
	return repo
}

func (f *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	f.record(r.Method + " hub " + r.URL.Path)
	if strings.Contains(r.URL.Path, "/org/old-name/") {
		// A renamed repository: the hub answers with a relative redirect.
		http.Redirect(w, r, strings.Replace(r.URL.Path, "/org/old-name/", "/org/tiny-GGUF/", 1), http.StatusTemporaryRedirect)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
	switch {
	case len(parts) >= 5 && parts[0] == "api" && parts[1] == "models" && strings.HasPrefix(parts[4], "revision/"):
		// /api/models/ORG/NAME/revision/REV
		repo := f.repoFor(w, r, parts[2], parts[3])
		if repo == nil {
			return
		}
		if rev := strings.TrimPrefix(parts[4], "revision/"); rev != "main" && rev != repo.commit {
			w.Header().Set("X-Error-Code", "RevisionNotFound")
			http.Error(w, `{"error":"Invalid rev id"}`, http.StatusNotFound)
			return
		}
		type lfsInfo struct {
			SHA256 string `json:"sha256"`
			Size   int    `json:"size"`
		}
		type sib struct {
			Name string   `json:"rfilename"`
			Size int      `json:"size"`
			LFS  *lfsInfo `json:"lfs,omitempty"`
		}
		info := struct {
			ID       string `json:"id"`
			SHA      string `json:"sha"`
			Siblings []sib  `json:"siblings"`
		}{ID: parts[2] + "/" + parts[3], SHA: repo.commit}
		for name, file := range repo.files {
			s := sib{Name: name, Size: len(file.data)}
			if file.lfs {
				s.LFS = &lfsInfo{SHA256: file.sha256(), Size: len(file.data)}
			}
			info.Siblings = append(info.Siblings, s)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
	case len(parts) >= 5 && parts[2] == "resolve":
		// /ORG/NAME/resolve/REV/PATH
		repo := f.repoFor(w, r, parts[0], parts[1])
		if repo == nil {
			return
		}
		rev, path, _ := strings.Cut(parts[3]+"/"+parts[4], "/")
		w.Header().Set("X-Repo-Commit", repo.commit)
		if rev != "main" && rev != repo.commit {
			w.Header().Set("X-Error-Code", "RevisionNotFound")
			http.Error(w, "Invalid rev id", http.StatusNotFound)
			return
		}
		file, ok := repo.files[path]
		if !ok {
			w.Header().Set("X-Error-Code", "EntryNotFound")
			http.Error(w, "Entry not found", http.StatusNotFound)
			return
		}
		if file.lfs {
			w.Header().Set("X-Linked-Etag", `"`+file.sha256()+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(file.data)))
			w.Header().Set("ETag", `"`+file.gitSHA1()+`"`) // the pointer's
			w.Header().Set("Location", f.cdn.URL+"/blobs/"+file.sha256())
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Header().Set("ETag", `"`+file.gitSHA1()+`"`)
		http.ServeContent(w, r, path, time.Time{}, bytes.NewReader(file.data))
	default:
		http.NotFound(w, r)
	}
}

// abortAfter writes n bytes then drops the connection.
type abortAfter struct {
	http.ResponseWriter
	n int
}

func (a *abortAfter) Write(b []byte) (int, error) {
	if len(b) > a.n {
		if a.n > 0 {
			_, _ = a.ResponseWriter.Write(b[:a.n])
		}
		http.NewResponseController(a.ResponseWriter).Flush()
		panic(http.ErrAbortHandler)
	}
	a.n -= len(b)
	return a.ResponseWriter.Write(b)
}

func (f *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	f.record(r.Method + " cdn " + r.URL.Path + " " + r.Header.Get("Range"))
	sha := strings.TrimPrefix(r.URL.Path, "/blobs/")
	f.mu.Lock()
	if a := r.Header.Get("Authorization"); a != "" {
		f.cdnAuth = append(f.cdnAuth, a)
	}
	var data []byte
	for _, repo := range f.repos {
		for _, file := range repo.files {
			if file.lfs && file.sha256() == sha {
				data = file.data
			}
		}
	}
	cut, truncate := f.truncate[sha]
	delete(f.truncate, sha)
	bad := f.corrupt[sha]
	noRange := f.noRange
	f.mu.Unlock()
	if data == nil {
		http.NotFound(w, r)
		return
	}
	if bad {
		data = append([]byte{}, data...)
		data[len(data)/2] ^= 0xff
	}
	if noRange {
		r.Header.Del("Range")
	}
	if truncate {
		w = &abortAfter{ResponseWriter: w, n: cut}
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}
