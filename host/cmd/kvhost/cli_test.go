package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHelpListsEveryCommand(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), []string{arg}, &out, &errb); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		cmds := []string{"serve", "gen-model", "version"}
		for name := range extraCommands {
			cmds = append(cmds, name)
		}
		for _, c := range cmds {
			if c == "gpu-check" {
				continue // cuda builds only
			}
			if !strings.Contains(out.String(), "kvhost "+c) {
				t.Errorf("%s: usage does not list %q:\n%s", arg, c, out.String())
			}
		}
		if !strings.Contains(out.String(), "plugin check") {
			t.Errorf("usage lacks 'plugin check'")
		}
	}
	// Every command's own -h exits 0 and prints its usage.
	names := []string{"serve", "gen-model"}
	for name := range extraCommands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		var out, errb bytes.Buffer
		if err := run(context.Background(), []string{name, "-h"}, &out, &errb); err != nil {
			t.Errorf("%s -h: %v", name, err)
		}
		if out.Len()+errb.Len() == 0 {
			t.Errorf("%s -h printed nothing", name)
		}
	}
	if err := run(context.Background(), []string{"nope"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--help") {
		t.Errorf("unknown command: %v", err)
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{arg}, &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out.String(), "kvhost "+version) || !strings.Contains(out.String(), "linux/") && !strings.Contains(out.String(), "/") {
			t.Errorf("%s: %q", arg, out.String())
		}
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kvhost.yaml")
	os.WriteFile(file, []byte(`
model: from-file.gguf
max-queue: 10
max_running_requests: 5   # underscores work too
api-key: file-secret
allowed-origins: [http://a.example, http://b.example]
shutdown-timeout: 3s
sglang-compat: true
device-memory: 2GiB
`), 0o644)
	env := map[string]string{"KVHOST_CONFIG": file, "KVHOST_MAX_QUEUE": "20", "KVHOST_PAGE_SIZE": "32"}
	getenv := func(k string) string { return env[k] }
	f, fs, src, err := parseServeFlags([]string{"--max-running-requests", "7", "--max-queue", "30"}, &bytes.Buffer{}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	// flag > env > file > default
	if f.maxRunning != 7 || f.maxQueue != 30 || f.pageSize != 32 || f.model != "from-file.gguf" || f.apiKey != "file-secret" ||
		strings.Join(f.origins, " ") != "http://a.example http://b.example" || f.shutdownWait.String() != "3s" || !f.sglangCompat || f.devMemory != 2<<30 || f.chunkedPrefill != 512 {
		t.Fatalf("settled %+v", f)
	}
	for name, want := range map[string]string{"max-running-requests": srcFlag, "max-queue": srcFlag, "page-size": srcEnv, "model": srcFile, "config": srcEnv, "chunked-prefill-size": srcDefault} {
		if src[name] != want {
			t.Errorf("%s came from %q, want %q", name, src[name], want)
		}
	}
	env2 := map[string]string{"KVHOST_MAX_QUEUE": "20"}
	f2, _, src2, err := parseServeFlags([]string{"--config", file}, &bytes.Buffer{}, func(k string) string { return env2[k] })
	if err != nil || f2.maxQueue != 20 || src2["max-queue"] != srcEnv || f2.maxRunning != 5 {
		t.Fatalf("env over file: %+v, %v", f2, err)
	}
	// The effective configuration masks secrets and says where values came from.
	var logs bytes.Buffer
	log, _ := newLogger("info", "json", &logs)
	log.Info("effective configuration", effectiveConfig(fs, src))
	s := logs.String()
	if strings.Contains(s, "file-secret") || !strings.Contains(s, `"api-key":"**** (file)"`) || !strings.Contains(s, `"max-queue":"30 (flag)"`) || !strings.Contains(s, `"page-size":"32 (env)"`) {
		t.Errorf("effective config: %s", s)
	}
	for body, want := range map[string]string{
		"max-qeue: 3\n":       `unknown setting "max-qeue"`,
		"max-queue: lots\n":   "max-queue",
		"max-queue: {a: 1}\n": "not a setting",
		"- 1\n- 2\n":          "kvhost.yaml",
	} {
		os.WriteFile(file, []byte(body), 0o644)
		_, _, _, err := parseServeFlags([]string{"--config", file, "--model", "m"}, &bytes.Buffer{}, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
	for args, want := range map[string]string{
		"--schedule-policy lifo":                                                   `--schedule-policy "lifo": use fcfs or lpm`,
		"--schedule-policy lpm --disable-radix-cache":                              "cannot be used with --disable-radix-cache",
		`--kv-events-config {"enable_kv_cache_events":true} --disable-radix-cache`: "cannot be enabled with --disable-radix-cache",
		`--kv-events-config {"enable_kv_cache_events":true,"hwm":0.5}`:             "--kv-events-config",
		`--kv-events-config {"enable_kv_cache_events":true,"buffer_steps":5}`:      "only replay_endpoint serves",
	} {
		_, _, _, err := parseServeFlags(append(strings.Fields(args), "--model", "m"), &bytes.Buffer{}, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	if f, _, _, err := parseServeFlags([]string{"--kv-events-config", `{"enable_kv_cache_events":true,"topic":"kv@p@m"}`, "--model", "m"}, &bytes.Buffer{}, func(string) string { return "" }); err != nil || !f.kvEvents.Enabled() || f.kvEvents.Topic != "kv@p@m" {
		t.Errorf("kv events: %+v, %v", f.kvEvents, err)
	}
	if f, _, _, err := parseServeFlags([]string{"--schedule-policy", "lpm", "--model", "m"}, &bytes.Buffer{}, func(string) string { return "" }); err != nil || f.schedPolicy != "lpm" || f.noRadixCache {
		t.Errorf("lpm: %+v, %v", f, err)
	}
	_, _, _, err = parseServeFlags([]string{"--model", "m"}, &bytes.Buffer{}, func(k string) string {
		if k == "KVHOST_THREADS" {
			return "many"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "KVHOST_THREADS") {
		t.Errorf("bad env value: %v", err)
	}
}
