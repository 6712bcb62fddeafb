package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Result is a pulled model in the cache.
type Result struct {
	Ref    Ref
	Commit string
	// Dir is the snapshot directory (snapshots/COMMIT).
	Dir string
	// Files are the pulled files, relative to Dir.
	Files []string
	// Model is what to serve: the GGUF file's path, or Dir for a
	// safetensors repository.
	Model string
	// Fetched counts the bytes downloaded now (0 when all came from the
	// cache).
	Fetched int64
}

// safetensorsAux are the non-weight files of a safetensors repository a
// model directory may use (config.json is required, the others optional).
var safetensorsAux = []string{
	"config.json", "generation_config.json",
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
	"chat_template.jinja", "chat_template.json",
}

const indexFile = "model.safetensors.index.json"

// Pull makes ref's files present in the cache and returns where they are.
// Online it asks the hub which commit the revision is at and fetches what
// is missing (files already cached, by whatever tool, are reused); offline
// it resolves everything from the cache.
func (c *Client) Pull(ctx context.Context, ref Ref) (*Result, error) {
	if ref.Revision == "" {
		ref.Revision = DefaultRevision
	}
	if c.o.Offline {
		return c.pullOffline(ref)
	}
	mi, err := c.info(ctx, ref.Repo, ref.Revision)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(mi.Siblings))
	lfs := map[string]string{}
	for i, s := range mi.Siblings {
		names[i] = s.Name
		if s.LFS != nil {
			lfs[s.Name] = s.LFS.SHA256
		}
	}
	res := &Result{Ref: ref, Commit: mi.SHA, Dir: c.cache.snapshotDir(ref.Repo, mi.SHA)}
	want, err := c.selectFiles(ref, names, "the repository")
	if err != nil {
		return nil, err
	}
	if want == nil {
		// A safetensors repository: its index names the shards.
		if !slices.Contains(names, "config.json") {
			return nil, fmt.Errorf("hub: %s holds neither a GGUF file nor config.json with safetensors weights; kvhost serves one of those", ref.Repo)
		}
		want = aux(names)
		switch {
		case slices.Contains(names, indexFile):
			if err := c.fetch(ctx, res, indexFile, lfs[indexFile]); err != nil {
				return nil, err
			}
			shards, err := readIndex(filepath.Join(res.Dir, indexFile))
			if err != nil {
				return nil, fmt.Errorf("hub: %s: %w", ref.Repo, err)
			}
			for _, s := range shards {
				if !slices.Contains(names, s) {
					return nil, fmt.Errorf("hub: %s: %s names shard %q, which the repository does not hold", ref.Repo, indexFile, s)
				}
			}
			want = append(append(want, indexFile), shards...)
		case slices.Contains(names, "model.safetensors"):
			want = append(want, "model.safetensors")
		default:
			return nil, fmt.Errorf("hub: %s has config.json but no model.safetensors or %s (kvhost reads safetensors weights, not .bin or .pt)", ref.Repo, indexFile)
		}
	}
	for _, f := range want {
		if err := c.fetch(ctx, res, f, lfs[f]); err != nil {
			return nil, err
		}
	}
	if err := c.cache.writeRef(ref.Repo, ref.Revision, mi.SHA); err != nil {
		return nil, err
	}
	return res.finish(want), nil
}

// selectFiles decides what a reference means among the repository's files:
// one GGUF model (a FILE, a QUANT, or the only GGUF; a split model's every
// shard), or nil for a safetensors repository pulled whole. where names
// what the files are ("the repository", "the cache") for errors.
func (c *Client) selectFiles(ref Ref, names []string, where string) ([]string, error) {
	if ref.File != "" {
		if !slices.Contains(names, ref.File) {
			return nil, &ChoiceError{Repo: ref.Repo, Problem: fmt.Sprintf("has no file %q; its model files are", ref.File), Files: modelFiles(names)}
		}
		if m, ok := modelOf(names, ref.File); ok {
			// A shard names its whole split model.
			return m.Files(), m.complete(ref.Repo, where)
		}
		return []string{ref.File}, nil
	}
	g, err := selectGGUF(ref.Repo, names, ref.Quant)
	if err != nil || g.File == "" {
		return nil, err
	}
	return g.Files(), g.complete(ref.Repo, where)
}

// modelFiles are the GGUF and safetensors files among names, or all of them
// when there are none.
func modelFiles(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".gguf") || strings.HasSuffix(n, ".safetensors") {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = slices.Clone(names)
	}
	slices.Sort(out)
	return out
}

func aux(names []string) []string {
	var out []string
	for _, a := range safetensorsAux {
		if slices.Contains(names, a) {
			out = append(out, a)
		}
	}
	return out
}

// fetch makes one file of res's commit present: its snapshot link if it is
// there, its blob if another snapshot (or tool) already has it, else a
// download.
func (c *Client) fetch(ctx context.Context, res *Result, file, lfsSHA string) error {
	repo := res.Ref.Repo
	link := filepath.Join(res.Dir, filepath.FromSlash(file))
	if st, err := os.Stat(link); err == nil && st.Mode().IsRegular() {
		c.log.Info("cached", "repo", repo, "file", file, "bytes", st.Size())
		return nil
	}
	m, err := c.head(ctx, repo, res.Commit, file)
	if err != nil {
		return err
	}
	if m.commit != res.Commit {
		return fmt.Errorf("hub: %s: %s is at commit %s, the model info said %s", repo, file, m.commit, res.Commit)
	}
	if st, err := os.Stat(c.cache.blobPath(repo, m.etag)); err == nil && st.Size() == m.size {
		c.log.Info("cached blob", "repo", repo, "file", file, "bytes", m.size)
		return c.cache.link(repo, res.Commit, file, m.etag)
	}
	c.log.Info("downloading", "repo", repo, "file", file, "bytes", m.size)
	before := partSize(c.cache.blobPath(repo, m.etag))
	if err := c.fetchBlob(ctx, repo, file, m, lfsSHA); err != nil {
		return err
	}
	res.Fetched += m.size - before
	return c.cache.link(repo, res.Commit, file, m.etag)
}

func partSize(blob string) int64 {
	if st, err := os.Stat(blob + ".incomplete"); err == nil {
		return st.Size()
	}
	return 0
}

// pullOffline resolves ref from the cache alone.
func (c *Client) pullOffline(ref Ref) (*Result, error) {
	commit, ok := c.cache.ResolveRevision(ref.Repo, ref.Revision)
	if !ok {
		return nil, fmt.Errorf("%w: %s has no revision %q under %s (pull it once online, or unset HF_HUB_OFFLINE)", ErrOffline, ref.Repo, ref.Revision, c.cache.RepoDir(ref.Repo))
	}
	res := &Result{Ref: ref, Commit: commit, Dir: c.cache.snapshotDir(ref.Repo, commit)}
	files, err := c.cache.SnapshotFiles(ref.Repo, commit)
	if err != nil {
		return nil, fmt.Errorf("%w: %s at %s: %v", ErrOffline, ref.Repo, commit, err)
	}
	want, err := c.selectFiles(ref, files, "the cache (offline mode)")
	if err != nil {
		var ce *ChoiceError
		if errors.As(err, &ce) {
			ce.Problem += " (in the cache; offline mode)"
		}
		return nil, err
	}
	if want == nil {
		if !slices.Contains(files, "config.json") {
			return nil, fmt.Errorf("%w: %s at %s has neither a GGUF file nor config.json in the cache", ErrOffline, ref.Repo, commit)
		}
		want = aux(files)
		if slices.Contains(files, indexFile) {
			shards, err := readIndex(filepath.Join(res.Dir, indexFile))
			if err != nil {
				return nil, fmt.Errorf("hub: %s: %w", ref.Repo, err)
			}
			for _, s := range shards {
				if !slices.Contains(files, s) {
					return nil, fmt.Errorf("%w: %s at %s lacks shard %s", ErrOffline, ref.Repo, commit, s)
				}
			}
			want = append(append(want, indexFile), shards...)
		} else if slices.Contains(files, "model.safetensors") {
			want = append(want, "model.safetensors")
		}
	}
	c.log.Info("offline: using the cache", "repo", ref.Repo, "commit", commit)
	return res.finish(want), nil
}

func (r *Result) finish(files []string) *Result {
	r.Files = files
	r.Model = r.Dir
	if ms := GGUFModels(files); len(ms) == 1 && len(ms[0].Files()) == len(files) {
		// One GGUF file, or a split model's shards: the first is the model.
		r.Model = filepath.Join(r.Dir, filepath.FromSlash(ms[0].File))
	}
	return r
}

// readIndex lists the shards a model.safetensors.index.json names, once
// each, refusing paths that leave the snapshot.
func readIndex(p string) ([]string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", indexFile, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s has an empty weight_map", indexFile)
	}
	var out []string
	for _, f := range idx.WeightMap {
		if f != path.Clean(f) || strings.HasPrefix(f, "../") || strings.HasPrefix(f, "/") || f == ".." {
			return nil, fmt.Errorf("%s names shard %q outside the repository", indexFile, f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out, nil
}
