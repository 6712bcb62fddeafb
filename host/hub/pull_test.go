package hub

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const (
	commitA = "0123456789abcdef0123456789abcdef01234567"
	commitB = "89abcdef0123456789abcdef0123456789abcdef"
)

func blobOf(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// ggufRepo is a GGUF repository with three quantizations and a README.
func ggufRepo() map[string]fakeFile {
	return map[string]fakeFile{
		"README.md":                {data: []byte("# a model\n")},
		"tiny-Q4_K_M.gguf":         {data: blobOf(300_000, 1), lfs: true},
		"tiny-Q8_0.gguf":           {data: blobOf(200_000, 2), lfs: true},
		"tiny-Q4_K_S.gguf":         {data: blobOf(100_000, 3), lfs: true},
		"subdir/ignored-extra.txt": {data: []byte("x")},
		".gitattributes":           {data: []byte("*.gguf filter=lfs\n")},
	}
}

type recorder struct {
	mu             sync.Mutex
	begins         []string
	resumed, added int64
	ends           int
}

func (r *recorder) Begin(file string, size, resumed int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.begins = append(r.begins, file)
	r.resumed += resumed
}
func (r *recorder) Add(n int64)       { r.mu.Lock(); r.added += n; r.mu.Unlock() }
func (r *recorder) End(string, error) { r.mu.Lock(); r.ends++; r.mu.Unlock() }

func newClient(t *testing.T, f *fakeHub, cache string, mod func(*Options)) *Client {
	t.Helper()
	o := Options{Endpoint: f.hub.URL, CacheDir: cache, RetryWait: 1, Attempts: 3}
	if mod != nil {
		mod(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRef(t *testing.T, s string) Ref {
	t.Helper()
	r, err := ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkLayout asserts the huggingface_hub layout of one pulled file: a
// relative snapshot link to blobs/ETAG with the right bytes, and refs/main.
func checkLayout(t *testing.T, cache, repo, commit, file string, want fakeFile) {
	t.Helper()
	rd := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	link := filepath.Join(rd, "snapshots", commit, filepath.FromSlash(file))
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatalf("snapshot entry %s: %v", link, err)
	}
	etag := want.gitSHA1()
	if want.lfs {
		etag = want.sha256()
	}
	depth := strings.Count(file, "/")
	if wantT := strings.Repeat("../", depth+2) + "blobs/" + etag; target != wantT {
		t.Errorf("%s links to %q, want %q (relative, as huggingface_hub)", file, target, wantT)
	}
	got, err := os.ReadFile(link)
	if err != nil || !bytes.Equal(got, want.data) {
		t.Errorf("%s: content differs from the hub's (err %v)", file, err)
	}
	ref, err := os.ReadFile(filepath.Join(rd, "refs", "main"))
	if err != nil || string(ref) != commit {
		t.Errorf("refs/main = %q, %v; want %q without newline", ref, err, commit)
	}
	if _, err := os.Stat(filepath.Join(rd, "blobs", etag+".incomplete")); err == nil {
		t.Errorf("%s.incomplete left behind", etag)
	}
}

func TestPullGGUFByQuant(t *testing.T) {
	f := newFakeHub(t)
	files := ggufRepo()
	f.add("org/tiny-GGUF", commitA, files)
	cache := t.TempDir()
	rec := &recorder{}
	c := newClient(t, f, cache, func(o *Options) { o.Progress = rec })
	res, err := c.Pull(context.Background(), mustRef(t, "hf://org/tiny-GGUF:q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != commitA || filepath.Base(res.Model) != "tiny-Q8_0.gguf" || len(res.Files) != 1 {
		t.Fatalf("result %+v", res)
	}
	checkLayout(t, cache, "org/tiny-GGUF", commitA, "tiny-Q8_0.gguf", files["tiny-Q8_0.gguf"])
	if got := f.requests("cdn /blobs/"); len(got) != 1 {
		t.Errorf("CDN requests %v, want one GET", got)
	}
	if res.Fetched != 200_000 || rec.added != 200_000 || rec.ends != 1 {
		t.Errorf("fetched %d, progress added %d ends %d; want 200000, 200000, 1", res.Fetched, rec.added, rec.ends)
	}
	// A second pull is served by the cache: no HEAD, no CDN request.
	before := len(f.requests("cdn"))
	res2, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0"))
	if err != nil || res2.Model != res.Model || res2.Fetched != 0 {
		t.Fatalf("second pull: %+v, %v", res2, err)
	}
	if n := len(f.requests("cdn")); n != before || len(f.requests("HEAD")) != 1 {
		t.Errorf("second pull reached the CDN (%d→%d) or sent another HEAD (%v)", before, n, f.requests("HEAD"))
	}
}

func TestPullAmbiguousListsChoices(t *testing.T) {
	f := newFakeHub(t)
	f.add("org/tiny-GGUF", commitA, ggufRepo())
	c := newClient(t, f, t.TempDir(), nil)
	for _, tc := range []struct {
		ref  string
		want []string
	}{
		{"org/tiny-GGUF", []string{"holds 3 GGUF models", "org/tiny-GGUF:Q4_K_M\t(tiny-Q4_K_M.gguf)", "org/tiny-GGUF:Q8_0", "org/tiny-GGUF:Q4_K_S"}},
		{"org/tiny-GGUF:Q5_K_M", []string{`no GGUF file for quantization "Q5_K_M"`, "org/tiny-GGUF:Q4_K_M"}},
		{"org/tiny-GGUF:nope.gguf", []string{`has no file "nope.gguf"`, "tiny-Q8_0.gguf"}},
	} {
		_, err := c.Pull(context.Background(), mustRef(t, tc.ref))
		var ce *ChoiceError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: err %v, want a ChoiceError", tc.ref, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.ref, err, w)
			}
		}
	}
	if got := f.requests("cdn"); len(got) != 0 {
		t.Errorf("an ambiguous pull downloaded: %v", got)
	}
}

func TestPullSafetensorsByIndex(t *testing.T) {
	f := newFakeHub(t)
	index := `{"metadata":{"total_size":3},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}}`
	files := map[string]fakeFile{
		"config.json":                       {data: []byte(`{"architectures":["LlamaForCausalLM"]}`)},
		"tokenizer.json":                    {data: blobOf(5000, 9), lfs: true},
		"tokenizer_config.json":             {data: []byte(`{}`)},
		"generation_config.json":            {data: []byte(`{}`)},
		"model.safetensors.index.json":      {data: []byte(index)},
		"model-00001-of-00002.safetensors":  {data: blobOf(70_000, 4), lfs: true},
		"model-00002-of-00002.safetensors":  {data: blobOf(50_000, 5), lfs: true},
		"pytorch_model.bin":                 {data: blobOf(10, 6), lfs: true},
		"original/consolidated.safetensors": {data: blobOf(10, 7), lfs: true},
	}
	f.add("org/tiny-hf", commitA, files)
	cache := t.TempDir()
	c := newClient(t, f, cache, nil)
	res, err := c.Pull(context.Background(), mustRef(t, "org/tiny-hf"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != res.Dir {
		t.Errorf("model %s, want the snapshot dir %s", res.Model, res.Dir)
	}
	want := []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	got, _ := c.Cache().SnapshotFiles("org/tiny-hf", commitA)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("snapshot holds %v, want %v (no .bin, no original/)", got, want)
	}
	for _, name := range want {
		checkLayout(t, cache, "org/tiny-hf", commitA, name, files[name])
	}
}

func TestPullResumesTruncatedTransfer(t *testing.T) {
	f := newFakeHub(t)
	files := ggufRepo()
	f.add("org/tiny-GGUF", commitA, files)
	sha := files["tiny-Q4_K_M.gguf"].sha256()
	f.truncate[sha] = 123_456 // the first GET drops the connection there
	cache := t.TempDir()
	rec := &recorder{}
	c := newClient(t, f, cache, func(o *Options) { o.Progress = rec })
	res, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q4_K_M"))
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, cache, "org/tiny-GGUF", commitA, "tiny-Q4_K_M.gguf", files["tiny-Q4_K_M.gguf"])
	gets := f.requests("GET cdn")
	if len(gets) != 2 || !strings.HasSuffix(gets[0], sha+" ") || !strings.HasSuffix(gets[1], "bytes=123456-") {
		t.Fatalf("CDN GETs %q, want a full GET then one from byte 123456", gets)
	}
	if rec.resumed != 123_456 || rec.added != 300_000 || res.Fetched != 300_000 {
		t.Errorf("resumed %d added %d fetched %d", rec.resumed, rec.added, res.Fetched)
	}
}

func TestPullResumesPartialFileOfEarlierRun(t *testing.T) {
	f := newFakeHub(t)
	files := ggufRepo()
	f.add("org/tiny-GGUF", commitA, files)
	file := files["tiny-Q4_K_S.gguf"]
	cache := t.TempDir()
	blobs := filepath.Join(cache, "models--org--tiny-GGUF", "blobs")
	os.MkdirAll(blobs, 0o755)
	// What a killed run (ours or huggingface_hub's) leaves: ETAG.incomplete.
	if err := os.WriteFile(filepath.Join(blobs, file.sha256()+".incomplete"), file.data[:40_000], 0o644); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, f, cache, nil)
	res, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q4_K_S"))
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, cache, "org/tiny-GGUF", commitA, "tiny-Q4_K_S.gguf", file)
	if gets := f.requests("GET cdn"); len(gets) != 1 || !strings.HasSuffix(gets[0], "bytes=40000-") {
		t.Errorf("CDN GETs %q, want one from byte 40000", gets)
	}
	if res.Fetched != 60_000 {
		t.Errorf("fetched %d, want 60000", res.Fetched)
	}
	// A server that ignores Range gets the file from the start, still right.
	f.noRange = true
	file2 := files["tiny-Q8_0.gguf"]
	os.WriteFile(filepath.Join(blobs, file2.sha256()+".incomplete"), []byte("garbage that is not the prefix"), 0o644)
	if _, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0")); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, cache, "org/tiny-GGUF", commitA, "tiny-Q8_0.gguf", file2)
}

func TestPullRefusesChecksumMismatch(t *testing.T) {
	f := newFakeHub(t)
	files := ggufRepo()
	f.add("org/tiny-GGUF", commitA, files)
	sha := files["tiny-Q8_0.gguf"].sha256()
	f.corrupt[sha] = true
	cache := t.TempDir()
	c := newClient(t, f, cache, nil)
	_, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0"))
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.Want != sha || ce.Algo != "sha256" {
		t.Fatalf("err %v, want a sha256 ChecksumError naming %s", err, sha)
	}
	rd := filepath.Join(cache, "models--org--tiny-GGUF")
	for _, p := range []string{"blobs/" + sha, "blobs/" + sha + ".incomplete", "snapshots/" + commitA + "/tiny-Q8_0.gguf", "refs/main"} {
		if _, err := os.Lstat(filepath.Join(rd, p)); err == nil {
			t.Errorf("%s exists after a refused download", p)
		}
	}
	// Fixed on the server: the next pull succeeds from scratch.
	delete(f.corrupt, sha)
	if _, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0")); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, cache, "org/tiny-GGUF", commitA, "tiny-Q8_0.gguf", files["tiny-Q8_0.gguf"])
}

func TestPullRefusesWrongGitBlob(t *testing.T) {
	// A non-LFS file is checked against its git blob sha1 (the ETag).
	f := newFakeHub(t)
	f.add("org/tiny-hf", commitA, map[string]fakeFile{
		"config.json":       {data: []byte(`{}`)},
		"model.safetensors": {data: blobOf(1000, 1), lfs: true},
	})
	c := newClient(t, f, t.TempDir(), nil)
	m := fileMeta{commit: commitA, etag: strings.Repeat("a", 40), size: 2, location: f.hub.URL + "/org/tiny-hf/resolve/main/config.json"}
	err := c.fetchBlob(context.Background(), "org/tiny-hf", "config.json", m, "")
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.Algo != "git-sha1" {
		t.Fatalf("err %v, want a git-sha1 ChecksumError", err)
	}
}

func TestTokenGoesToHubOnly(t *testing.T) {
	f := newFakeHub(t)
	f.token = "hf_secret"
	f.add("org/gated", commitA, ggufRepo())
	f.repos["org/gated"].gated = true
	f.repos["org/gated"].files = map[string]fakeFile{"m-Q8_0.gguf": {data: blobOf(1000, 1), lfs: true}}

	_, err := newClient(t, f, t.TempDir(), nil).Pull(context.Background(), mustRef(t, "org/gated"))
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 401 || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Fatalf("without a token: %v, want 401 saying to set HF_TOKEN", err)
	}
	_, err = newClient(t, f, t.TempDir(), func(o *Options) { o.Token = "wrong" }).Pull(context.Background(), mustRef(t, "org/gated"))
	if err == nil || !strings.Contains(err.Error(), "HF_TOKEN is set") {
		t.Fatalf("with a wrong token: %v", err)
	}
	c := newClient(t, f, t.TempDir(), func(o *Options) { o.Token = "hf_secret" })
	if _, err := c.Pull(context.Background(), mustRef(t, "org/gated")); err != nil {
		t.Fatal(err)
	}
	if len(f.cdnAuth) != 0 {
		t.Errorf("the CDN (another host) received Authorization %q", f.cdnAuth)
	}
	if len(f.requests("GET cdn")) != 1 {
		t.Errorf("CDN GETs %v", f.requests("GET cdn"))
	}
}

func TestOfflineUsesCacheOnly(t *testing.T) {
	f := newFakeHub(t)
	f.add("org/tiny-GGUF", commitA, ggufRepo())
	cache := t.TempDir()
	online, err := newClient(t, f, cache, nil).Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	n := len(f.requests(""))
	off := newClient(t, f, cache, func(o *Options) { o.Offline = true })
	res, err := off.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0"))
	if err != nil || res.Model != online.Model || res.Commit != commitA {
		t.Fatalf("offline pull: %+v, %v; want %s", res, err, online.Model)
	}
	// The only GGUF in the cached snapshot needs no selector offline.
	if res, err := off.Pull(context.Background(), mustRef(t, "org/tiny-GGUF")); err != nil || res.Model != online.Model {
		t.Fatalf("offline pull without a quant: %+v, %v", res, err)
	}
	_, err = off.Pull(context.Background(), mustRef(t, "org/other"))
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Fatalf("offline pull of an uncached repo: %v", err)
	}
	if _, err := off.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q4_K_M")); err == nil {
		t.Fatal("offline pull of an uncached quantization succeeded")
	}
	if got := len(f.requests("")); got != n {
		t.Errorf("offline mode sent %d requests", got-n)
	}
}

func TestOptionsFromEnv(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_fromfile\n"), 0o600)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		env              map[string]string
		cache, token, ep string
		offline          bool
	}{
		{map[string]string{"HOME": "/h"}, "/h/.cache/huggingface/hub", "", "", false},
		{map[string]string{"HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub", "", "", false},
		{map[string]string{"HF_HOME": home, "HF_HUB_OFFLINE": "1"}, home + "/hub", "hf_fromfile", "", true},
		{map[string]string{"HF_HOME": home, "HF_TOKEN": "hf_env", "HF_HUB_CACHE": "/c", "HF_ENDPOINT": "http://mirror:8/"}, "/c", "hf_env", "http://mirror:8", false},
		{map[string]string{"HOME": "/h", "HUGGING_FACE_HUB_TOKEN": "hf_old", "HF_HUB_OFFLINE": "0"}, "/h/.cache/huggingface/hub", "hf_old", "", false},
	} {
		o := OptionsFromEnv(env(tc.env))
		if o.CacheDir != tc.cache || o.Token != tc.token || o.Endpoint != tc.ep || o.Offline != tc.offline {
			t.Errorf("%v: got cache %q token %q endpoint %q offline %v", tc.env, o.CacheDir, o.Token, o.Endpoint, o.Offline)
		}
	}
}

func TestHubErrors(t *testing.T) {
	f := newFakeHub(t)
	f.add("org/tiny-GGUF", commitA, ggufRepo())
	f.add("org/empty", commitA, map[string]fakeFile{"README.md": {data: []byte("hi")}})
	c := newClient(t, f, t.TempDir(), nil)
	for ref, want := range map[string]string{
		"org/missing":           "HTTP 404",
		"org/tiny-GGUF@v9:Q8_0": "no such branch, tag or commit",
		"org/empty":             "neither a GGUF file nor config.json",
	} {
		if _, err := c.Pull(context.Background(), mustRef(t, ref)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", ref, err, want)
		}
	}
}

// TestRenamedRepoFollowsRelativeRedirect: the hub redirects a renamed
// repository's routes relatively; the client follows (keeping the token,
// same host) and caches under the id it was given, as huggingface_hub does.
func TestRenamedRepoFollowsRelativeRedirect(t *testing.T) {
	f := newFakeHub(t)
	files := ggufRepo()
	f.add("org/tiny-GGUF", commitA, files)
	cache := t.TempDir()
	c := newClient(t, f, cache, func(o *Options) { o.Token = "hf_x" })
	res, err := c.Pull(context.Background(), mustRef(t, "org/old-name:Q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, cache, "org/old-name", commitA, "tiny-Q8_0.gguf", files["tiny-Q8_0.gguf"])
	if len(f.requests("hub /api/models/org/old-name/")) != 1 || len(f.requests("hub /api/models/org/tiny-GGUF/")) != 1 || res.Commit != commitA {
		t.Errorf("redirect not followed: %v", f.requests("hub"))
	}
}
