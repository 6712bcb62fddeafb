package plugin

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

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
