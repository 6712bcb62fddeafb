package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/plan"
)

func TestKVDTypeFlag(t *testing.T) {
	for in, want := range map[string]string{"auto": "AUTO", "f32": "fp32", "fp32": "fp32", "f16": "fp16", "fp16": "fp16", "bf16": "bf16",
		"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "mxfp8": "mxfp8", "nvfp4": "nvfp4", "fp4": "nvfp4"} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		v := kvDTypeFlag(fs, "")
		if err := fs.Parse([]string{"--kv-cache-dtype", in}); err != nil {
			t.Fatal(err)
		}
		if got, err := v.resolve("AUTO"); err != nil || got != want {
			t.Errorf("%s → %q, %v; want %q", in, got, err, want)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	v := kvDTypeFlag(fs, "")
	_ = fs.Parse([]string{"--kv-cache-dtype", "int4"})
	if _, err := v.resolve("x"); err == nil || !strings.Contains(err.Error(), `--kv-cache-dtype "int4": want auto or one of [f32 f16 bf16 fp8_e4m3 fp8_e5m2 mxfp8 nvfp4]`) {
		t.Fatalf("int4: %v", err)
	}
}

// TestPlanCLIKVDType: `kvhost plan --kv-cache-dtype` asks the configurator
// for that encoding: fp8 halves f16's cell, which halves f32's.
func TestPlanCLIKVDType(t *testing.T) {
	path := tinyGGUF(t)
	cells := map[string]int64{}
	for _, dt := range []string{"f32", "f16", "fp8_e4m3", "nvfp4"} {
		var out bytes.Buffer
		if err := planCmd(context.Background(), []string{"--model", path, "--device-memory", "256MiB", "--threads", "2", "--kv-cache-dtype", dt, "--json"}, &out, io.Discard); err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		var r plan.Report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Budget.KVDType != map[string]string{"fp8_e4m3": "fp8_e4m3", "nvfp4": "nvfp4"}[dt] && r.Budget.KVDType != dt {
			t.Fatalf("%s: planned %s", dt, r.Budget.KVDType)
		}
		cells[dt] = r.Budget.KVConfigurator.CellBytes
	}
	// tiny: 2 layers × K+V × 2 KV heads × 16; nvfp4 adds its scales and the
	// configurator's dequant workspace (spec §3 FP4 MHA).
	if cells["f32"] != 512 || cells["f16"] != 256 || cells["fp8_e4m3"] != 128 || cells["nvfp4"] != 64+8+64 {
		t.Fatalf("cells %v", cells)
	}
}
