package plugin

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/kvhost/kvhost"

// pluginImportProblem says what is wrong with one import of a Go file under
// tree ("plugins" or "configurators"), or "" when it is allowed: the
// standard library, the sdk (the plugin contract), or a helper package of
// the same tree (configurators/layout). Never the host.
func pluginImportProblem(tree, path string) string {
	first, _, _ := strings.Cut(path, "/")
	switch {
	case !strings.Contains(first, "."):
		return "" // standard library
	case path == modulePath+"/sdk" || strings.HasPrefix(path, modulePath+"/sdk/"):
		return ""
	case strings.HasPrefix(path, modulePath+"/"+tree+"/"):
		return ""
	}
	return "imports " + path + ": a plugin may import only sdk/... and the standard library"
}

// TestPluginSourcesImportOnlySDK: every Go package under plugins/ and
// configurators/ imports nothing but sdk/... and the standard library
// (and helpers of its own tree), so a plugin builds against the contract
// alone and never against the host; every C sampler includes only the C
// SDK's headers (sdk/sampler/c) and the C library's.
func TestPluginSourcesImportOnlySDK(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sdkHeaders, err := filepath.Glob(filepath.Join(root, "sdk", "sampler", "c", "*.h"))
	if err != nil || len(sdkHeaders) == 0 {
		t.Fatalf("no C SDK headers found: %v", err)
	}
	headers := map[string]bool{}
	for _, h := range sdkHeaders {
		headers[filepath.Base(h)] = true
	}
	goFiles, cFiles := 0, 0
	for _, tree := range []string{"plugins", "configurators"} {
		err := filepath.WalkDir(filepath.Join(root, tree), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			switch filepath.Ext(path) {
			case ".go":
				goFiles++
				f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
				if err != nil {
					t.Errorf("%s: %v", rel, err)
					return nil
				}
				for _, imp := range f.Imports {
					p, _ := strconv.Unquote(imp.Path.Value)
					if problem := pluginImportProblem(tree, p); problem != "" {
						t.Errorf("%s %s", rel, problem)
					}
				}
			case ".c", ".h":
				cFiles++
				file, err := os.Open(path)
				if err != nil {
					return err
				}
				defer file.Close()
				sc := bufio.NewScanner(file)
				for line := 1; sc.Scan(); line++ {
					inc, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "#include")
					inc = strings.TrimSpace(inc)
					if ok && strings.HasPrefix(inc, `"`) {
						if name := strings.Trim(inc, `"`); !headers[name] {
							t.Errorf("%s:%d includes %q: a C sampler may include only the SDK's headers (sdk/sampler/c) and the C library's", rel, line, name)
						}
					}
				}
				return sc.Err()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if goFiles < 10 || cFiles < 7 {
		t.Fatalf("checked only %d Go and %d C files: is the tree where the test thinks?", goFiles, cFiles)
	}
	// The rule refuses what it must.
	for _, bad := range []string{modulePath + "/host/plugin", modulePath + "/host/sampling", "golang.org/x/sys/unix", modulePath + "/plugins/x"} {
		if pluginImportProblem("configurators", bad) == "" {
			t.Errorf("%s allowed in a configurator", bad)
		}
	}
}
