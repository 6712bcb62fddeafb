package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

const (
	release   = "demo"
	namespace = "llm"
)

// repoRoot is the kvhost repository (this module lives in deploy/test).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "helm", "kvhost", "Chart.yaml")); err != nil {
		t.Fatalf("not in the kvhost repository: %v", err)
	}
	return root
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "deploy", "helm", "kvhost") }

func loadChart(t testing.TB) *chartv2.Chart {
	t.Helper()
	c, err := loader.LoadDir(chartDir(t))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// renderRaw renders the chart as `helm template demo deploy/helm/kvhost -n llm
// -f values` does and returns the manifests by template file.
func renderRaw(t testing.TB, vals map[string]any) (map[string]string, error) {
	t.Helper()
	c := loadChart(t)
	rv, err := util.ToRenderValues(c, vals, common.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, rv)
}

// scheme knows every kind the chart may render.
func scheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		rbacv1.AddToScheme, gwv1.Install, infv1.Install} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// strictDecoder decodes YAML into the registered typed structs and refuses
// unknown fields, duplicate fields and fields of the wrong case
// (apimachinery's strict mode, as kubectl --validate=strict).
func strictDecoder(t testing.TB) runtime.Decoder {
	s := scheme(t)
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: true})
}

// rendered is one release: every object, decoded, by kind and name.
type rendered struct {
	objs  []runtime.Object
	byKey map[string]runtime.Object // "Kind/name"
	notes string
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// render renders vals and decodes every document strictly; any error fails
// the test.
func render(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	out, err := renderRaw(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	dec := strictDecoder(t)
	r := rendered{byKey: map[string]runtime.Object{}}
	files := make([]string, 0, len(out))
	for f := range out {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if strings.HasSuffix(f, "NOTES.txt") {
			r.notes = out[f]
			continue
		}
		for i, doc := range docSep.Split(out[f], -1) {
			if isEmptyDoc(doc) {
				continue
			}
			obj, gvk, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s document %d does not decode strictly: %v\n%s", f, i, err, doc)
			}
			name := objectName(t, obj)
			key := gvk.Kind + "/" + name
			if _, dup := r.byKey[key]; dup {
				t.Fatalf("%s rendered twice", key)
			}
			r.byKey[key] = obj
			r.objs = append(r.objs, obj)
		}
	}
	return r
}

func isEmptyDoc(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func objectName(t *testing.T, obj runtime.Object) string {
	t.Helper()
	m, ok := obj.(interface{ GetName() string })
	if !ok || m.GetName() == "" {
		t.Fatalf("%T has no name", obj)
	}
	return m.GetName()
}

// get returns the object of kind and name, typed.
func get[T runtime.Object](t *testing.T, r rendered, kind, name string) T {
	t.Helper()
	o, ok := r.byKey[kind+"/"+name]
	if !ok {
		keys := make([]string, 0, len(r.byKey))
		for k := range r.byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Fatalf("no %s/%s rendered (have %v)", kind, name, keys)
	}
	v, ok := o.(T)
	if !ok {
		t.Fatalf("%s/%s is a %T", kind, name, o)
	}
	return v
}

func (r rendered) kinds() []string {
	var out []string
	for k := range r.byKey {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// values parses a YAML values file given as text (as -f would read it).
func values(t *testing.T, y string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStrictDecoderRefusesUnknownFields is the control: the decoder the
// other tests trust does refuse a misspelled, a wrongly-cased and an
// unknown field, and an unregistered kind.
func TestStrictDecoderRefusesUnknownFields(t *testing.T) {
	dec := strictDecoder(t)
	good := "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports:\n  - port: 80\n"
	if _, _, err := dec.Decode([]byte(good), nil, nil); err != nil {
		t.Fatalf("a valid Service: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(good, "port: 80", "port: 80\n    targetPorrt: 81", 1),
		strings.Replace(good, "port: 80", "Port: 80", 1),
		strings.Replace(good, "spec:", "speck: {}\nspec:", 1),
		"apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata:\n  name: p\nspec:\n  targetPorts:\n  - number: 8080\n    role: Serving\n",
		"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
	} {
		if _, _, err := dec.Decode([]byte(bad), nil, nil); err == nil {
			t.Errorf("decoded without error:\n%s", bad)
		}
	}
}

// TestLint runs Helm's own linter (helm lint) over the chart.
func TestLint(t *testing.T) {
	for _, m := range lintMessages(t) {
		t.Errorf("helm lint: %s", m)
	}
}

func fullName() string { return release + "-kvhost" }

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b))
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
