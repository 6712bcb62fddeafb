package allowlist

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// ErrNotAllowed matches (errors.Is) every *NotAllowedError.
var ErrNotAllowed = errors.New("allowlist: plugin not in the sha256 allow-list")

// NotAllowedError is a plugin refused because its sha256 is not listed
// (or is listed for another name). Admin routes answer it with 403.
type NotAllowedError struct {
	Plugin string
	SHA256 string
	// PinnedTo is the name the digest is listed under when it is listed
	// for another plugin ("" when it is not listed at all).
	PinnedTo string
}

func (e *NotAllowedError) Error() string {
	if e.PinnedTo != "" {
		return fmt.Sprintf("allowlist: plugin %q (sha256 %s) refused: the allow-list pins these bytes to plugin %q", e.Plugin, e.SHA256, e.PinnedTo)
	}
	return fmt.Sprintf("allowlist: plugin %q (sha256 %s) refused: not in the sha256 allow-list (add the line %q to trust it)", e.Plugin, e.SHA256, e.SHA256+"  "+e.Plugin)
}

// Is makes errors.Is(err, ErrNotAllowed) hold.
func (e *NotAllowedError) Is(target error) bool { return target == ErrNotAllowed }

// List is a parsed allow-list: digest → pinned name ("" = any name).
// Immutable after New; safe for concurrent use.
type List struct {
	pins map[string]string
}

// New parses entries, each "<hex sha256>" or "<hex sha256> <name>"
// (surrounding blanks ignored). No entries give a nil *List (allow all).
// A digest listed twice under different names is an error.
func New(entries []string) (*List, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	l := &List{pins: make(map[string]string, len(entries))}
	for i, e := range entries {
		sum, name, err := parseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("allowlist: entry %d: %w", i+1, err)
		}
		if err := l.add(sum, name); err != nil {
			return nil, fmt.Errorf("allowlist: entry %d: %w", i+1, err)
		}
	}
	return l, nil
}

func (l *List) add(sum, name string) error {
	if prev, ok := l.pins[sum]; ok && prev != name {
		return fmt.Errorf("sha256 %s listed for both %q and %q", sum, prev, name)
	}
	l.pins[sum] = name
	return nil
}

// parseEntry splits one entry (no comment) into a lowercase digest and an
// optional name.
func parseEntry(s string) (sum, name string, err error) {
	f := strings.Fields(s)
	switch len(f) {
	case 1, 2:
	case 0:
		return "", "", errors.New("empty entry")
	default:
		return "", "", fmt.Errorf("%q: want a sha256 and at most one name", s)
	}
	sum = strings.ToLower(f[0])
	if len(sum) != 2*sha256.Size {
		return "", "", fmt.Errorf("%q: a sha256 is %d hex digits, got %d", f[0], 2*sha256.Size, len(sum))
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return "", "", fmt.Errorf("%q is not hex", f[0])
	}
	if len(f) == 2 {
		name = f[1]
	}
	return sum, name, nil
}

// Parse reads the list file format (see the package comment) and returns
// the entries in canonical form ("<lowercase hex>" or "<hex> <name>"),
// for New or the registries' AllowSHA256 options. Errors name the line.
// A file with no entries is an error.
func Parse(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	var out []string
	seen := &List{pins: map[string]string{}}
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		sum, name, err := parseEntry(line)
		if err == nil {
			err = seen.add(sum, name)
		}
		if err != nil {
			return nil, fmt.Errorf("allowlist: line %d: %w", n, err)
		}
		out = append(out, strings.TrimSpace(sum+" "+name))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("allowlist: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("allowlist: no sha256 entries (an empty allow-list file would trust every plugin; remove the flag for that)")
	}
	return out, nil
}

// ReadFile parses the allow-list file at path (see Parse).
func ReadFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("allowlist: %w", err)
	}
	defer f.Close()
	out, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return out, nil
}

// Enabled reports whether l restricts anything.
func (l *List) Enabled() bool { return l != nil && len(l.pins) > 0 }

// Check returns nil when plugin name may load bytes with the hex digest
// sum, else a *NotAllowedError. A disabled list allows everything.
func (l *List) Check(name, sum string) error {
	if !l.Enabled() {
		return nil
	}
	pin, ok := l.pins[strings.ToLower(sum)]
	switch {
	case !ok:
		return &NotAllowedError{Plugin: name, SHA256: sum}
	case pin != "" && pin != name:
		return &NotAllowedError{Plugin: name, SHA256: sum, PinnedTo: pin}
	}
	return nil
}

// Len is the number of listed digests.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.pins)
}

// SHA256s returns the listed digests, sorted.
func (l *List) SHA256s() []string {
	if l == nil {
		return nil
	}
	out := make([]string, 0, len(l.pins))
	for s := range l.pins {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Sum returns the hex sha256 of wasm, as the list stores it.
func Sum(wasm []byte) string {
	s := sha256.Sum256(wasm)
	return hex.EncodeToString(s[:])
}
