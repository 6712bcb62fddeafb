package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nodeClientDir installs testdata/openai-node's pinned packages (the
// official openai client and zod) into a per-user cache directory, once
// per version, and returns it with the client script copied in. The test
// skips, saying why, when node or npm is missing or the npm registry is
// unreachable.
func nodeClientDir(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (the openai client test needs node and npm)", tool)
		}
	}
	pkg, err := os.ReadFile(filepath.Join("testdata", "openai-node", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "openai-node", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "kvhost", "openai-node")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(filepath.Join(dir, "package.json"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil || !bytes.Equal(old, pkg) {
		if err := os.WriteFile(filepath.Join(dir, "package.json"), pkg, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(filepath.Join(dir, "package.json"))
			t.Skipf("skipping: npm install of the openai client failed (registry unreachable?): %v\n%s", err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOpenAINodeClient: the official openai npm client parses structured
// output with a zod schema, assembles streamed tool calls with its helpers,
// and gets calls with tool_choice "required", against a random-weight
// model served with output constraints.
func TestOpenAINodeClient(t *testing.T) {
	dir := nodeClientDir(t)
	ts := constrainedServer(t, tinyModel(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KVHOST_URL="+ts.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, out)
	}
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if !strings.HasPrefix(last, "ok ") {
		t.Fatalf("client did not finish: %s", out)
	}
	t.Log(last)
}
