package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cache is a huggingface_hub cache directory (HF_HUB_CACHE). Its methods
// touch only the filesystem.
type Cache struct{ Dir string }

// repoFolder is huggingface_hub's folder name of a model repository.
func repoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// RepoDir is the repository's folder in the cache.
func (c Cache) RepoDir(repo string) string { return filepath.Join(c.Dir, repoFolder(repo)) }

func (c Cache) blobPath(repo, etag string) string {
	return filepath.Join(c.RepoDir(repo), "blobs", etag)
}

func (c Cache) snapshotDir(repo, commit string) string {
	return filepath.Join(c.RepoDir(repo), "snapshots", commit)
}

func (c Cache) lockPath(repo, etag string) string {
	return filepath.Join(c.Dir, ".locks", repoFolder(repo), etag+".lock")
}

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ResolveRevision turns a revision into the commit the cache recorded for
// it (refs/REV); a commit hash is itself. ok is false when the cache has no
// such ref.
func (c Cache) ResolveRevision(repo, rev string) (commit string, ok bool) {
	if rev == "" {
		rev = DefaultRevision
	}
	if commitHash.MatchString(rev) {
		return rev, true
	}
	b, err := os.ReadFile(filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", false
	}
	commit = strings.TrimSpace(string(b))
	return commit, commitHash.MatchString(commit)
}

// writeRef records that rev points at commit (nothing for a commit hash).
func (c Cache) writeRef(repo, rev, commit string) error {
	if rev == "" {
		rev = DefaultRevision
	}
	if rev == commit {
		return nil
	}
	p := filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(rev))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	// huggingface_hub writes the bare hash, no newline.
	return writeFileAtomic(p, []byte(commit))
}

// SnapshotFiles lists the files of a snapshot (paths relative to it,
// slash-separated) whose links resolve to a blob.
func (c Cache) SnapshotFiles(repo, commit string) ([]string, error) {
	dir := c.snapshotDir(repo, commit)
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if _, err := os.Stat(p); err != nil {
			return nil // a dangling link: not a usable file
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(out)
	return out, err
}

// link makes snapshots/COMMIT/PATH a relative symlink to blobs/ETAG, as
// huggingface_hub does (relative, so a moved cache keeps working).
func (c Cache) link(repo, commit, file, etag string) error {
	dst := filepath.Join(c.snapshotDir(repo, commit), filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(dst), c.blobPath(repo, etag))
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return nil
	}
	tmp := dst + ".kvhost-link"
	_ = os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

// lock takes the download lock of one blob (the flock huggingface_hub's
// filelock takes on the same file, so a Python download of the same blob
// waits for ours and the other way round). unlock releases it.
func (c Cache) lock(repo, etag string) (unlock func(), err error) {
	p := c.lockPath(repo, etag)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("hub: lock %s: %w", p, err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// CachedRepo is one repository in the cache, as List reports it.
type CachedRepo struct {
	Repo      string            `json:"repo"`
	Dir       string            `json:"dir"`
	Refs      map[string]string `json:"refs"`      // revision → commit
	Snapshots []Snapshot        `json:"snapshots"` // newest first
	Bytes     int64             `json:"bytes"`     // blobs on disk, partial downloads included
	Partial   int64             `json:"partial"`   // bytes of .incomplete files
	Modified  time.Time         `json:"modified"`
}

// Snapshot is one commit's files in the cache.
type Snapshot struct {
	Commit string   `json:"commit"`
	Dir    string   `json:"dir"`
	Files  []string `json:"files"`
	// Models are its GGUF models, a split model's shards as one.
	Models []GGUFModel `json:"models,omitempty"`
}

// List reports every model repository in the cache, sorted by id. A missing
// cache directory is an empty list.
func (c Cache) List() ([]CachedRepo, error) {
	ents, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	var out []CachedRepo
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "models--") {
			continue
		}
		repo := strings.Replace(strings.TrimPrefix(name, "models--"), "--", "/", 1)
		r, err := c.describe(repo)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b CachedRepo) int { return strings.Compare(a.Repo, b.Repo) })
	return out, nil
}

func (c Cache) describe(repo string) (CachedRepo, error) {
	r := CachedRepo{Repo: repo, Dir: c.RepoDir(repo), Refs: map[string]string{}}
	refs := filepath.Join(r.Dir, "refs")
	_ = filepath.WalkDir(refs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(refs, p)
		if commit, ok := c.ResolveRevision(repo, filepath.ToSlash(rel)); ok {
			r.Refs[filepath.ToSlash(rel)] = commit
		}
		return nil
	})
	blobs, _ := os.ReadDir(filepath.Join(r.Dir, "blobs"))
	for _, b := range blobs {
		info, err := b.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		r.Bytes += info.Size()
		if strings.HasSuffix(b.Name(), ".incomplete") {
			r.Partial += info.Size()
		}
		if info.ModTime().After(r.Modified) {
			r.Modified = info.ModTime()
		}
	}
	snaps, _ := os.ReadDir(filepath.Join(r.Dir, "snapshots"))
	for _, s := range snaps {
		if !s.IsDir() {
			continue
		}
		files, err := c.SnapshotFiles(repo, s.Name())
		if err != nil {
			return r, err
		}
		info, _ := s.Info()
		r.Snapshots = append(r.Snapshots, Snapshot{Commit: s.Name(), Dir: c.snapshotDir(repo, s.Name()), Files: files, Models: GGUFModels(files)})
		if info != nil && info.ModTime().After(r.Modified) {
			r.Modified = info.ModTime()
		}
	}
	slices.SortFunc(r.Snapshots, func(a, b Snapshot) int {
		ia, _ := os.Stat(a.Dir)
		ib, _ := os.Stat(b.Dir)
		if ia == nil || ib == nil {
			return strings.Compare(a.Commit, b.Commit)
		}
		return ib.ModTime().Compare(ia.ModTime())
	})
	return r, nil
}

// Remove deletes a repository from the cache (blobs, snapshots, refs, partial
// downloads and its locks) and returns the bytes freed. A repository not in
// the cache is an error naming the cache.
func (c Cache) Remove(repo string) (int64, error) {
	dir := c.RepoDir(repo)
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("hub: %s is not in the cache %s", repo, c.Dir)
	}
	r, err := c.describe(repo)
	if err != nil {
		return 0, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("hub: %w", err)
	}
	_ = os.RemoveAll(filepath.Join(c.Dir, ".locks", repoFolder(repo)))
	return r.Bytes, nil
}

// writeFileAtomic writes b to p through a temporary file and a rename.
func writeFileAtomic(p string, b []byte) error {
	tmp := p + ".kvhost-tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}
