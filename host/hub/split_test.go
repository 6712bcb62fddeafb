package hub

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// splitShards writes a small model as gguf-split shards (real GGUF files,
// so a pulled split opens with gguf.OpenModel) and returns their bytes.
func splitShards(t *testing.T, prefix string, count int) [][]byte {
	t.Helper()
	var ts []gguf.TensorSpec
	for i := range count {
		ts = append(ts, gguf.TensorSpec{Name: "t" + string(rune('a'+i)), Dims: []uint64{4096}, Type: gguf.TypeF32, Data: blobOf(4*4096, uint64(10+i))})
	}
	kvs := []gguf.KV{{Key: "general.architecture", Value: gguf.NewString("llama")}}
	paths, err := gguf.WriteSplit(filepath.Join(t.TempDir(), prefix), kvs, ts, 0, gguf.SplitLimits{MaxTensors: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

const (
	q4Dir    = "Q4_K_M/big-Q4_K_M"
	q4First  = q4Dir + "-00001-of-00003.gguf"
	q4Second = q4Dir + "-00002-of-00003.gguf"
	q4Third  = q4Dir + "-00003-of-00003.gguf"
)

// splitRepo holds a single-file Q8_0, a Q4_K_M split in three shards (in a
// folder, as large repositories lay them out) and a Q2_K split whose second
// shard is absent.
func splitRepo(t *testing.T) map[string]fakeFile {
	files := map[string]fakeFile{
		"README.md":                    {data: []byte("# big\n")},
		"big-Q8_0.gguf":                {data: blobOf(50_000, 7), lfs: true},
		"big-Q2_K-00001-of-00002.gguf": {data: blobOf(1000, 8), lfs: true},
		// A split filed in a folder named after its quantization, with
		// shard names that do not repeat it.
		"IQ2_XXS/big-00001-of-00002.gguf": {data: blobOf(900, 9), lfs: true},
		"IQ2_XXS/big-00002-of-00002.gguf": {data: blobOf(800, 10), lfs: true},
	}
	for i, b := range splitShards(t, "big-Q4_K_M", 3) {
		files[gguf.SplitName(q4Dir, i, 3)] = fakeFile{data: b, lfs: true}
	}
	return files
}

// TestPullSplitByQuant: a quantization stored as a split GGUF pulls every
// shard (each checked and linked like a single file), the result names the
// first shard, and the pulled shards open as one model from the cache.
func TestPullSplitByQuant(t *testing.T) {
	f := newFakeHub(t)
	files := splitRepo(t)
	f.add("org/big-GGUF", commitA, files)
	cache := t.TempDir()
	c := newClient(t, f, cache, nil)
	res, err := c.Pull(context.Background(), mustRef(t, "org/big-GGUF:Q4_K_M"))
	if err != nil {
		t.Fatal(err)
	}
	shards := []string{q4First, q4Second, q4Third}
	if !slices.Equal(res.Files, shards) || res.Model != filepath.Join(res.Dir, filepath.FromSlash(q4First)) {
		t.Fatalf("result files %v model %s", res.Files, res.Model)
	}
	var total int64
	for _, s := range shards {
		checkLayout(t, cache, "org/big-GGUF", commitA, s, files[s])
		total += int64(len(files[s].data))
	}
	if res.Fetched != total || len(f.requests("cdn /blobs/")) != 3 {
		t.Fatalf("fetched %d of %d bytes in %v", res.Fetched, total, f.requests("cdn /blobs/"))
	}
	m, err := gguf.OpenModel(res.Model)
	if err != nil {
		t.Fatalf("the pulled split does not open: %v", err)
	}
	if len(m.Shards) != 3 || len(m.Tensors) != 3 {
		t.Fatalf("%d shards, %d tensors", len(m.Shards), len(m.Tensors))
	}
	m.Close()

	// A shard's file name pulls the whole split.
	res2, err := c.Pull(context.Background(), mustRef(t, "org/big-GGUF:"+q4Second))
	if err != nil || !slices.Equal(res2.Files, shards) || res2.Model != res.Model || res2.Fetched != 0 {
		t.Fatalf("pull by shard name: %+v, %v", res2, err)
	}

	// Offline, the cache answers; a shard gone from the snapshot is named.
	off := newClient(t, f, cache, func(o *Options) { o.Offline = true })
	res3, err := off.Pull(context.Background(), mustRef(t, "org/big-GGUF:Q4_K_M"))
	if err != nil || res3.Model != res.Model || !slices.Equal(res3.Files, shards) {
		t.Fatalf("offline: %+v, %v", res3, err)
	}
	if err := os.Remove(filepath.Join(res.Dir, filepath.FromSlash(q4Third))); err != nil {
		t.Fatal(err)
	}
	_, err = off.Pull(context.Background(), mustRef(t, "org/big-GGUF:Q4_K_M"))
	if err == nil || !strings.Contains(err.Error(), "split in 3 shards but the cache (offline mode) lacks "+q4Third) {
		t.Fatalf("offline with a shard gone: %v", err)
	}
}

// TestPullSplitChoices: a split model is one choice among the repository's
// models, and one with a shard missing is refused, naming it.
func TestPullSplitChoices(t *testing.T) {
	f := newFakeHub(t)
	f.add("org/big-GGUF", commitA, splitRepo(t))
	c := newClient(t, f, t.TempDir(), nil)
	_, err := c.Pull(context.Background(), mustRef(t, "org/big-GGUF"))
	var ce *ChoiceError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "holds 4 GGUF models") ||
		!strings.Contains(err.Error(), "org/big-GGUF:IQ2_XXS\t(IQ2_XXS/big-00001-of-00002.gguf, split in 2 shards)") ||
		!strings.Contains(err.Error(), "org/big-GGUF:Q4_K_M\t("+q4First+", split in 3 shards)") ||
		!strings.Contains(err.Error(), "org/big-GGUF:Q8_0\t(big-Q8_0.gguf)") {
		t.Fatalf("no quantization: %v", err)
	}
	res, err := c.Pull(context.Background(), mustRef(t, "org/big-GGUF:iq2_xxs"))
	if err != nil || len(res.Files) != 2 || filepath.Base(res.Model) != "big-00001-of-00002.gguf" {
		t.Fatalf("a split filed under its quantization's folder: %+v, %v", res, err)
	}
	before := len(f.requests("cdn"))
	_, err = c.Pull(context.Background(), mustRef(t, "org/big-GGUF:Q2_K"))
	if err == nil || !strings.Contains(err.Error(), "big-Q2_K-00001-of-00002.gguf is split in 2 shards but the repository lacks big-Q2_K-00002-of-00002.gguf") {
		t.Fatalf("incomplete split: %v", err)
	}
	if n := len(f.requests("cdn")) - before; n != 0 {
		t.Fatalf("an incomplete split downloaded %d files", n)
	}
}

// TestPullSplitResumesAndVerifies: each shard resumes an interrupted
// transfer with Range and is checked against its sha256; a corrupt shard is
// removed, the revision is not recorded, and the next pull fetches only it.
func TestPullSplitResumesAndVerifies(t *testing.T) {
	f := newFakeHub(t)
	files := splitRepo(t)
	f.add("org/big-GGUF", commitA, files)
	cache := t.TempDir()
	c := newClient(t, f, cache, nil)
	second, third := files[q4Second], files[q4Third]
	f.truncate[second.sha256()] = 5000
	f.corrupt[third.sha256()] = true
	_, err := c.Pull(context.Background(), mustRef(t, "org/big-GGUF:Q4_K_M"))
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.File != q4Third {
		t.Fatalf("corrupt third shard: %v", err)
	}
	if r := f.requests("cdn /blobs/" + second.sha256() + " bytes=5000-"); len(r) != 1 {
		t.Fatalf("the second shard did not resume from byte 5000: %v", f.requests("cdn"))
	}
	rd := filepath.Join(cache, "models--org--big-GGUF")
	if _, err := os.Stat(filepath.Join(rd, "refs", "main")); err == nil {
		t.Fatal("refs/main written for a pull that failed")
	}
	if _, err := os.Stat(filepath.Join(rd, "blobs", third.sha256())); err == nil {
		t.Fatal("the corrupt shard was cached")
	}
	f.mu.Lock()
	delete(f.corrupt, third.sha256())
	f.mu.Unlock()
	before := len(f.requests("cdn"))
	res, err := c.Pull(context.Background(), mustRef(t, "org/big-GGUF:Q4_K_M"))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.requests("cdn")[before:]; len(got) != 1 || !strings.Contains(got[0], third.sha256()) || res.Fetched != int64(len(third.data)) {
		t.Fatalf("second pull fetched %d bytes with %v; want only the third shard", res.Fetched, got)
	}
	for _, s := range []string{q4First, q4Second, q4Third} {
		checkLayout(t, cache, "org/big-GGUF", commitA, s, files[s])
	}
}

// TestSplitListAndRemove: the cache lists a pulled split as one model of
// three shards, and removing the repository frees every shard.
func TestSplitListAndRemove(t *testing.T) {
	f := newFakeHub(t)
	files := splitRepo(t)
	f.add("org/big-GGUF", commitA, files)
	cache := t.TempDir()
	if _, err := newClient(t, f, cache, nil).Pull(context.Background(), mustRef(t, "org/big-GGUF:Q4_K_M")); err != nil {
		t.Fatal(err)
	}
	repos, err := (Cache{Dir: cache}).List()
	if err != nil || len(repos) != 1 || len(repos[0].Snapshots) != 1 {
		t.Fatalf("List: %+v, %v", repos, err)
	}
	ms := repos[0].Snapshots[0].Models
	if len(ms) != 1 || ms[0].File != q4First || len(ms[0].Shards) != 3 || len(ms[0].Missing) != 0 {
		t.Fatalf("models %+v, want the split as one", ms)
	}
	var total int64
	for _, s := range ms[0].Shards {
		total += int64(len(files[s].data))
	}
	n, err := (Cache{Dir: cache}).Remove("org/big-GGUF")
	if err != nil || n != total {
		t.Fatalf("Remove freed %d bytes (%v), want the shards' %d", n, err, total)
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--big-GGUF")); err == nil {
		t.Fatal("the repository is still in the cache")
	}
}

func TestGGUFModels(t *testing.T) {
	got := GGUFModels([]string{"a.gguf", "x-00002-of-00002.gguf", "README.md", "x-00001-of-00002.gguf", "y-00001-of-00003.gguf", "one-00001-of-00001.gguf"})
	want := []GGUFModel{
		{File: "a.gguf"},
		{File: "one-00001-of-00001.gguf"},
		{File: "x-00001-of-00002.gguf", Shards: []string{"x-00001-of-00002.gguf", "x-00002-of-00002.gguf"}},
		{File: "y-00001-of-00003.gguf", Shards: []string{"y-00001-of-00003.gguf"}, Missing: []string{"y-00002-of-00003.gguf", "y-00003-of-00003.gguf"}},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i].File != want[i].File || !slices.Equal(got[i].Shards, want[i].Shards) || !slices.Equal(got[i].Missing, want[i].Missing) {
			t.Errorf("model %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
