package deploytest

import (
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

func lintMessages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, m := range lint.RunAll(chartDir(t), nil, namespace).Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m.Error())
		}
	}
	return out
}

// container returns the named container of a pod template.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

func mountOf(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path || strings.HasPrefix(path, m.MountPath+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volumeOf(spec corev1.PodSpec, name string) (corev1.Volume, bool) {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// serveConfig is the rendered serve config file (kvhost.yaml).
func serveConfig(t *testing.T, r rendered) map[string]any {
	t.Helper()
	cm := get[*corev1.ConfigMap](t, r, "ConfigMap", fullName()+"-config")
	cfg := map[string]any{}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["kvhost.yaml"]), &cfg); err != nil {
		t.Fatalf("serve config: %v", err)
	}
	return cfg
}

// TestDefaultRender: the default values render the model servers, their
// pool, its endpoint picker and a route, all agreeing with each other.
func TestDefaultRender(t *testing.T) {
	r := render(t, nil)
	name, epp := fullName(), fullName()+"-epp"
	want := []string{"ConfigMap/" + epp, "ConfigMap/" + name + "-config", "Deployment/" + epp, "Deployment/" + name,
		"HTTPRoute/" + name, "InferencePool/" + name, "PodDisruptionBudget/" + name, "Role/" + epp, "RoleBinding/" + epp,
		"Service/" + epp, "Service/" + name, "ServiceAccount/" + epp}
	sort.Strings(want)
	if got := r.kinds(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rendered %v\nwant     %v", got, want)
	}
	d := get[*appsv1.Deployment](t, r, "Deployment", name)
	pod := d.Spec.Template
	sel, err := metav1LabelSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	podLabels := labels.Set(pod.Labels)
	if !sel.Matches(podLabels) {
		t.Fatalf("the Deployment's selector %v misses its pods %v", sel, pod.Labels)
	}
	c := container(t, pod.Spec, "kvhost")
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" {
		t.Fatalf("ports %+v, want one named http", c.Ports)
	}
	port := c.Ports[0].ContainerPort

	// Probes: liveness and startup on /health, readiness on /ready, all on
	// the http port; the startup budget covers a slow weight load.
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/health"}, {"liveness", c.LivenessProbe, "/health"}, {"readiness", c.ReadinessProbe, "/ready"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on http", p.what, p.probe, p.path)
		}
	}
	if budget := time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second; budget < 10*time.Minute {
		t.Errorf("startup probe allows %v for loading; want at least 10 minutes", budget)
	}

	// Graceful termination: the grace period covers preStop, the drain
	// timeout and the shutdown after it.
	cfg := serveConfig(t, r)
	drain, err := time.ParseDuration(cfg["shutdown-timeout"].(string))
	if err != nil {
		t.Fatalf("shutdown-timeout %v: %v", cfg["shutdown-timeout"], err)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("no preStop sleep: %+v", c.Lifecycle)
	}
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace < preStop+drain+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + shutdown-timeout %v + 5s", grace, preStop, drain)
	}

	// Scraping: annotations point at the port and /metrics.
	a := pod.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != itoa(port) || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v, want port %d path /metrics", a, port)
	}
	if a["checksum/config"] == "" {
		t.Error("no checksum of the serve config: a config change would not roll the pods")
	}

	// The address the server listens on is the container port.
	env := envOf(c)
	if got := env["KVHOST_ADDR"].Value; got != "0.0.0.0:"+itoa(port) {
		t.Errorf("KVHOST_ADDR %q, want 0.0.0.0:%d", got, port)
	}
	if env["KVHOST_PUBLIC_METRICS"].Value != "true" {
		t.Errorf("KVHOST_PUBLIC_METRICS %v: the picker scrapes without a key", env["KVHOST_PUBLIC_METRICS"])
	}
	if got := env["KVHOST_MODEL"].Value; got != "/models/stories260K.gguf" {
		t.Errorf("KVHOST_MODEL %q", got)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is writable")
	}
	for _, p := range []string{"/cache", "/tmp", "/etc/kvhost/config/kvhost.yaml"} {
		if _, ok := mountOf(c, p); !ok {
			t.Errorf("nothing mounted at %s", p)
		}
	}
	if env["XDG_CACHE_HOME"].Value != "/cache" || env["HF_HOME"].Value != "/cache/huggingface" {
		t.Errorf("caches outside the cache volume: %v %v", env["XDG_CACHE_HOME"], env["HF_HOME"])
	}

	// The pool selects exactly these pods on this port; the picker
	// reference names the picker's Service and ext-proc port.
	pool := get[*infv1.InferencePool](t, r, "InferencePool", name)
	poolSel := labels.Set{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		poolSel[string(k)] = string(v)
	}
	if !labels.SelectorFromSet(poolSel).Matches(podLabels) {
		t.Errorf("the InferencePool selects %v, the pods carry %v", poolSel, pod.Labels)
	}
	if len(pool.Spec.TargetPorts) != 1 || int32(pool.Spec.TargetPorts[0].Number) != port {
		t.Errorf("pool target ports %+v, want %d", pool.Spec.TargetPorts, port)
	}
	ref := pool.Spec.EndpointPickerRef
	eppSvc := get[*corev1.Service](t, r, "Service", epp)
	if ref == nil || string(ref.Name) != eppSvc.Name || ref.Port == nil || int32(ref.Port.Number) != servicePort(eppSvc, "grpc-ext-proc") || ref.FailureMode != infv1.EndpointPickerFailClose {
		t.Errorf("endpointPickerRef %+v, want Service %s port grpc-ext-proc, FailClose", ref, eppSvc.Name)
	}
	eppDep := get[*appsv1.Deployment](t, r, "Deployment", epp)
	if !labels.SelectorFromSet(eppSvc.Spec.Selector).Matches(labels.Set(eppDep.Spec.Template.Labels)) {
		t.Error("the picker's Service selects no picker pod")
	}
	if labels.SelectorFromSet(eppSvc.Spec.Selector).Matches(podLabels) {
		t.Error("the picker's Service selects kvhost pods")
	}
	ec := container(t, eppDep.Spec.Template.Spec, "epp")
	if arg(ec.Args, "--pool-name") != pool.Name || arg(ec.Args, "--pool-namespace") != namespace || arg(ec.Args, "--pool-group") != infv1.GroupVersion.Group {
		t.Errorf("picker args %v do not name the pool %s/%s", ec.Args, namespace, pool.Name)
	}
	checkPickerConfig(t, r, eppDep, pod)

	// The route sends everything to the pool.
	route := get[*gwv1.HTTPRoute](t, r, "HTTPRoute", name)
	if len(route.Spec.Rules) != 1 || len(route.Spec.Rules[0].BackendRefs) != 1 {
		t.Fatalf("route rules %+v", route.Spec.Rules)
	}
	b := route.Spec.Rules[0].BackendRefs[0]
	if b.Group == nil || string(*b.Group) != infv1.GroupVersion.Group || b.Kind == nil || *b.Kind != "InferencePool" || string(b.Name) != pool.Name {
		t.Errorf("route backend %+v, want InferencePool %s", b.BackendObjectReference, pool.Name)
	}

	// The PDB and the Service select the pods.
	pdb := get[*policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", name)
	if s, _ := metav1LabelSelector(pdb.Spec.Selector); !s.Matches(podLabels) {
		t.Error("the PodDisruptionBudget selects no kvhost pod")
	}
	svc := get[*corev1.Service](t, r, "Service", name)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service %+v", svc.Spec)
	}
	if !strings.Contains(r.notes, "/v1/completions") {
		t.Errorf("NOTES.txt: %q", r.notes)
	}
}

// TestFullRender: a hub model pulled by an init container, keys from a
// chart-made Secret, plugins with their allow-list, a GPU, a persistent
// cache and a Gateway.
func TestFullRender(t *testing.T) {
	r := render(t, values(t, `
model: {source: hub, hub: "hf://org/model-GGUF:Q4_K_M", hfTokenSecret: hf}
keys: {create: true, apiKeys: [k1, k2], adminKey: adm}
plugins: {enabled: true, allowlist: ["`+strings.Repeat("ab", 32)+`  mypolicy"]}
gpus: 2
cache: {persistentVolumeClaim: hf-cache}
serve: {device: cuda}
gateway: {create: true, className: example}
`))
	name := fullName()
	d := get[*appsv1.Deployment](t, r, "Deployment", name)
	spec := d.Spec.Template.Spec
	c := container(t, spec, "kvhost")
	env := envOf(c)
	if env["KVHOST_MODEL"].Value != "hf://org/model-GGUF:Q4_K_M" || env["HF_HUB_OFFLINE"].Value != "1" {
		t.Errorf("model env %v %v", env["KVHOST_MODEL"], env["HF_HUB_OFFLINE"])
	}
	pull := container(t, spec, "pull")
	if strings.Join(pull.Args, " ") != "pull hf://org/model-GGUF:Q4_K_M" || envOf(pull)["HF_TOKEN"].ValueFrom.SecretKeyRef.Name != "hf" {
		t.Errorf("init container %+v", pull)
	}
	if _, ok := mountOf(pull, "/cache/huggingface"); !ok {
		t.Error("the init container pulls outside the shared cache")
	}
	if v, _ := volumeOf(spec, "cache"); v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "hf-cache" {
		t.Errorf("cache volume %+v", v)
	}
	for _, res := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		if q := res["nvidia.com/gpu"]; q.Value() != 2 {
			t.Errorf("nvidia.com/gpu %v, want 2 in requests and limits", q.String())
		}
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.String() != "4" {
		t.Errorf("the GPU replaced the CPU request: %v", c.Resources.Requests)
	}

	// Keys: files from the Secret, each env path a key of it.
	sec := get[*corev1.Secret](t, r, "Secret", name+"-keys")
	for envName, want := range map[string]string{"KVHOST_API_KEY_FILE": "k1\nk2\n", "KVHOST_ADMIN_KEY_FILE": "adm"} {
		path := env[envName].Value
		m, ok := mountOf(c, path)
		if !ok {
			t.Fatalf("%s=%s is on no mount", envName, path)
		}
		v, _ := volumeOf(spec, m.Name)
		key := strings.TrimPrefix(path, m.MountPath+"/")
		if v.Secret == nil || v.Secret.SecretName != sec.Name || sec.StringData[key] != want {
			t.Errorf("%s: key %q of %+v = %q, want %q", envName, key, v.Secret, sec.StringData[key], want)
		}
	}
	if d.Spec.Template.Annotations["checksum/keys"] == "" {
		t.Error("no checksum of the keys Secret")
	}

	// Plugins: the watched folder is the ConfigMap (no subPath), with the
	// allow-list in it, and the ConfigMap is not checksummed (hot reload).
	pm, ok := mountOf(c, env["KVHOST_PLUGINS"].Value)
	if !ok || pm.SubPath != "" || pm.MountPath != env["KVHOST_PLUGINS"].Value {
		t.Fatalf("plugins mount %+v for %v", pm, env["KVHOST_PLUGINS"])
	}
	if env["KVHOST_PLUGIN_ALLOWLIST"].Value != pm.MountPath+"/allowlist" {
		t.Errorf("allow-list %v outside the plugins ConfigMap", env["KVHOST_PLUGIN_ALLOWLIST"])
	}
	pv, _ := volumeOf(spec, pm.Name)
	cm := get[*corev1.ConfigMap](t, r, "ConfigMap", pv.ConfigMap.Name)
	if !strings.Contains(cm.Data["allowlist"], strings.Repeat("ab", 32)+"  mypolicy") {
		t.Errorf("allow-list %q", cm.Data["allowlist"])
	}
	for k := range d.Spec.Template.Annotations {
		if strings.Contains(k, "plugin") {
			t.Errorf("pod annotation %s would restart pods on a plugin update", k)
		}
	}
	gw := get[*gwv1.Gateway](t, r, "Gateway", "inference-gateway")
	if gw.Spec.GatewayClassName != "example" {
		t.Errorf("gateway class %q", gw.Spec.GatewayClassName)
	}
	if cfg := serveConfig(t, r); cfg["device"] != "cuda" {
		t.Errorf("serve config %v", cfg)
	}
}

// TestModelVolumes: pvc and hostPath sources mount the weights read-only
// at /models.
func TestModelVolumes(t *testing.T) {
	for _, tc := range []struct{ vals, check string }{
		{`model: {source: pvc, path: /models/llama.gguf, pvc: {claimName: weights}}`, "pvc"},
		{`model: {source: hostPath, path: /models/llama.gguf, hostPath: /srv/models}`, "hostPath"},
	} {
		r := render(t, values(t, tc.vals))
		spec := get[*appsv1.Deployment](t, r, "Deployment", fullName()).Spec.Template.Spec
		c := container(t, spec, "kvhost")
		m, ok := mountOf(c, "/models/llama.gguf")
		if !ok || !m.ReadOnly || envOf(c)["KVHOST_MODEL"].Value != "/models/llama.gguf" {
			t.Fatalf("%s: mount %+v env %v", tc.check, m, envOf(c)["KVHOST_MODEL"])
		}
		v, _ := volumeOf(spec, m.Name)
		if (tc.check == "pvc") != (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "weights") ||
			(tc.check == "hostPath") != (v.HostPath != nil && v.HostPath.Path == "/srv/models") {
			t.Errorf("%s: volume %+v", tc.check, v.VolumeSource)
		}
	}
}

// TestBadValuesRefused: values the chart cannot honour fail the render
// with a message naming the value.
func TestBadValuesRefused(t *testing.T) {
	for _, tc := range []struct{ vals, want string }{
		{`model: {source: s3}`, "model.source"},
		{`model: {source: hub}`, "model.hub"},
		{`model: {source: pvc}`, "model.pvc.claimName"},
		{`plugins: {enabled: true}`, "plugins.requireAllowlist"},
		{`serve: {addr: "0.0.0.0:1"}`, "serve.addr"},
		{`serve: {shutdown-timeout: 5s}`, "serve.shutdown-timeout"},
		{`gateway: {create: true}`, "gateway.className"},
		{`{keys: {create: true, apiKeys: [k]}, metrics: {public: false}}`, "metrics.public"},
	} {
		_, err := renderRaw(t, values(t, tc.vals))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.vals, err, tc.want)
		}
	}
}
