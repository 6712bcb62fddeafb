package wasmtest

import (
	"encoding/binary"
	"fmt"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/sampler"
)

// Attack is a hostile behaviour a test plugin performs (issue 12).
type Attack string

// The attacks. Each runs inside the plugin's hot call (kvhost_sample for a
// sampler, kvhost_configure for a configurator) and never returns on its
// own unless a host bound stops it.
const (
	// None behaves: the sampler picks each row's best candidate.
	None Attack = ""
	// Spin loops forever doing nothing.
	Spin Attack = "loop"
	// RefillFuel writes global 0 in a loop although the module declares no
	// global: invalid on its own, and the fuel counter itself once a naive
	// instrumenter appends it at index 0.
	RefillFuel Attack = "fuel-refill"
	// FillMemory, CopyMemory and InitMemory repeat one bulk memory
	// operation over the whole memory (or a 32 KiB passive segment).
	FillMemory Attack = "memory-fill"
	CopyMemory Attack = "memory-copy"
	InitMemory Attack = "memory-init"
	// FillTable, CopyTable and InitTable repeat one bulk table operation
	// over a TableElements-entry table (a 4096-entry passive segment).
	FillTable Attack = "table-fill"
	CopyTable Attack = "table-copy"
	InitTable Attack = "table-init"
	// GrowTable grows a table without a declared maximum by 2^20 entries
	// (8 MiB of host memory each time) in a loop.
	GrowTable Attack = "table-grow"
)

// Attacks lists every attack but None.
var Attacks = []Attack{Spin, RefillFuel, FillMemory, CopyMemory, InitMemory, FillTable, CopyTable, InitTable, GrowTable}

// Sizes of the bulk attacks: BulkPages of memory (16 MiB, inside the
// samplers' and configurators' caps) and TableElements table entries.
const (
	BulkPages     = 256
	TableElements = 8192
)

// Valid reports whether a module carrying the attack is valid WebAssembly
// (only RefillFuel is not).
func (a Attack) Valid() bool { return a != RefillFuel }

// attack adds what the attack needs to m and returns its code.
func attack(m *Module, a Attack) []byte {
	var code [][]byte
	forever := func(body ...[]byte) { code = append(code, Loop(append(body, Br(0))...)) }
	switch a {
	case None:
	case Spin:
		forever()
	case RefillFuel:
		forever(I64Const(1<<62), GlobalSet(0))
	case FillMemory:
		forever(I32Const(0), I32Const(0), MemorySize, I32Const(16), I32Shl, MemoryFill)
	case CopyMemory:
		forever(I32Const(0), I32Const(BulkPages<<15), I32Const(BulkPages<<15), MemoryCopy)
	case InitMemory:
		seg := m.PassiveData(make([]byte, 32<<10))
		forever(I32Const(0), I32Const(0), I32Const(32<<10), MemoryInit(seg))
	case FillTable:
		forever(I32Const(0), RefNullFunc, I32Const(TableElements), TableFill(0))
	case CopyTable:
		forever(I32Const(0), I32Const(0), I32Const(TableElements), TableCopy(0, 0))
	case InitTable:
		refs := make([]uint32, 4096)
		seg := m.PassiveElem(refs...) // every entry names function 0
		forever(I32Const(0), I32Const(0), I32Const(4096), TableInit(seg, 0))
	case GrowTable:
		forever(RefNullFunc, I32Const(1<<20), TableGrow(0), Drop)
	default:
		panic(fmt.Sprintf("wasmtest: unknown attack %q", a))
	}
	var out []byte
	for _, c := range code {
		out = append(out, c...)
	}
	return out
}

// memoryAndTable defines the memory (minPages, no maximum: the host's cap
// applies) and, for the table attacks, the table.
func memoryAndTable(m *Module, a Attack, minPages uint32) {
	switch a {
	case FillMemory, CopyMemory:
		minPages = max(minPages, BulkPages)
	}
	m.Memory(minPages, NoMax)
	switch a {
	case FillTable, CopyTable, InitTable:
		m.Table(TableElements, TableElements)
	case GrowTable:
		m.Table(1, NoMax)
	}
}

// Sampler I/O layout (sdk/SAMPLER_ABI.md) for at most maxBatch rows of
// samplerK candidates, one param, no state, no history.
const (
	maxBatch    = 256
	samplerK    = 4
	descAddr    = 32
	headerAddr  = 1024
	paramsAddr  = 2048
	seedAddr    = paramsAddr + 4*maxBatch
	stepAddr    = seedAddr + 8*maxBatch
	nCandAddr   = stepAddr + 8*maxBatch
	idsAddr     = nCandAddr + 4*maxBatch
	logitsAddr  = idsAddr + 4*maxBatch*samplerK
	lprobsAddr  = logitsAddr + 4*maxBatch*samplerK
	histLenAddr = lprobsAddr + 4*maxBatch*samplerK
	outIDAddr   = histLenAddr + 4*maxBatch
	outLPAddr   = outIDAddr + 4*maxBatch
)

// Sampler returns a sampler named name (sampler ABI 1) with one parameter,
// "attack" (int 0..1, default 0). It picks each row's best candidate; it
// performs the attack in kvhost_sample when row 0 has attack = 1 — so it
// passes the upload self-test and misbehaves only on the request that
// asks — or on every call when always is set.
func Sampler(name string, a Attack, always bool) []byte {
	m := &Module{}
	memoryAndTable(m, a, 1)
	desc := fmt.Sprintf(`{"abi":1,"kind":"sampler","name":%q,"version":"1.0.0","candidates":%d,"preops":["temperature"],`+
		`"params":[{"name":"attack","type":"int","min":0,"max":1,"default":0}]}`, name, samplerK)
	hdr := make([]byte, 4*sampler.HeaderWords)
	words := map[int]uint32{
		sampler.HdrMagic: sampler.IOMagic, sampler.HdrNParams: 1,
		sampler.HdrParams: paramsAddr, sampler.HdrSeed: seedAddr, sampler.HdrStep: stepAddr, sampler.HdrNCand: nCandAddr,
		sampler.HdrIDs: idsAddr, sampler.HdrLogits: logitsAddr, sampler.HdrLogprobs: lprobsAddr,
		sampler.HdrHistory: histLenAddr, sampler.HdrHistoryLen: histLenAddr, sampler.HdrState: outIDAddr,
		sampler.HdrOutID: outIDAddr, sampler.HdrOutLogprob: outLPAddr,
	}
	for w, v := range words {
		binary.LittleEndian.PutUint32(hdr[4*w:], v)
	}
	m.Data(descAddr, []byte(desc))
	m.Data(headerAddr, hdr)
	i32, i64 := []byte{I32}, []byte{I64}
	abi := m.Func(nil, i32, nil, I32Const(sampler.ABIVersion))
	describe := m.Func(nil, i64, nil, I64Const(int64(descAddr)<<32|int64(len(desc))))
	// kvhost_sampler_init(max_batch, max_k): record both in the header.
	initFn := m.Func([]byte{I32, I32}, i32, nil,
		LocalGet(0), I32Const(maxBatch), Op(0x4b), // i32.gt_u
		If(I32Const(0), Return),
		I32Const(0), LocalGet(0), I32Store(headerAddr+4*sampler.HdrMaxBatch),
		I32Const(0), LocalGet(1), I32Store(headerAddr+4*sampler.HdrMaxK),
		I32Const(headerAddr))
	code := attack(m, a)
	if !always && len(code) > 0 {
		code = If(code)
		code = append(append(append(I32Const(0), F32Load(paramsAddr)...), append(F32Const(0.5), F32Gt...)...), code...)
	}
	// kvhost_sample(batch, k): out_id[b] = ids[b*k], out_logprob[b] = logprobs[b*k].
	row := func(load, store []byte) []byte {
		b := append(LocalGet(2), append(I32Const(2), I32Shl...)...)
		b = append(b, LocalGet(2)...)
		b = append(b, LocalGet(1)...)
		b = append(b, I32Mul...)
		b = append(b, I32Const(2)...)
		b = append(b, I32Shl...)
		b = append(b, load...)
		return append(b, store...)
	}
	sample := m.Func([]byte{I32, I32}, i32, []byte{I32},
		code,
		Block(Loop(
			LocalGet(2), LocalGet(0), I32GeU, BrIf(1),
			row(I32Load(idsAddr), I32Store(outIDAddr)),
			row(F32Load(lprobsAddr), F32Store(outLPAddr)),
			LocalGet(2), I32Const(1), I32Add, LocalSet(2),
			Br(0))),
		I32Const(0))
	m.Export("memory", 2, 0)
	m.Export("kvhost_abi_version", 0, abi)
	m.Export("kvhost_describe", 0, describe)
	m.Export(sampler.ExportInit, 0, initFn)
	m.Export(sampler.ExportSample, 0, sample)
	return m.Bytes()
}

// Configurator returns a configurator named name (the current ABI,
// sdk.ABIVersion) claiming
// LlamaForCausalLM whose kvhost_configure performs the attack and then
// reports a guest error ("hostile"), as does kvhost_size.
func Configurator(name string, a Attack) []byte {
	m := &Module{}
	memoryAndTable(m, a, 2)
	desc := fmt.Sprintf(`{"name":%q,"version":"0.0.1","kind":"configurator","abi":%d,"architectures":["LlamaForCausalLM"]}`, name, sdk.ABIVersion)
	const errAddr, inputAddr = 512, 16384
	m.Data(descAddr, []byte(desc))
	m.Data(errAddr, []byte("hostile"))
	i32, i64 := []byte{I32}, []byte{I64}
	abi := m.Func(nil, i32, nil, I32Const(sdk.ABIVersion))
	describe := m.Func(nil, i64, nil, I64Const(int64(descAddr)<<32|int64(len(desc))))
	malloc := m.Func(i32, i32, nil,
		LocalGet(0), I32Const(2*65536-inputAddr), Op(0x4b), If(I32Const(0), Return), I32Const(inputAddr))
	free := m.Func(i32, nil, nil)
	lastErr := m.Func(nil, i64, nil, I64Const(int64(errAddr)<<32|7))
	configure := m.Func([]byte{I32, I32}, i32, nil, attack(m, a), I32Const(-100))
	size := m.Func([]byte{I64, I64, I64}, i32, nil, I32Const(-100))
	m.Export("memory", 2, 0)
	m.Export("kvhost_abi_version", 0, abi)
	m.Export("kvhost_describe", 0, describe)
	m.Export("kvhost_malloc", 0, malloc)
	m.Export("kvhost_free", 0, free)
	m.Export("kvhost_last_error", 0, lastErr)
	m.Export("kvhost_configure", 0, configure)
	m.Export("kvhost_size", 0, size)
	return m.Bytes()
}

// EmptyFunctions returns a valid module of n functions () -> () with
// empty bodies and nothing else: 3 million of them are ~15 MB and cost
// over a minute and gigabytes to compile (issue 12, finding 4).
func EmptyFunctions(n int) []byte {
	typ := Section(1, []byte{1, 0x60, 0, 0})
	fs := U32(uint32(n))
	code := U32(uint32(n))
	for range n {
		fs = append(fs, 0)
		code = append(code, 2, 0, 0x0b)
	}
	out := append([]byte(nil), Header...)
	out = append(out, typ...)
	out = append(out, Section(3, fs)...)
	return append(out, Section(10, code)...)
}
