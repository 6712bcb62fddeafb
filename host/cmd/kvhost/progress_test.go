package main

import (
	"bytes"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestProgressLogLines: off a terminal, a download reports as log lines
// with bytes, percent, rate and ETA — at the start, every logEvery, and at
// the end — never as a redrawn bar.
func TestProgressLogLines(t *testing.T) {
	var logs bytes.Buffer
	p := newProgress(&bytes.Buffer{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if p.tty {
		t.Fatal("a buffer is not a terminal")
	}
	p.Begin("model-Q4_K_M.gguf", 10<<20, 2<<20)
	p.Add(1 << 20) // within logEvery: no line
	p.last = time.Now().Add(-logEvery - time.Millisecond)
	p.start = time.Now().Add(-2 * time.Second)
	p.Add(1 << 20) // 4 MiB of 10 after 2 s from 2 MiB: 1 MiB/s, 6 s left
	p.End("model-Q4_K_M.gguf", errors.New("connection reset"))
	out := logs.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || strings.Contains(out, "\r") {
		t.Fatalf("want resume, start, one periodic, final and the stop warning lines, got:\n%s", out)
	}
	if !strings.Contains(lines[0], "resuming download") || !strings.Contains(lines[0], "from_byte=2097152") {
		t.Errorf("resume line %q", lines[0])
	}
	if !regexp.MustCompile(`progress="4\.0 MiB / 10\.0 MiB \(40%\) (1\.0 MiB|102\d\.\d KiB)/s ETA 6s"`).MatchString(lines[2]) {
		t.Errorf("periodic line %q", lines[2])
	}
	if !strings.Contains(lines[4], "download stopped") || !strings.Contains(lines[4], "connection reset") {
		t.Errorf("stop line %q", lines[4])
	}
}

// TestProgressBar: on a terminal the bar redraws in place with the same
// figures and ends with a newline.
func TestProgressBar(t *testing.T) {
	var w bytes.Buffer
	p := &progress{w: &w, log: slog.New(slog.DiscardHandler), tty: true}
	p.Begin("a/very/long/path/to/some-model-file-Q4_K_M.gguf", 1000, 0)
	p.start = time.Now().Add(-time.Second)
	p.done = 500
	p.draw(false)
	p.End("x", nil)
	out := w.String()
	if !strings.HasPrefix(out, "\r\033[K…") || strings.Count(out, "\r\033[K") != 3 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("bar output %q", out)
	}
	if !regexp.MustCompile(`\[={12} {12}\] 500 B / 1000 B \(50%\) (500|49\d) B/s ETA 1s`).MatchString(out) {
		t.Errorf("half-way bar missing from %q", out)
	}
}
