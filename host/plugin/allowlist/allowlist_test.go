package allowlist

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	sumTest  = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // sha256("test")
	sumHello = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03" // sha256("hello\n")
)

func TestSum(t *testing.T) {
	if got := Sum([]byte("test")); got != sumTest {
		t.Fatalf("Sum(test) = %s", got)
	}
	if got := Sum([]byte("hello\n")); got != sumHello {
		t.Fatalf("Sum(hello) = %s", got)
	}
}

func TestReadFile(t *testing.T) {
	entries, err := ReadFile(filepath.Join("testdata", "allow.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{sumTest + " typical", sumHello}
	if strings.Join(entries, "|") != strings.Join(want, "|") {
		t.Fatalf("entries %q, want %q", entries, want)
	}
	l, err := New(entries)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Enabled() || l.Len() != 2 || l.SHA256s()[0] != sumHello {
		t.Fatalf("list %v", l.SHA256s())
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestCheck(t *testing.T) {
	l, err := New([]string{sumTest + "  typical", strings.ToUpper(sumHello)})
	if err != nil {
		t.Fatal(err)
	}
	other := Sum([]byte("other"))
	tests := []struct {
		name, sum, pinned string
		ok                bool
	}{
		{"typical", sumTest, "", true},
		{"typical", strings.ToUpper(sumTest), "", true},
		{"greedy", sumTest, "typical", false}, // pinned to another name
		{"greedy", sumHello, "", true},        // unpinned: any name
		{"anything", sumHello, "", true},
		{"typical", other, "", false},
	}
	for _, tc := range tests {
		err := l.Check(tc.name, tc.sum)
		if tc.ok {
			if err != nil {
				t.Errorf("%s %s: %v", tc.name, tc.sum[:8], err)
			}
			continue
		}
		var na *NotAllowedError
		if !errors.As(err, &na) || !errors.Is(err, ErrNotAllowed) || na.Plugin != tc.name || na.SHA256 != tc.sum || na.PinnedTo != tc.pinned {
			t.Errorf("%s %s: %v, want a *NotAllowedError", tc.name, tc.sum[:8], err)
			continue
		}
		if !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.sum) {
			t.Errorf("message %q does not name the plugin and digest", err)
		}
	}
	var none *List
	if none.Enabled() || none.Check("x", other) != nil || none.Len() != 0 || none.SHA256s() != nil {
		t.Fatal("nil list must allow everything")
	}
	if empty, err := New(nil); err != nil || empty.Enabled() {
		t.Fatalf("New(nil) = %v, %v", empty, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "no sha256 entries"},
		{"# only a comment\n\n", "no sha256 entries"},
		{"abc\n", "line 1: \"abc\": a sha256 is 64 hex digits, got 3"},
		{"\n" + strings.Repeat("zz", 32) + "\n", "line 2: "},
		{sumTest + " a b\n", "at most one name"},
		{sumTest + " a\n" + sumTest + " b\n", "line 2: sha256 " + sumTest + " listed for both \"a\" and \"b\""},
	}
	for _, tc := range tests {
		_, err := Parse(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	if _, err := New([]string{"nothex"}); err == nil {
		t.Fatal("New accepted a bad digest")
	}
	if _, err := New([]string{sumTest + " a", sumTest}); err == nil {
		t.Fatal("New accepted a digest pinned and unpinned")
	}
	// Same digest twice under the same pin is harmless.
	if l, err := New([]string{sumTest, sumTest}); err != nil || l.Len() != 1 {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestReadFileNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.txt")
	if err := os.WriteFile(p, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err %v does not name the file", err)
	}
}

// FuzzParse: Parse never panics, and whatever it accepts New accepts and
// round-trips: every entry's digest is then allowed under its pin.
func FuzzParse(f *testing.F) {
	b, _ := os.ReadFile(filepath.Join("testdata", "allow.txt"))
	f.Add(string(b))
	f.Add(sumTest + "\n")
	f.Add("#\n" + sumHello + " x # y\n")
	f.Fuzz(func(t *testing.T, in string) {
		entries, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		l, err := New(entries)
		if err != nil {
			t.Fatalf("Parse accepted %q but New refused %q: %v", in, entries, err)
		}
		for _, e := range entries {
			f := strings.Fields(e)
			name := "any"
			if len(f) == 2 {
				name = f[1]
			}
			if err := l.Check(name, f[0]); err != nil {
				t.Fatalf("entry %q refused: %v", e, err)
			}
		}
	})
}
