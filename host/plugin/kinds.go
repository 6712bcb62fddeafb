package plugin

import (
	"fmt"
	"slices"

	"github.com/kvhost/kvhost/sdk"
	sdkc "github.com/kvhost/kvhost/sdk/constraint"
	"github.com/kvhost/kvhost/sdk/sampler"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// kindSpec is what the runtime core needs to know about one plugin kind;
// everything else about a kind lives in its adapter (configure.go,
// sampler.go). See the package documentation for how a kind plugs in.
type kindSpec struct {
	// name is the descriptor's "kind".
	name string
	// abi is the version kvhost_abi_version must return.
	abi int
	// marker is the export that identifies a module of this kind before
	// anything is compiled; no two kinds share one.
	marker string
	// exports are required beyond kvhost_abi_version and kvhost_describe.
	exports []exportSig
	// imports are the modules it may import functions from.
	imports []string
	// maxDescriptor bounds kvhost_describe's answer.
	maxDescriptor uint32
	// pages is its memory cap.
	pages func(Config) uint32
}

// exportSig is a required export and its signature.
type exportSig struct {
	name            string
	params, results []api.ValueType
}

var (
	i32, i64 = api.ValueTypeI32, api.ValueTypeI64

	versionExport  = exportSig{sdk.ExportABIVersion, nil, []api.ValueType{i32}}
	describeExport = exportSig{sdk.ExportDescribe, nil, []api.ValueType{i64}}

	configuratorKind = &kindSpec{
		name: sdk.KindConfigurator, abi: sdk.ABIVersion, marker: sdk.ExportConfigure,
		exports: []exportSig{
			{sdk.ExportMalloc, []api.ValueType{i32}, []api.ValueType{i32}},
			{sdk.ExportFree, []api.ValueType{i32}, nil},
			{sdk.ExportLastError, nil, []api.ValueType{i64}},
			{sdk.ExportConfigure, []api.ValueType{i32, i32}, []api.ValueType{i32}},
			{sdk.ExportSize, []api.ValueType{i64, i64, i64}, []api.ValueType{i32}},
		},
		imports:       []string{sdk.ImportModule, wasi_snapshot_preview1.ModuleName},
		maxDescriptor: sdk.MaxInputBytes,
		pages:         func(c Config) uint32 { return c.MemoryLimitPages },
	}
	samplerKind = &kindSpec{
		name: sampler.Kind, abi: sampler.ABIVersion, marker: sampler.ExportSample,
		exports: []exportSig{
			{sampler.ExportInit, []api.ValueType{i32, i32}, []api.ValueType{i32}},
			{sampler.ExportSample, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		},
		imports:       []string{wasi_snapshot_preview1.ModuleName},
		maxDescriptor: sampler.MaxDescriptorSize,
		pages:         func(c Config) uint32 { return c.SamplerMemoryLimitPages },
	}

	constraintKind = &kindSpec{
		name: sdkc.Kind, abi: sdkc.ABIVersion, marker: sdkc.ExportStep,
		exports: []exportSig{
			{sdk.ExportMalloc, []api.ValueType{i32}, []api.ValueType{i32}},
			{sdk.ExportFree, []api.ValueType{i32}, nil},
			{sdk.ExportLastError, nil, []api.ValueType{i64}},
			{sdkc.ExportInit, []api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
			{sdkc.ExportOpen, []api.ValueType{i32, i32}, []api.ValueType{i32}},
			{sdkc.ExportFork, []api.ValueType{i32}, []api.ValueType{i32}},
			{sdkc.ExportClose, []api.ValueType{i32}, []api.ValueType{i32}},
			{sdkc.ExportStep, []api.ValueType{i32}, []api.ValueType{i32}},
		},
		imports:       []string{wasi_snapshot_preview1.ModuleName},
		maxDescriptor: sdkc.MaxDescriptorSize,
		pages:         func(c Config) uint32 { return c.ConstraintMemoryLimitPages },
	}

	// kinds lists every kind the runtime serves.
	kinds = []*kindSpec{configuratorKind, samplerKind, constraintKind}
)

// Kind names, as in descriptors.
const (
	KindConfigurator = sdk.KindConfigurator
	KindSampler      = sampler.Kind
	KindConstraint   = sdkc.Kind
)

// kindOf identifies a module's kind by its exported functions: the kind
// whose marker it exports. A module exporting no marker is taken as want
// (loading it then names the first thing it lacks, after the ABI version,
// as the handshake always did); one exporting two markers is refused.
func kindOf(name string, exports []string, want *kindSpec) (*kindSpec, error) {
	var found []*kindSpec
	for _, k := range kinds {
		if slices.Contains(exports, k.marker) {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 0:
		return want, nil
	case 1:
		return found[0], nil
	}
	return nil, &ContractError{Plugin: name, Call: "exports", Detail: fmt.Sprintf("exports both %s and %s: a module is one kind", found[0].marker, found[1].marker)}
}

// signature renders a function type as "(i32,i64)->(i32)".
func signature(params, results []api.ValueType) string {
	s := "("
	for i, p := range params {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(p)
	}
	s += ")->("
	for i, p := range results {
		if i > 0 {
			s += ","
		}
		s += api.ValueTypeName(p)
	}
	return s + ")"
}
