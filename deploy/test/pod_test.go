package deploytest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// kvhostBinary is $KVHOST_BIN (make test-deploy passes bin/kvhost) or a
// fresh `go build` of the main module's command.
func kvhostBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KVHOST_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	out := filepath.Join(t.TempDir(), "kvhost")
	cmd := exec.Command("go", "build", "-o", out, "./host/cmd/kvhost")
	cmd.Dir = repoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./host/cmd/kvhost: %v\n%s", err, b)
	}
	return out
}

// image is what the Dockerfile's final stage gives a container: its
// environment, its entrypoint, and the directories it copies in (mapped to
// the repository's sources of them).
type image struct {
	env        []string
	entrypoint string
	dirs       map[string]string // container path → host path
}

func readImage(t *testing.T) image {
	t.Helper()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " "), "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	img := image{dirs: map[string]string{"/models": filepath.Join(root, "models")}}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			img.env, img.entrypoint = nil, ""
		case "ENV":
			img.env = append(img.env, f[1:]...)
		case "ENTRYPOINT":
			img.entrypoint = strings.Trim(strings.Join(f[1:], " "), `[]" `)
		}
	}
	if img.entrypoint != "/usr/local/bin/kvhost" {
		t.Fatalf("the image's entrypoint is %q; this test runs kvhost as it", img.entrypoint)
	}
	return img
}

// pod is a rendered pod spec laid out on this machine: every volume the
// kvhost container mounts is a directory holding what the kubelet would
// project there (ConfigMap and Secret keys as files), and container paths
// in arguments and variables are rewritten to those directories. The
// listen address is moved to loopback; nothing else changes.
type pod struct {
	root   string
	mounts map[string]string // container path → host path, longest first when applied
}

func (p *pod) path(s string) string {
	keys := make([]string, 0, len(p.mounts))
	for k := range p.mounts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		if s == k || strings.HasPrefix(s, k+"/") {
			return p.mounts[k] + strings.TrimPrefix(s, k)
		}
	}
	return strings.Replace(s, "0.0.0.0:", "127.0.0.1:", 1)
}

func layOut(t *testing.T, r rendered, spec corev1.PodSpec, c corev1.Container, img image) *pod {
	t.Helper()
	p := &pod{root: t.TempDir(), mounts: map[string]string{}}
	for k, v := range img.dirs {
		p.mounts[k] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumeOf(spec, m.Name)
		if !ok {
			t.Fatalf("mount %s of no volume", m.Name)
		}
		dir := filepath.Join(p.root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{}
		switch {
		case v.ConfigMap != nil:
			cm := get[*corev1.ConfigMap](t, r, "ConfigMap", v.ConfigMap.Name)
			for k, s := range cm.Data {
				files[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				files[k] = b
			}
		case v.Secret != nil:
			s := get[*corev1.Secret](t, r, "Secret", v.Secret.SecretName)
			for k, b := range s.Data {
				files[k] = b
			}
			for k, str := range s.StringData {
				files[k] = []byte(str)
			}
		case v.EmptyDir != nil:
		default:
			t.Fatalf("volume %s: %+v is not laid out by this test", v.Name, v.VolumeSource)
		}
		for k, b := range files {
			if err := os.WriteFile(filepath.Join(dir, k), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p.mounts[m.MountPath] = dir
	}
	return p
}

// command is the container's process: the image's entrypoint with the
// container's args, the image's environment overridden by the container's.
func (p *pod) command(t *testing.T, bin string, c corev1.Container, img image) *exec.Cmd {
	t.Helper()
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = p.path(a)
	}
	env := map[string]string{}
	for _, kv := range img.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = p.path(v)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Fatalf("variable %s comes from %+v: not resolved by this test", e.Name, e.ValueFrom)
		}
		env[e.Name] = p.path(e.Value)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(p.root, "home")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lockedBuf is a goroutine-safe buffer for the process's output.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func httpDo(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// probeURL is where the kubelet sends an httpGet probe (a named port
// resolved against the container's ports).
func probeURL(pr *corev1.Probe, c corev1.Container) string {
	n := pr.HTTPGet.Port.IntValue()
	for _, cp := range c.Ports {
		if cp.Name == pr.HTTPGet.Port.String() {
			n = int(cp.ContainerPort)
		}
	}
	return fmt.Sprintf("http://127.0.0.1:%d%s", n, pr.HTTPGet.Path)
}

// TestRenderedPodServes starts kvhost as the rendered Deployment's pod
// would run (the image's entrypoint and environment, the container's args
// and variables, its ConfigMap and Secret volumes) and checks what the
// chart promises of it: the probes answer on the rendered paths and port,
// /metrics at the scrape annotations' port and path carries every gauge
// the endpoint picker's configuration names, the keys from the Secret
// guard the API and the admin routes, the allow-list from the plugins
// ConfigMap refuses an unlisted upload, and SIGTERM ends the process with
// status 0 well within the grace period.
func TestRenderedPodServes(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds and runs kvhost")
	}
	port := freePort(t)
	pinned := strings.Repeat("5e", 32)
	r := render(t, values(t, fmt.Sprintf(`
port: %d
keys: {create: true, apiKeys: [k-one, k-two], adminKey: adm-key}
plugins: {enabled: true, allowlist: ["%s  mypolicy"]}
preStopSleepSeconds: 1
shutdownTimeoutSeconds: 5
serve: {device: cpu, device-memory: 256MiB, max-running-requests: 4, max-queue: 16, page-size: 16, threads: 1}
`, port, pinned)))
	d := get[*appsv1.Deployment](t, r, "Deployment", fullName())
	spec := d.Spec.Template.Spec
	c := container(t, spec, "kvhost")
	eppDep := get[*appsv1.Deployment](t, r, "Deployment", fullName()+"-epp")
	metrics := checkPickerConfig(t, r, eppDep, d.Spec.Template)
	img := readImage(t)
	bin := kvhostBinary(t)
	p := layOut(t, r, spec, c, img)
	cmd := p.command(t, bin, c, img)
	out := &lockedBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{}) // closed when the process is gone; then waitErr is set
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("kvhost output:\n%s", out.String())
		}
	})

	// The startup probe, within its budget, then liveness and readiness.
	budget := time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second
	deadline := time.Now().Add(min(budget, 90*time.Second))
	for {
		code, _ := httpDo(t, "GET", probeURL(c.StartupProbe, c), "", "")
		if code == 200 {
			break
		}
		select {
		case <-exited:
			t.Fatalf("kvhost exited before its startup probe passed: %v", waitErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("startup probe never passed (last %d)", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if code, body := httpDo(t, "GET", probeURL(pr, c), "", ""); code != 200 {
			t.Errorf("%s: %d %s", probeURL(pr, c), code, body)
		}
	}

	// The scrape target carries the picker's metrics, as gauges, without
	// the API key (the picker sends none).
	a := d.Spec.Template.Annotations
	code, body := httpDo(t, "GET", fmt.Sprintf("http://127.0.0.1:%s%s", a["prometheus.io/port"], a["prometheus.io/path"]), "", "")
	if code != 200 {
		t.Fatalf("scrape: %d", code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{metrics.QueuedRequestsSpec, metrics.RunningRequestsSpec, metrics.KVUsageSpec, metrics.CacheInfoSpec} {
		f, ok := fams[name]
		if !ok || f.GetType().String() != "GAUGE" || len(f.GetMetric()) == 0 {
			t.Errorf("the picker reads %s; kvhost exports %v", name, f)
		}
	}
	if f := fams[metrics.CacheInfoSpec]; f != nil && len(f.GetMetric()) > 0 {
		got := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if got["block_size"] != "16" || got["num_gpu_blocks"] == "" || got["num_gpu_blocks"] == "0" {
			t.Errorf("%s labels %v, want block_size 16 (serve page-size) and the pages", metrics.CacheInfoSpec, got)
		}
	}

	// Keys from the Secret.
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	req := `{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`
	if code, _ := httpDo(t, "POST", base+"/v1/completions", "", req); code != 401 {
		t.Errorf("completion without a key: %d, want 401", code)
	}
	if code, body := httpDo(t, "POST", base+"/v1/completions", "k-two", req); code != 200 || !strings.Contains(body, `"text_completion"`) {
		t.Errorf("completion with the second key: %d %s", code, body)
	}
	if code, _ := httpDo(t, "GET", base+"/admin/samplers", "k-one", ""); code != 401 {
		t.Errorf("admin with an API key: %d, want 401", code)
	}
	if code, body := httpDo(t, "GET", base+"/admin/samplers", "adm-key", ""); code != 200 {
		t.Errorf("admin with the admin key: %d %s", code, body)
	}
	// The allow-list from the plugins ConfigMap is in force.
	if code, body := httpDo(t, "PUT", base+"/admin/samplers/mypolicy", "adm-key", "\x00asm unlisted bytes"); code != 403 {
		t.Errorf("unlisted upload: %d %s, want 403 from the allow-list", code, body)
	}

	// SIGTERM, as the kubelet sends it after preStop: exit 0 within the
	// rest of the grace period.
	grace := time.Duration(*spec.TerminationGracePeriodSeconds-c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("kvhost exited with %v after SIGTERM", waitErr)
		}
		t.Logf("kvhost drained and exited in %v (grace after preStop: %v)", time.Since(start).Round(time.Millisecond), grace)
	case <-time.After(grace):
		t.Fatalf("kvhost still running %v after SIGTERM", grace)
	}
}

// TestRenderedPullInitContainer runs the init container's command of a hub
// install offline against an empty cache: the command and its argument
// are kvhost's (it fails only because the model is not cached).
func TestRenderedPullInitContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds and runs kvhost")
	}
	r := render(t, values(t, `model: {source: hub, hub: "hf://org/tiny-GGUF:Q8_0"}`))
	spec := get[*appsv1.Deployment](t, r, "Deployment", fullName()).Spec.Template.Spec
	c := container(t, spec, "pull")
	img := readImage(t)
	p := layOut(t, r, spec, c, img)
	cmd := p.command(t, kvhostBinary(t), c, img)
	cmd.Env = append(cmd.Env, "HF_HUB_OFFLINE=1")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "offline mode (HF_HUB_OFFLINE) and not in the cache") {
		t.Fatalf("kvhost %v offline: %v\n%s", c.Args, err, b)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "unknown command") || strings.Contains(sc.Text(), "flag provided but not defined") {
			t.Fatalf("the init container's command is not kvhost's: %s", sc.Text())
		}
	}
}
