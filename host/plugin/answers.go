package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Recalled answers (Config.RecallAnswers). A configurator's configure and
// size are pure functions of its bytes and their input: the runtime gives
// a guest no clock, no randomness and no files (WASI here is
// deterministic), and the host already refuses a configurator that
// declares different pools for the same input. So the answer a version
// gave to an exact input is the answer it will give again, and is
// recorded beside the compilation cache, keyed by the sha256 of the
// module's bytes, the export and the sha256 of the exact input (the
// configure JSON — model config and host facts — or the layout's input
// with size's three arguments). A later start that asks the same version
// the same question reads the answer instead of loading the module
// (0.25–0.33 s of decoding, validating and instrumenting a 3.5 MB Go
// guest even on a compile-cache hit, and ~13 MiB of compiled code while
// it is loaded). The declaration stays the configurator's: only its own
// answers are recalled, each checked again as a fresh answer is (pools
// well formed; units within the caps, in whole pages, fitting what is
// available), and a question it was never asked loads it. Answers are
// trusted as the records and the compiled code are (the embedder guards
// the directory); a failed call records nothing.

// answersDir is the folder of recorded answers, under metaDir.
const answersDir = "answers"

// maxAnswers bounds the recorded answers (each a few hundred bytes to a
// few KiB): recording one more removes the least recently used beyond it
// (recall marks an answer used), so a host that sees many models, host
// facts or plugin versions keeps a folder of bounded size.
const maxAnswers = 2048

// answerKey names the answer of the version with bytes sha to export
// called with input.
func answerKey(sha, export string, input []byte) string {
	h := sha256.New()
	h.Write([]byte(export))
	h.Write([]byte{0})
	h.Write(input)
	return sha + "-" + hex.EncodeToString(h.Sum(nil))
}

func (c *diskCache) answerPath(key string) string {
	return filepath.Join(c.dir, metaDir, answersDir, key+".json")
}

// recall reads the answer recorded under key into v (false when there is
// none, or it does not decode; nil-safe: a nil cache recalls nothing).
func (c *diskCache) recall(key string, v any) bool {
	if c == nil {
		return false
	}
	p := c.answerPath(key)
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, v) != nil {
		return false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // used now: evicted last
	return true
}

// record writes an answer atomically (temp file, rename); nil-safe.
func (c *diskCache) record(key string, v any) {
	if c == nil {
		return
	}
	b, err := json.Marshal(v)
	if err == nil {
		dir := filepath.Join(c.dir, metaDir, answersDir)
		var f *os.File
		if err = os.MkdirAll(dir, 0o755); err == nil {
			if f, err = os.CreateTemp(dir, key+".*.tmp"); err == nil {
				_, err = f.Write(b)
				err = errors.Join(err, f.Close())
				if err == nil {
					err = os.Rename(f.Name(), c.answerPath(key))
				}
				if err != nil {
					_ = os.Remove(f.Name())
				}
			}
		}
	}
	if err != nil {
		c.log.Warn("plugin cache: recording a configurator's answer", "key", key, "err", err)
		return
	}
	c.evictAnswers(maxAnswers)
}

// evictAnswers removes the least recently used answers until at most
// keep are left (a file being written, *.tmp, is not one; another process
// sharing the directory may race to the same removal, which is harmless).
func (c *diskCache) evictAnswers(keep int) {
	entries, err := os.ReadDir(filepath.Join(c.dir, metaDir, answersDir))
	if err != nil || len(entries) <= keep {
		return
	}
	type answer struct {
		name string
		mod  time.Time
	}
	var all []answer
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		if info, err := e.Info(); err == nil {
			all = append(all, answer{e.Name(), info.ModTime()})
		}
	}
	if len(all) <= keep {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.Before(all[j].mod) })
	for _, a := range all[:len(all)-keep] {
		_ = os.Remove(filepath.Join(c.dir, metaDir, answersDir, a.name))
	}
	c.log.Info("plugin cache: evicted recorded answers", "removed", len(all)-keep, "kept", keep)
}
