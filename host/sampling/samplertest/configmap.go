package samplertest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ConfigMapDir lays files out as the kubelet projects a ConfigMap volume
// (its atomic writer): every update is a new hidden directory
// ..<timestamp>/ holding all keys, the ..data symlink is switched to it
// with one rename, and each key is a top-level symlink <key> ->
// ..data/<key>. A reader never sees a half-written update; a watcher that
// compares the top-level entries' own Lstat finds nothing changed.
type ConfigMapDir struct {
	Dir string
	gen int
}

// Write publishes files (key → content) as the volume's next version:
// keys absent from files disappear, as when a ConfigMap loses a key.
func (c *ConfigMapDir) Write(files map[string][]byte) error {
	c.gen++
	ts := fmt.Sprintf("..%s.%04d", time.Now().UTC().Format("2006_01_02_15_04_05"), c.gen)
	if err := os.MkdirAll(filepath.Join(c.Dir, ts), 0o755); err != nil {
		return err
	}
	for k, b := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, ts, k), b, 0o644); err != nil {
			return err
		}
	}
	tmp := filepath.Join(c.Dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(c.Dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(c.Dir, "..data")); err != nil {
		return err
	}
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name()[0] == '.' {
			continue
		}
		if _, keep := files[e.Name()]; !keep {
			if err := os.Remove(filepath.Join(c.Dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for k := range files {
		link := filepath.Join(c.Dir, k)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			return err
		}
	}
	if old != "" && old != ts {
		return os.RemoveAll(filepath.Join(c.Dir, old))
	}
	return nil
}
