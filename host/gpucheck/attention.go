//go:build cuda

package gpucheck

import (
	"bytes"
	"fmt"
	"math"
	"unsafe"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// attnCheck is one gpu-check case of the KV write and attention kernels:
// a cache encoding and layout, the call's options, and prefill (n rows from
// start) or batched decode (rows at positions, each written by
// write_kv_rows).
type attnCheck struct {
	dt                      device.KVDType
	heads, kvHeads, hd, vhd int
	vInK                    bool
	window                  int
	softCap                 float32
	sinks                   bool
	start, n                int
	decode                  []int32
}

func (a attnCheck) String() string {
	s := fmt.Sprintf("write_kv + attention %v h%d/kv%d d%d/v%d", a.dt, a.heads, a.kvHeads, a.hd, a.vhd)
	if a.vInK {
		s += " latent"
	}
	if a.window > 0 {
		s += fmt.Sprintf(" window=%d", a.window)
	}
	if a.softCap > 0 {
		s += fmt.Sprintf(" softcap=%v", a.softCap)
	}
	if a.sinks {
		s += " sinks"
	}
	if a.decode != nil {
		return s + fmt.Sprintf(" decode at %v", a.decode)
	}
	return s + fmt.Sprintf(" prefill %d rows from %d", a.n, a.start)
}

// attnChecks covers every encoding in prefill and decode, and the options
// and shapes the architectures need: sliding window with sinks (gpt-oss),
// with soft-capping (Gemma 2), MLA's expanded prefill (K 192, V 128) and
// its absorbed decode over the latent cache (16 heads over 512+64 rows).
func attnChecks() []attnCheck {
	var out []attnCheck
	for _, dt := range device.KVDTypes() {
		out = append(out,
			attnCheck{dt: dt, heads: 8, kvHeads: 2, hd: 128, vhd: 128, start: 0, n: 150},
			attnCheck{dt: dt, heads: 8, kvHeads: 2, hd: 128, vhd: 128, start: 300, decode: []int32{300, 17, 299}})
	}
	return append(out,
		attnCheck{dt: device.KVF16, heads: 8, kvHeads: 2, hd: 64, vhd: 64, window: 40, sinks: true, start: 100, n: 60},
		attnCheck{dt: device.KVMXFP8, heads: 8, kvHeads: 2, hd: 64, vhd: 64, window: 40, sinks: true, start: 300, decode: []int32{300, 150}},
		attnCheck{dt: device.KVBF16, heads: 4, kvHeads: 2, hd: 128, vhd: 128, window: 70, softCap: 50, start: 120, n: 64},
		attnCheck{dt: device.KVF16, heads: 4, kvHeads: 4, hd: 192, vhd: 128, start: 0, n: 90},
		attnCheck{dt: device.KVF16, heads: 16, kvHeads: 1, hd: 576, vhd: 512, vInK: true, start: 200, decode: []int32{200, 77}},
		attnCheck{dt: device.KVFP8E4M3, heads: 16, kvHeads: 1, hd: 576, vhd: 512, vInK: true, softCap: 30, sinks: true, start: 200, n: 3},
	)
}

// span allocates a device span of at least n bytes (rounded to whole
// floats, so it can be read back with CopyToHost).
func (c *checker) span(n int64) (device.Span, error) {
	if n == 0 {
		return device.Span{}, nil
	}
	b, err := c.buf(make([]float32, (n+3)/4))
	return device.Span{Ptr: b.Ptr, Bytes: n}, err
}

// spanBytes reads a span back.
func (c *checker) spanBytes(s device.Span) ([]byte, error) {
	if s.Ptr == 0 {
		return nil, nil
	}
	f, err := c.get(device.Buf{Ptr: s.Ptr, N: int((s.Bytes + 3) / 4)})
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))[:s.Bytes], nil
}

// attention writes a cache through the device and through kernels/cpu,
// checks the cache bytes agree exactly (the encoders round alike), then
// compares the device's attention with the CPU kernels' on that cache.
func (c *checker) attention(a attnCheck) (KernelResult, error) {
	const ps, pages = 16, 40
	slots := pages * ps
	table := make([]int32, pages)
	for i, p := range c.rng.Perm(pages) {
		table[i] = int32(p)
	}
	kv := device.KVLayer{DType: a.dt, Slots: slots, PageSize: ps, KVHeads: a.kvHeads, HeadDim: a.hd, VHeadDim: a.vhd, VInK: a.vInK}
	kr, vr := kv.KRowElems(), kv.VRowElems()
	var err error
	for _, s := range []struct {
		dst   *device.Span
		bytes int64
		skip  bool
	}{{&kv.K, a.dt.RowBytes(kr), false}, {&kv.KScale, a.dt.ScaleBytes(kr), false},
		{&kv.V, a.dt.RowBytes(vr), a.vInK}, {&kv.VScale, a.dt.ScaleBytes(vr), a.vInK}} {
		if s.skip {
			continue
		}
		if *s.dst, err = c.span(int64(slots) * s.bytes); err != nil {
			return KernelResult{}, err
		}
	}
	ck := kcpu.NewPagedKV(kcpu.KVType(a.dt), slots, ps, a.kvHeads, a.hd, a.vhd, a.vInK)
	total := a.start + a.n
	if a.decode != nil {
		total = a.start // positions below start by write_kv, the rows' own by write_kv_rows
	}
	kAll, vAll := c.rand(total*kr, 1), c.rand(total*vr, 1)
	kb, err := c.buf(kAll)
	if err != nil {
		return KernelResult{}, err
	}
	vb, err := c.buf(vAll)
	if err != nil {
		return KernelResult{}, err
	}
	if err := c.k.WriteKV(kv, kb, vb, total, table, 0); err != nil {
		return KernelResult{}, err
	}
	kcpu.WriteKV(ck, kAll, vAll, total, table, 0)
	opts := device.AttnOpts{Scale: float32(1 / math.Sqrt(float64(a.hd))), Window: a.window, SoftCap: a.softCap}
	ko := kcpu.AttnOpts{Scale: opts.Scale, Window: a.window, SoftCap: a.softCap}
	if a.sinks {
		sv := c.rand(a.heads, 3)
		if opts.Sinks, err = c.vec(sv); err != nil {
			return KernelResult{}, err
		}
		ko.Sinks = sv
	}
	rows := a.n
	if a.decode != nil {
		rows = len(a.decode)
	}
	qv := c.rand(rows*a.heads*a.hd, 1)
	q, err := c.buf(qv)
	if err != nil {
		return KernelResult{}, err
	}
	o, err := c.buf(make([]float32, rows*a.heads*a.vhd))
	if err != nil {
		return KernelResult{}, err
	}
	want := make([]float32, rows*a.heads*a.vhd)
	scratch := make([]float32, kcpu.AttentionScratch(c.cpu.Threads(), a.hd, a.vhd))
	if a.decode == nil {
		if err := c.k.Attention(o, q, a.n, a.heads, kv, table, a.start, opts, o); err != nil {
			return KernelResult{}, err
		}
		c.cpu.Attention(want, qv, a.n, a.heads, ck, table, a.start, ko, scratch)
	} else {
		tables := make([][]int32, rows)
		for i := range tables {
			tables[i] = table
		}
		nk, nv := c.rand(rows*kr, 1), c.rand(rows*vr, 1)
		nkb, err := c.buf(nk)
		if err != nil {
			return KernelResult{}, err
		}
		nvb, err := c.buf(nv)
		if err != nil {
			return KernelResult{}, err
		}
		dk, ok := c.k.(device.DecodeKernels)
		if !ok {
			return KernelResult{}, fmt.Errorf("the device has no batched decode kernels")
		}
		if err := dk.WriteKVRows(kv, nkb, nvb, a.decode, tables); err != nil {
			return KernelResult{}, err
		}
		kcpu.WriteKVRows(ck, nk, nv, a.decode, tables)
		if err := dk.DecodeAttention(o, q, a.heads, kv, a.decode, tables, opts, o, pages*ps); err != nil {
			return KernelResult{}, err
		}
		c.cpu.DecodeAttention(want, qv, a.heads, ck, a.decode, tables, ko, scratch)
	}
	got, err := c.get(o)
	if err != nil {
		return KernelResult{}, err
	}
	r := compare("", got, want, 1e-4)
	// The cache itself must match byte for byte: both sides encode alike.
	for _, s := range []struct {
		name string
		dev  device.Span
		host []byte
	}{{"K", kv.K, ck.K}, {"K scales", kv.KScale, ck.KScale}, {"V", kv.V, ck.V}, {"V scales", kv.VScale, ck.VScale}} {
		b, err := c.spanBytes(s.dev)
		if err != nil {
			return KernelResult{}, err
		}
		if !bytes.Equal(b, s.host) {
			r.OK = false
			r.Details += fmt.Sprintf("%s cache bytes differ from kernels/cpu's; ", s.name)
		}
	}
	return r, nil
}
