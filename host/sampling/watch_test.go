package sampling

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
	testwasm "github.com/kvhost/kvhost/host/plugin/wasmtest"
	"github.com/kvhost/kvhost/host/sampling/samplertest"
)

func pin(wasm []byte, name string) []byte { return []byte(allowlist.Sum(wasm) + "  " + name + "\n") }

// waitVersion polls until policy name serves version want.
func waitVersion(t *testing.T, r *Registry, name, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for infoOf(t, r, name).Version != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s serves %s, want %s", name, infoOf(t, r, name).Version, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchConfigMapVolume: a plugins folder that is a Kubernetes
// ConfigMap volume (keys are symlinks into ..data, updated by swapping
// ..data) delivers a new sampler version together with its pin in the
// allow-list file of the same ConfigMap; an update whose bytes are not
// pinned is refused and the serving version stays.
func TestWatchConfigMapVolume(t *testing.T) {
	base, _ := testwasm.Builtin("standard")
	v1, _ := samplertest.Variant(base, "7.0.1")
	v2, _ := samplertest.Variant(base, "7.0.2")
	v3, _ := samplertest.Variant(base, "7.0.3")
	cm := &samplertest.ConfigMapDir{Dir: t.TempDir()}
	if err := cm.Write(map[string][]byte{"standard.wasm": v1, "allowlist": pin(v1, "standard")}); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(cm.Dir, "allowlist")
	entries, err := allowlist.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, Options{AllowSHA256: entries, AllowlistFile: list})
	stop := r.Watch(context.Background(), cm.Dir, 10*time.Millisecond)
	defer stop()
	if got := infoOf(t, r, "standard"); got.Version != samplertest.Version(v1, "7.0.1") || got.Source != SourceFolder {
		t.Fatalf("after the first scan: %+v", got)
	}
	// The same key, new content, new pin: one atomic update.
	if err := cm.Write(map[string][]byte{"standard.wasm": v2, "allowlist": pin(v2, "standard")}); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, r, "standard", samplertest.Version(v2, "7.0.2"))
	// v3 is not pinned: refused, v2 keeps serving.
	if err := cm.Write(map[string][]byte{"standard.wasm": v3, "allowlist": pin(v2, "standard")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := infoOf(t, r, "standard").Version; got != samplertest.Version(v2, "7.0.2") {
		t.Fatalf("an unpinned update replaced the serving version: %s", got)
	}
	// The key removed: the built-in returns.
	if err := cm.Write(map[string][]byte{"allowlist": pin(v2, "standard")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for infoOf(t, r, "standard").Source != SourceBuiltin {
		if time.Now().After(deadline) {
			t.Fatalf("built-in not restored: %+v", infoOf(t, r, "standard"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchAllowlistChangeRetriesRefused: a folder file refused for want
// of a pin loads when only the allow-list file changes to pin it; a list
// that no longer parses is refused and the one in force stays.
func TestWatchAllowlistChangeRetriesRefused(t *testing.T) {
	base, _ := testwasm.Builtin("standard")
	v1, _ := samplertest.Variant(base, "6.0.1")
	v2, _ := samplertest.Variant(base, "6.0.2")
	dir, listDir := t.TempDir(), t.TempDir()
	list := filepath.Join(listDir, "allowlist")
	write := func(p string, b []byte) {
		t.Helper()
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(list, pin(v1, "standard"))
	write(filepath.Join(dir, "standard.wasm"), v2)
	entries, _ := allowlist.ReadFile(list)
	r := newRegistry(t, Options{AllowSHA256: entries, AllowlistFile: list})
	stop := r.Watch(context.Background(), dir, 10*time.Millisecond)
	defer stop()
	if got := infoOf(t, r, "standard"); got.Source != SourceBuiltin {
		t.Fatalf("an unpinned folder file loaded: %+v", got)
	}
	write(list, []byte("not a digest\n"))
	time.Sleep(100 * time.Millisecond)
	if err := r.Swap(context.Background(), "standard", v1, SourceUpload); err != nil {
		t.Fatalf("a broken allow-list file replaced the list in force: %v", err)
	}
	write(list, append(pin(v1, "standard"), pin(v2, "standard")...))
	waitVersion(t, r, "standard", samplertest.Version(v2, "6.0.2"))
}
