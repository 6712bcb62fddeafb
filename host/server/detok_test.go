package server

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDetokenizer(t *testing.T) {
	tests := []struct {
		name   string
		pushes []string
		want   []string // output of each push, then of flush
	}{
		{"ascii", []string{"ab", "c"}, []string{"ab", "c", ""}},
		{"two-byte split", []string{"\xc3", "\xa9!"}, []string{"", "é!", ""}},
		{"emoji over four tokens", []string{"\xf0", "\x9f", "\x98", "\x80"}, []string{"", "", "", "😀", ""}},
		{"complete then partial", []string{"a\xe2\x82", "\xac"}, []string{"a", "€", ""}},
		{"invalid byte at once", []string{"\xff", "a"}, []string{"\ufffd", "a", ""}},
		{"broken sequence", []string{"\xe2\x82", "A"}, []string{"", "\ufffd\ufffdA", ""}},
		{"incomplete at end", []string{"x\xf0\x9f"}, []string{"x", "\ufffd\ufffd"}},
		{"continuation byte alone", []string{"\x80"}, []string{"\ufffd", ""}},
		{"surrogate encoding is invalid", []string{"\xed\xa0\x80"}, []string{"\ufffd\ufffd\ufffd", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d detokenizer
			for i, p := range tc.pushes {
				if got := d.push([]byte(p)); got != tc.want[i] {
					t.Errorf("push %d (%q) = %q, want %q", i, p, got, tc.want[i])
				}
			}
			if got := d.flush(); got != tc.want[len(tc.want)-1] {
				t.Errorf("flush = %q, want %q", got, tc.want[len(tc.want)-1])
			}
		})
	}
}

// FuzzDetokenizer: any split of any bytes decodes, piece by piece, to valid
// UTF-8 that concatenates to Go's own decoding of the whole.
func FuzzDetokenizer(f *testing.F) {
	f.Add([]byte("héllo 😀"), uint64(0x5555))
	f.Add([]byte("\xf0\x9f\x98"), uint64(1))
	f.Add([]byte("\xe2\x82A\xff\xc3"), uint64(0xffff))
	f.Fuzz(func(t *testing.T, data []byte, splits uint64) {
		var d detokenizer
		var sb strings.Builder
		start := 0
		for i := 1; i <= len(data); i++ {
			if i == len(data) || splits&(1<<(uint(i)%64)) != 0 {
				out := d.push(data[start:i])
				if !utf8.ValidString(out) {
					t.Fatalf("push emitted invalid UTF-8 %q", out)
				}
				sb.WriteString(out)
				start = i
			}
			if d.pendingLen() >= utf8.UTFMax {
				t.Fatalf("holding %d bytes", d.pendingLen())
			}
		}
		sb.WriteString(d.flush())
		if want := string([]rune(string(data))); sb.String() != want {
			t.Fatalf("got %q, want %q", sb.String(), want)
		}
	})
}
