//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	kcuda "github.com/kvhost/kvhost/kernels/cuda"
)

// function is a kernel entry point fetched at startup; id numbers it in
// recorded launches.
type function struct {
	name string
	id   int
	f    cu.Function
}

// loadModules loads every embedded module — the fatbin first (native cubin
// for sm_80/sm_90, compute_90 PTX for anything newer), the PTX of the nearest
// architecture if the fatbin is refused — and fetches every function now,
// since modules must not load lazily during a capture.
func (d *Device) loadModules() error {
	d.fns = map[string]function{}
	arch := "sm_80"
	if d.facts.ComputeMajor >= 9 {
		arch = "sm_90"
	}
	d.facts.ModuleImage = "fatbin"
	id := 0
	for _, name := range kcuda.ModuleNames() {
		mod, err := loadModule(name, arch)
		if err != nil {
			return err
		}
		if mod.ptx {
			d.facts.ModuleImage = "ptx " + arch
		}
		for _, fn := range kcuda.Modules[name] {
			f, err := mod.m.Function(fn)
			if err != nil {
				return fmt.Errorf("cuda: module %s has no function %s: %w", name, fn, err)
			}
			id++
			d.fns[fn] = function{name: fn, id: id, f: f}
		}
	}
	return nil
}

type loaded struct {
	m   cu.Module
	ptx bool
}

func loadModule(name, arch string) (loaded, error) {
	fat, err := kcuda.Fatbin(name)
	if err != nil {
		return loaded{}, err
	}
	m, ferr := cu.LoadData(string(fat))
	if ferr == nil {
		return loaded{m: m}, nil
	}
	ptx, err := kcuda.PTX(name, arch)
	if err != nil {
		return loaded{}, err
	}
	m, err = cu.LoadData(string(ptx))
	if err != nil {
		return loaded{}, fmt.Errorf("cuda: load module %s (fatbin: %v; ptx %s: %w)", name, ferr, arch, err)
	}
	return loaded{m: m, ptx: true}, nil
}

// fn returns a kernel by name; the set is fixed at startup.
func (d *Device) fn(name string) (function, error) {
	f, ok := d.fns[name]
	if !ok {
		return function{}, fmt.Errorf("cuda: no kernel %s", name)
	}
	return f, nil
}

// launch launches a kernel now and, while a capture is open, records it.
// Arguments are 8-byte words: pointers, or int32/float32 bit patterns in the
// low half (kernel parameters are read at their own size).
func (d *Device) launch(name string, dims Dims, args ...uint64) error {
	f, err := d.fn(name)
	if err != nil {
		return err
	}
	if len(args) > len(d.args.slots) {
		return fmt.Errorf("cuda: %s takes %d arguments, at most %d supported", name, len(args), len(d.args.slots))
	}
	if d.mode == modeRecord {
		d.rec.ops = append(d.rec.ops, op{kind: opLaunch, fn: f, dims: dims, args: append([]uint64(nil), args...)})
	}
	copy(d.args.slots, args)
	if err := launchRaw(rawFunction(f.f), dims, d.st, d.args, len(args)); err != nil {
		return fmt.Errorf("cuda: %s: %w", name, err)
	}
	return nil
}
