package main

import (
	"flag"
	"fmt"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/plan"
	"github.com/kvhost/kvhost/sdk"
)

// autoCPUKVDType is what --kv-cache-dtype auto stores on the CPU device.
const autoCPUKVDType = plan.DefaultKVDType

// kvDTypeValue is --kv-cache-dtype: auto or a KV encoding in either the
// device's spelling (f32, f16, bf16, fp8_e4m3, fp8_e5m2, mxfp8, nvfp4) or
// the sdk's (fp32, fp16, fp4).
type kvDTypeValue struct{ s string }

// kvDTypeFlag registers --kv-cache-dtype on fs.
func kvDTypeFlag(fs *flag.FlagSet, usage string) *kvDTypeValue {
	v := &kvDTypeValue{s: "auto"}
	auto, _ := device.ParseKVDType(autoCPUKVDType)
	fs.StringVar(&v.s, "kv-cache-dtype", "auto", "KV cache encoding: auto|f32|f16|bf16|fp8_e4m3|fp8_e5m2|mxfp8|nvfp4 (also fp32, fp16, fp4); auto is "+
		auto.String()+" on the CPU device and bf16 on a described GPU; "+usage)
	return v
}

// resolve returns the configurator's spelling of the flag, or auto when the
// flag says auto.
func (v *kvDTypeValue) resolve(auto string) (string, error) {
	if v.s == "auto" {
		return auto, nil
	}
	d, err := device.ParseKVDType(v.s)
	if err != nil {
		return "", fmt.Errorf("--kv-cache-dtype %q: want auto or one of %v (or fp32, fp16, fp4)", v.s, device.KVDTypes())
	}
	return sdk.CanonicalKVDType(d.String()), nil
}
