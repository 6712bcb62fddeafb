package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// serveComplete serves model, waits until it is ready, and returns its
// greedy completion of a fixed prompt.
func serveComplete(t *testing.T, model string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuf
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--model", model, "--addr", "127.0.0.1:0", "--device-memory", "256MiB", "--threads", "2", "--log-format", "text"}, &out, &errb)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %s: %v\n%s", model, err, errb.String())
		}
	}()
	url := waitFor(t, "the listening line", 20*time.Second, func() string {
		if m := listenURL.FindStringSubmatch(errb.String()); m != nil {
			return m[1]
		}
		return ""
	})
	waitFor(t, "/ready 200", 60*time.Second, func() string {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("serve %s ended: %v\n%s", model, err, errb.String())
		default:
		}
		resp, err := http.Get(url + "/ready")
		if err != nil {
			return ""
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			return "ok"
		}
		return ""
	})
	var c struct {
		Choices []struct{ Text string }
	}
	postDecode(t, url+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":16,"temperature":0}`, &c)
	if len(c.Choices) != 1 || c.Choices[0].Text == "" {
		t.Fatalf("serve %s: completion %+v", model, c)
	}
	return c.Choices[0].Text
}

// TestSplitModelFlow: a repository whose quantization is a split GGUF (in a
// folder, as large repositories lay them out) is pulled whole by
// `kvhost pull REPO:QUANT`, listed as one model, served by its hub id with
// the same greedy text as the merged file, planned from its header, and
// removed with every shard by `kvhost rm`.
func TestSplitModelFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the end-to-end split-model flow in -short mode")
	}
	shards, err := gguf.SplitFile(sharedModel(t), filepath.Join(t.TempDir(), "stories260K-F32"), gguf.SplitLimits{MaxTensors: 10})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	var total int64
	for _, s := range shards {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		files["F32/"+filepath.Base(s)] = b
		total += int64(len(b))
	}
	h := newMiniHubFiles(t, files)
	h.open()
	hubEnv(t, h)
	first := path.Join("F32", filepath.Base(shards[0]))

	var pullOut bytes.Buffer
	if err := run(context.Background(), []string{"pull", "org/stories260K-GGUF:F32"}, &pullOut, io.Discard); err != nil {
		t.Fatal(err)
	}
	if h.gets != len(shards) || !strings.Contains(pullOut.String(), filepath.FromSlash(first)+"\n") {
		t.Fatalf("pull: %d CDN GETs for %d shards, output:\n%s", h.gets, len(shards), pullOut.String())
	}
	var listOut bytes.Buffer
	if err := run(context.Background(), []string{"list"}, &listOut, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := first + " (" + strconv.Itoa(len(shards)) + " shards)"; !strings.Contains(listOut.String(), want) || strings.Contains(listOut.String(), "-00002-of-") {
		t.Errorf("list does not show the split as one model %q:\n%s", want, listOut.String())
	}
	var planOut bytes.Buffer
	snap := strings.TrimSpace(strings.Split(pullOut.String(), "\n")[1])
	if err := run(context.Background(), []string{"plan", "--model", snap, "--device-memory", "256MiB"}, &planOut, io.Discard); err != nil {
		t.Fatalf("plan of the split model: %v\n%s", err, planOut.String())
	}
	if !strings.Contains(planOut.String(), "stories260K") {
		t.Errorf("plan output names no model:\n%s", planOut.String())
	}

	if got, want := serveComplete(t, "hf://org/stories260K-GGUF:F32"), serveComplete(t, sharedModel(t)); got != want {
		t.Fatalf("served from the split: %q, from the merged file: %q", got, want)
	}
	if h.gets != len(shards) {
		t.Errorf("serve downloaded again: %d CDN GETs", h.gets)
	}

	var rmOut bytes.Buffer
	if err := run(context.Background(), []string{"rm", "org/stories260K-GGUF"}, &rmOut, io.Discard); err != nil || !strings.Contains(rmOut.String(), "removed org/stories260K-GGUF ("+humanBytes(total)+")") {
		t.Fatalf("rm: %v %s (want %s freed)", err, rmOut.String(), humanBytes(total))
	}
}

// TestGenModelSplit: gen-model --split-max-tensors / --split-max-size write
// gguf-split shards holding exactly the tensors and metadata of the single
// file gen-model writes, and bad limits are refused naming the flag's field.
func TestGenModelSplit(t *testing.T) {
	dir := t.TempDir()
	merged := filepath.Join(dir, "one.gguf")
	base := []string{"gen-model", "--size", "tiny", "--dtype", "q8_0"}
	if err := run(context.Background(), append(base, "--out", merged), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	want, err := gguf.Open(merged)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	for _, flags := range [][]string{{"--split-max-tensors", "8"}, {"--split-max-size", "1MiB"}} {
		out := filepath.Join(dir, strings.TrimPrefix(flags[0], "--")+".gguf")
		var stdout bytes.Buffer
		if err := run(context.Background(), append(append(base, flags...), "--out", out), &stdout, io.Discard); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v: wrote the single file %s too", flags, out)
		}
		first := strings.TrimSuffix(out, ".gguf") + "-00001-of-"
		if !strings.Contains(stdout.String(), first) {
			t.Fatalf("%v: output\n%s", flags, stdout.String())
		}
		m, err := gguf.OpenModel(strings.TrimSuffix(out, ".gguf") + "-00001-of-" + strings.Split(strings.Split(stdout.String(), first)[1], ".gguf")[0] + ".gguf")
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Shards) < 2 || len(m.Tensors) != len(want.Tensors) {
			t.Fatalf("%v: %d shards, %d tensors (want %d)", flags, len(m.Shards), len(m.Tensors), len(want.Tensors))
		}
		for _, ti := range want.Tensors {
			_, a, _ := want.Tensor(ti.Name)
			_, b, err := m.Tensor(ti.Name)
			if err != nil || !bytes.Equal(a, b) {
				t.Fatalf("%v: tensor %s differs (%v)", flags, ti.Name, err)
			}
		}
		for _, kv := range want.KVs {
			if v, ok := m.Get(kv.Key); !ok || v.Type != kv.Value.Type {
				t.Fatalf("%v: key %s lost", flags, kv.Key)
			}
		}
		m.Close()
	}
	err = run(context.Background(), append(base, "--split-max-tensors", "-2", "--out", filepath.Join(dir, "bad.gguf")), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `invalid value "-2" for flag -split-max-tensors: "-2" is out of range`) {
		t.Fatalf("--split-max-tensors -2: %v", err)
	}
}
