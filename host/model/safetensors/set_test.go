package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeSharded writes two shards and an index mapping their tensors.
func writeSharded(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	shards := map[string][]Tensor{
		"model-00001-of-00002.safetensors": {
			{"model.embed_tokens.weight", F32, []uint64{2}, f32bytes(1, 2)},
			{"model.layers.0.self_attn.q_proj.weight", BF16, []uint64{2, 2}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		},
		"model-00002-of-00002.safetensors": {
			{"model.norm.weight", F32, []uint64{1}, f32bytes(3)},
			{"lm_head.weight", F16, []uint64{2}, []byte{0, 0x3c, 0, 0xc0}},
		},
	}
	auto := weightMap == nil
	if auto {
		weightMap = map[string]string{}
	}
	for name, ts := range shards {
		if err := os.WriteFile(filepath.Join(dir, name), writeBytes(t, ts, map[string]string{"format": "pt"}), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			if auto {
				weightMap[x.Name] = name
			}
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 24}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, IndexFileName), idx, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenIndex(t *testing.T) {
	dir := t.TempDir()
	writeSharded(t, dir, nil)
	for _, path := range []string{dir, filepath.Join(dir, IndexFileName)} {
		s, err := OpenIndex(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Files) != 2 {
			t.Fatalf("%d files", len(s.Files))
		}
		want := []string{"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"}
		if got := s.Names(); !reflect.DeepEqual(got, want) {
			t.Fatalf("names %v", got)
		}
		info, b, err := s.Tensor("model.norm.weight")
		if err != nil || info.DType != F32 || !bytes.Equal(b, f32bytes(3)) {
			t.Fatalf("norm: %+v %v", info, err)
		}
		if _, b, _ := s.Tensor("lm_head.weight"); !bytes.Equal(b, []byte{0, 0x3c, 0, 0xc0}) {
			t.Fatalf("lm_head % x", b)
		}
		if _, _, err := s.Tensor("nope"); err == nil {
			t.Fatal("missing tensor found")
		}
		if _, ok := s.Info("model.embed_tokens.weight"); !ok {
			t.Fatal("Info")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenIndexRejects(t *testing.T) {
	cases := []struct {
		name      string
		weightMap map[string]string
		want      string
	}{
		{"path traversal", map[string]string{"x": "../model-00001-of-00002.safetensors"}, "not a plain file name"},
		{"absolute path", map[string]string{"x": "/etc/passwd"}, "not a plain file name"},
		{"empty map", map[string]string{}, "missing or empty"},
		{"wrong shard", map[string]string{"model.norm.weight": "model-00001-of-00002.safetensors"}, "not in shard"},
		{"missing tensor", map[string]string{"ghost": "model-00002-of-00002.safetensors"}, "not in shard"},
		{"missing shard", map[string]string{"x": "model-00009-of-00009.safetensors"}, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSharded(t, dir, c.weightMap)
			s, err := OpenIndex(dir)
			if err == nil {
				s.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, IndexFileName), []byte(`{"weight_map": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if _, err := OpenIndex(dir); !errors.As(err, &fe) || !strings.Contains(err.Error(), IndexFileName) {
		t.Fatalf("bad JSON: %v", err)
	}
}

func TestOpenFilesDuplicate(t *testing.T) {
	dir := t.TempDir()
	ts := []Tensor{{"w", U8, []uint64{1}, []byte{1}}}
	var paths []string
	for _, n := range []string{"a.safetensors", "b.safetensors"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, writeBytes(t, ts, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if _, err := OpenFiles(paths); err == nil || !strings.Contains(err.Error(), `tensor "w" is in both`) {
		t.Fatalf("err %v", err)
	}
	s, err := OpenFiles([]string{paths[0], paths[0]})
	if err != nil || len(s.Files) != 1 {
		t.Fatalf("same file twice: %v", err)
	}
	s.Close()
}
