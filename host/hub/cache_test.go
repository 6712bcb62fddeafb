package hub

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pythonCache writes a repository the way huggingface_hub's
// hf_hub_download leaves it (blobs named by ETag, relative snapshot links,
// refs/main without a newline), without kvhost's code.
func pythonCache(t *testing.T, cache, repo, commit string, files map[string]fakeFile) {
	t.Helper()
	rd := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	for name, f := range files {
		etag := f.gitSHA1()
		if f.lfs {
			etag = f.sha256()
		}
		if err := os.MkdirAll(filepath.Join(rd, "blobs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rd, "blobs", etag), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(rd, "snapshots", commit, name)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(strings.Repeat("../", strings.Count(name, "/")+2)+"blobs/"+etag, link); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(rd, "refs"), 0o755)
	if err := os.WriteFile(filepath.Join(rd, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPythonCacheReused(t *testing.T) {
	f := newFakeHub(t)
	files := ggufRepo()
	f.add("org/tiny-GGUF", commitA, files)
	cache := t.TempDir()
	pythonCache(t, cache, "org/tiny-GGUF", commitA, map[string]fakeFile{"tiny-Q8_0.gguf": files["tiny-Q8_0.gguf"]})

	c := newClient(t, f, cache, nil)
	res, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 0 || len(f.requests("cdn")) != 0 || len(f.requests("HEAD")) != 0 {
		t.Errorf("a file huggingface_hub cached was fetched again: fetched %d, requests %v", res.Fetched, f.requests(""))
	}
	if want := filepath.Join(cache, "models--org--tiny-GGUF", "snapshots", commitA, "tiny-Q8_0.gguf"); res.Model != want {
		t.Errorf("model %s, want %s", res.Model, want)
	}
	// The hub moved main to a new commit holding the same blob: the new
	// snapshot links the blob already on disk, nothing is downloaded.
	f.add("org/tiny-GGUF", commitB, files)
	res, err = c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q8_0"))
	if err != nil || res.Commit != commitB || res.Fetched != 0 || len(f.requests("cdn")) != 0 {
		t.Fatalf("new commit: %+v, %v, cdn %v", res, err, f.requests("cdn"))
	}
	checkLayout(t, cache, "org/tiny-GGUF", commitB, "tiny-Q8_0.gguf", files["tiny-Q8_0.gguf"])
}

func TestListAndRemove(t *testing.T) {
	f := newFakeHub(t)
	files := ggufRepo()
	f.add("org/tiny-GGUF", commitA, files)
	cache := t.TempDir()
	pythonCache(t, cache, "other/model", commitB, map[string]fakeFile{"config.json": {data: []byte("{}")}, "model.safetensors": {data: blobOf(10, 1), lfs: true}})
	c := newClient(t, f, cache, nil)
	if _, err := c.Pull(context.Background(), mustRef(t, "org/tiny-GGUF:Q4_K_S")); err != nil {
		t.Fatal(err)
	}
	// A partial download counts in the repository's bytes.
	os.WriteFile(filepath.Join(cache, "models--org--tiny-GGUF", "blobs", strings.Repeat("b", 64)+".incomplete"), make([]byte, 7), 0o644)

	list, err := c.Cache().List()
	if err != nil || len(list) != 2 {
		t.Fatalf("list %+v, %v", list, err)
	}
	r := list[0]
	if r.Repo != "org/tiny-GGUF" || r.Refs["main"] != commitA || len(r.Snapshots) != 1 || r.Snapshots[0].Files[0] != "tiny-Q4_K_S.gguf" || r.Bytes != 100_007 || r.Partial != 7 {
		t.Errorf("list[0] = %+v", r)
	}
	if list[1].Repo != "other/model" || list[1].Bytes != 12 || len(list[1].Snapshots[0].Files) != 2 {
		t.Errorf("list[1] = %+v", list[1])
	}
	freed, err := c.Cache().Remove("org/tiny-GGUF")
	if err != nil || freed != 100_007 {
		t.Fatalf("remove: %d, %v", freed, err)
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--tiny-GGUF")); err == nil {
		t.Error("the repository folder is still there")
	}
	if _, err := os.Stat(filepath.Join(cache, ".locks", "models--org--tiny-GGUF")); err == nil {
		t.Error("its locks are still there")
	}
	if _, err := c.Cache().Remove("org/tiny-GGUF"); err == nil || !strings.Contains(err.Error(), "not in the cache") {
		t.Errorf("second remove: %v", err)
	}
	if list, _ := c.Cache().List(); len(list) != 1 {
		t.Errorf("after remove: %+v", list)
	}
	if list, err := (Cache{Dir: filepath.Join(cache, "nope")}).List(); err != nil || list != nil {
		t.Errorf("missing cache: %v, %v", list, err)
	}
}
