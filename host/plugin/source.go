package plugin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/kvhost/kvhost/host/plugin/fuel"
)

// Source is where a plugin's bytes came from. A plugins folder file's
// bytes are read once, when the folder is listed; a built-in's are read
// from the embedded set on each Wasm call and not held (five Go
// configurators are 17 MiB the heap would otherwise keep for nothing: a
// warm start asks their records, not their bytes).
type Source struct {
	Name   string // file name without .wasm
	Origin string // "builtin" or the file's path
	wasm   []byte // a folder file's bytes
	fsys   fs.FS  // a built-in's embedded set
	file   string // its name there
	sha    string // its listed sha256 (SumsFile), "" when not listed
}

// Builtin reports whether the source is one of the embedded plugins.
func (s Source) Builtin() bool { return s.Origin == "builtin" }

// Wasm returns the plugin's bytes (a built-in's read now, a copy the
// caller owns).
func (s Source) Wasm() ([]byte, error) {
	if s.fsys == nil {
		return s.wasm, nil
	}
	b, err := fs.ReadFile(s.fsys, s.file)
	if err != nil {
		return nil, fmt.Errorf("plugin: built-in %s: %w", s.file, err)
	}
	if err := s.checkSum(b); err != nil {
		return nil, err
	}
	return b, nil
}

// sum is the hex sha256 of the plugin's bytes: a built-in's listed sum
// (SumsFile; its bytes are not read), else hashed as a stream (a
// built-in's bytes are not copied onto the heap).
func (s Source) sum() (string, int64, error) {
	if s.fsys == nil {
		return sum256(s.wasm), int64(len(s.wasm)), nil
	}
	if s.sha != "" {
		st, err := fs.Stat(s.fsys, s.file)
		if err != nil {
			return "", 0, fmt.Errorf("plugin: built-in %s: %w", s.file, err)
		}
		return s.sha, st.Size(), nil
	}
	f, err := s.fsys.Open(s.file)
	if err != nil {
		return "", 0, fmt.Errorf("plugin: built-in %s: %w", s.file, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("plugin: built-in %s: %w", s.file, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// exports reads a built-in's exported function names from a stream: the
// sections before the export section are skipped unread, and the export
// section alone is parsed (fuel.Exports, on the header and that section).
// A module with none exports nothing. Loading checks the whole module.
func (s Source) exports() ([]string, error) {
	f, err := s.fsys.Open(s.file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	head := make([]byte, 8)
	if _, err := io.ReadFull(br, head); err != nil {
		return fuel.Exports(head)
	}
	for {
		id, err := br.ReadByte()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		size, err := binary.ReadUvarint(br)
		if err != nil || size > 1<<30 {
			return nil, fmt.Errorf("plugin: built-in %s: a malformed section header", s.file)
		}
		switch {
		case id == 7: // the export section
			body := make([]byte, size)
			if _, err := io.ReadFull(br, body); err != nil {
				return nil, err
			}
			mod := binary.AppendUvarint(append(append([]byte(nil), head...), id), size)
			return fuel.Exports(append(mod, body...))
		case id > 7 && id != 0: // sections that follow the exports: there are none
			return nil, nil
		}
		if _, err := io.CopyN(io.Discard, br, int64(size)); err != nil {
			return nil, err
		}
	}
}

// SumsFile is the file in a built-in set that lists the sha256 of each
// module (sha256sum's format: "<hex>  <file>", scripts/sum-builtins.sh
// writes it after make plugins). Records and recalled answers are keyed by
// a module's sha256, and hashing a 3.5 MB Go configurator reads every page
// of it: hashed at each start, the five built-in configurators were 17
// MiB of the binary resident for nothing. With the sums a warm start reads
// no built-in's bytes at all; the bytes are checked against their sum
// whenever they are read (Source.Wasm), so a stale list is refused, never
// trusted for the module it no longer describes.
const SumsFile = "SHA256SUMS"

// readSums parses fsys's SumsFile into file name → hex sha256; an fs
// without one has no sums (its modules are hashed as a stream).
func readSums(fsys fs.FS) (map[string]string, error) {
	b, err := fs.ReadFile(fsys, SumsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin: built-in %s: %w", SumsFile, err)
	}
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		// "<64 hex> <' ' or '*'><file name>"
		if len(line) < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*') {
			return nil, fmt.Errorf("plugin: built-in %s line %d: want \"<sha256 hex>  <file>\", have %q", SumsFile, n, line)
		}
		sum, file := line[:64], line[66:]
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("plugin: built-in %s line %d: sha256 %q is not hex", SumsFile, n, sum)
		}
		sums[file] = strings.ToLower(sum)
	}
	return sums, sc.Err()
}

// checkSum refuses a built-in's bytes that are not what its listed sum
// says (a module rebuilt without scripts/sum-builtins.sh).
func (s Source) checkSum(b []byte) error {
	if s.sha == "" {
		return nil
	}
	if got := sum256(b); got != s.sha {
		return fmt.Errorf("plugin: built-in %s has sha256 %s, but %s lists %s: rebuild the plugins (make plugins)", s.file, got, SumsFile, s.sha)
	}
	return nil
}
