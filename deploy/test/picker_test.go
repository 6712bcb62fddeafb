package deploytest

import (
	"path"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func servicePort(s *corev1.Service, name string) int32 {
	for _, p := range s.Spec.Ports {
		if p.Name == name {
			return p.Port
		}
	}
	return -1
}

// arg returns the value after flag in args ("" when absent).
func arg(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// pickerConfig is the part of llm-d-router's EndpointPickerConfig the chart
// writes (its Go types live in a module the Go proxy does not serve, so the
// shape is declared here from its source, cmd/epp and
// pkg/epp/.../datalayer/.../metrics; the metric names are then checked
// against a running kvhost in TestRenderedPodServes).
type pickerConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Plugins    []struct {
		Type       string         `json:"type"`
		Name       string         `json:"name,omitempty"`
		Parameters map[string]any `json:"parameters,omitempty"`
	} `json:"plugins"`
	SchedulingProfiles []struct {
		Name    string `json:"name"`
		Plugins []struct {
			PluginRef string `json:"pluginRef"`
			Weight    *int   `json:"weight,omitempty"`
		} `json:"plugins"`
	} `json:"schedulingProfiles"`
}

type engineConfig struct {
	Name                string `json:"name"`
	QueuedRequestsSpec  string `json:"queuedRequestsSpec"`
	RunningRequestsSpec string `json:"runningRequestsSpec"`
	KVUsageSpec         string `json:"kvUsageSpec"`
	LoRASpec            string `json:"loraSpec"`
	CacheInfoSpec       string `json:"cacheInfoSpec"`
}

type extractorParams struct {
	EngineLabelKey string         `json:"engineLabelKey"`
	DefaultEngine  string         `json:"defaultEngine"`
	EngineConfigs  []engineConfig `json:"engineConfigs"`
}

// pickerMetrics reads the rendered picker configuration, checks it hangs
// together and matches the kvhost pods, and returns the metric names the
// picker will read from them.
func checkPickerConfig(t *testing.T, r rendered, eppDep *appsv1.Deployment, pod corev1.PodTemplateSpec) engineConfig {
	t.Helper()
	spec := eppDep.Spec.Template.Spec
	c := container(t, spec, "epp")
	file := arg(c.Args, "--config-file")
	m, ok := mountOf(c, file)
	if !ok {
		t.Fatalf("--config-file %s is on no mount", file)
	}
	v, _ := volumeOf(spec, m.Name)
	if v.ConfigMap == nil {
		t.Fatalf("picker config volume %+v", v)
	}
	cm := get[*corev1.ConfigMap](t, r, "ConfigMap", v.ConfigMap.Name)
	text, ok := cm.Data[path.Base(file)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, path.Base(file))
	}
	var cfg pickerConfig
	if err := yaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
		t.Fatalf("picker config: %v\n%s", err, text)
	}
	if cfg.Kind != "EndpointPickerConfig" || cfg.APIVersion == "" {
		t.Errorf("picker config %s %s", cfg.APIVersion, cfg.Kind)
	}
	declared := map[string]bool{}
	var ext *extractorParams
	for _, p := range cfg.Plugins {
		name := p.Name
		if name == "" {
			name = p.Type // a plugin without a name is referenced by its type
		}
		declared[name] = true
		switch p.Type {
		case "core-metrics-extractor":
			b, _ := yaml.Marshal(p.Parameters)
			ext = &extractorParams{}
			if err := yaml.UnmarshalStrict(b, ext); err != nil {
				t.Fatalf("core-metrics-extractor parameters: %v", err)
			}
		case "metrics-data-source":
			if p.Parameters["path"] != "/metrics" || p.Parameters["scheme"] != "http" {
				t.Errorf("metrics-data-source %v, want http /metrics", p.Parameters)
			}
		case "prefix-cache-scorer":
			t.Error("prefix-cache-scorer configured: kvhost reuses no prefixes yet (issue 18)")
		}
	}
	if len(cfg.SchedulingProfiles) == 0 {
		t.Fatal("no scheduling profile")
	}
	for _, prof := range cfg.SchedulingProfiles {
		for _, ref := range prof.Plugins {
			if !declared[ref.PluginRef] {
				t.Errorf("profile %s refers to undeclared plugin %s", prof.Name, ref.PluginRef)
			}
		}
	}
	if ext == nil {
		t.Fatal("no core-metrics-extractor")
	}
	engine := pod.Labels[ext.EngineLabelKey]
	if engine == "" || engine != ext.DefaultEngine {
		t.Errorf("pods carry %s=%q, the extractor's default engine is %q", ext.EngineLabelKey, engine, ext.DefaultEngine)
	}
	for _, e := range ext.EngineConfigs {
		if e.Name == engine {
			if e.QueuedRequestsSpec == "" || e.RunningRequestsSpec == "" || e.KVUsageSpec == "" {
				t.Errorf("engine %s lacks a required metric: %+v", e.Name, e)
			}
			return e
		}
	}
	t.Fatalf("no engine config %q in %+v", engine, ext.EngineConfigs)
	return engineConfig{}
}
