package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/kvhost/kvhost/internal/testmodels"
)

// There is no container engine here or in CI, so the image is checked by
// parts: the Dockerfile parses with BuildKit's own parser and holds what
// the image needs, .dockerignore keeps the context right under the real
// matcher, and the binary the image copies (make static) builds, is static
// and carries its version.

type stage struct {
	from, name string
	instrs     []*parser.Node
}

func (s stage) all(cmd string) []*parser.Node {
	var out []*parser.Node
	for _, n := range s.instrs {
		if strings.EqualFold(n.Value, cmd) {
			out = append(out, n)
		}
	}
	return out
}

func args(n *parser.Node) []string {
	var out []string
	for a := n.Next; a != nil; a = a.Next {
		out = append(out, a.Value)
	}
	return out
}

func readDockerfile(t *testing.T, root string) []stage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Dockerfile does not parse: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile warning: %s", w.Short)
	}
	var stages []stage
	for _, n := range res.AST.Children {
		if strings.EqualFold(n.Value, "from") {
			a := args(n)
			s := stage{from: a[0]}
			if len(a) == 3 && strings.EqualFold(a[1], "as") {
				s.name = a[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, n)
		}
	}
	return stages
}

func TestDockerfile(t *testing.T) {
	root, err := testmodels.Root()
	if err != nil {
		t.Fatal(err)
	}
	stages := readDockerfile(t, root)
	if len(stages) != 2 || stages[0].name != "build" || !strings.HasPrefix(stages[0].from, "golang:") {
		t.Fatalf("want a golang build stage named build and a runtime stage; got %+v", stages)
	}
	build, final := stages[0], stages[1]
	var buildRun string
	for _, n := range build.all("run") {
		buildRun += n.Original + "\n"
	}
	for _, want := range []string{"wasi-libc", "clang", "make plugins static"} {
		if !strings.Contains(buildRun, want) {
			t.Errorf("the build stage never runs %q (the C samplers need the wasm toolchain; the binary is make static)", want)
		}
	}
	if strings.HasPrefix(final.from, "golang") || !strings.Contains(final.from, "static") {
		t.Errorf("runtime base %q: want a static (distroless) image, not the toolchain", final.from)
	}
	users := final.all("user")
	if len(users) == 0 {
		t.Fatal("the runtime stage sets no USER (it would run as root)")
	}
	if u := strings.SplitN(args(users[len(users)-1])[0], ":", 2)[0]; u == "root" || u == "0" {
		t.Errorf("runtime USER %q is root", u)
	}
	hc := final.all("healthcheck")
	if len(hc) != 1 || !strings.Contains(hc[0].Original, "/usr/local/bin/kvhost") || !strings.Contains(hc[0].Original, `"health"`) {
		t.Errorf("HEALTHCHECK: %v; want CMD kvhost health (GET /health)", hc)
	}
	var volumes, env, copies, entry string
	for _, n := range final.all("volume") {
		volumes += strings.Join(args(n), " ")
	}
	for _, n := range final.all("env") {
		env += strings.Join(args(n), " ") + " "
	}
	for _, n := range final.all("copy") {
		copies += strings.Join(n.Flags, " ") + " " + strings.Join(args(n), " ") + "\n"
	}
	for _, n := range final.all("entrypoint") {
		entry = strings.Join(args(n), " ")
	}
	if !strings.Contains(volumes, "/models") || !strings.Contains(volumes, "/cache") {
		t.Errorf("VOLUME %q: want the models volume and the cache", volumes)
	}
	if !strings.Contains(env, "HF_HOME /cache/") || !strings.Contains(env, "KVHOST_ADDR 0.0.0.0:") || !strings.Contains(env, "KVHOST_MODEL /models/stories260K.gguf") {
		t.Errorf("ENV %q: want HF_HOME under /cache, KVHOST_ADDR on all interfaces, the bundled model", env)
	}
	if !strings.Contains(copies, "--from=build /out/kvhost /usr/local/bin/kvhost") || !strings.Contains(copies, "LICENSE NOTICE") {
		t.Errorf("COPY:\n%s", copies)
	}
	if entry != "/usr/local/bin/kvhost" {
		t.Errorf("ENTRYPOINT %q", entry)
	}
	for _, n := range final.all("expose") {
		if args(n)[0] != "8080" {
			t.Errorf("EXPOSE %v", args(n))
		}
	}
	if len(final.all("expose")) == 0 {
		t.Error("no EXPOSE")
	}
	if path, err := exec.LookPath("hadolint"); err == nil {
		out, err := exec.Command(path, filepath.Join(root, "Dockerfile")).CombinedOutput()
		if err != nil {
			t.Errorf("hadolint: %v\n%s", err, out)
		}
	} else {
		t.Log("hadolint is not installed; BuildKit's parser and the checks above stand in for it")
	}
}

func TestDockerignore(t *testing.T) {
	root, err := testmodels.Root()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for path, excluded := range map[string]bool{
		"go.mod": false, "host/cmd/kvhost/main.go": false, "models/stories260K.gguf": false, "models/README.md": false,
		"LICENSE": false, "NOTICE": false, "web/static/vendor/chart.umd.min.js": false, "scripts/build-samplers.sh": false,
		".git/config": true, "bin/kvhost": true, "models/demo-small-f32.gguf": true, "web/node_modules/chart.js/x.js": true,
		"host/plugin/builtin/wasm/mha.wasm": true, "artifacts/shot.png": true, "dist/kvhost-v1-linux-amd64": true,
	} {
		got, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != excluded {
			t.Errorf(".dockerignore: %s excluded=%v, want %v", path, got, excluded)
		}
	}
	// Every file the Dockerfile copies from the context exists.
	for _, p := range []string{"models/stories260K.gguf", "models/README.md", "LICENSE", "NOTICE", "go.mod", "go.sum"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the image copies %s: %v", p, err)
		}
	}
}

// TestStaticBinary builds what the image copies — `make static`, cgo off —
// and checks it is statically linked and carries the version it was given.
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the static build in -short mode")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("skipping: make is not installed")
	}
	root, err := testmodels.Root()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "kvhost")
	cmd := exec.Command("make", "-s", "static", "STATIC_OUT="+out, "VERSION=v0.0.0-imagetest")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make static: %v\n%s", err, b)
	}
	ef, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	v, err := exec.Command(out, "--version").Output()
	if err != nil || !strings.HasPrefix(string(v), "kvhost v0.0.0-imagetest ") {
		t.Errorf("--version: %q, %v", v, err)
	}
	help, _ := exec.Command(out, "--help").Output()
	if !slices.ContainsFunc(strings.Split(string(help), "\n"), func(l string) bool { return strings.Contains(l, "kvhost health") }) {
		t.Errorf("the image's HEALTHCHECK command is missing from --help")
	}
}
