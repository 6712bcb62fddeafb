package fuel

import (
	"bytes"
	"fmt"
)

// GlobalName is the export name of the injected fuel counter.
const GlobalName = "kvhost_fuel"

// Section ids (WebAssembly core spec §5.5).
const (
	secCustom   = 0
	secImport   = 2
	secGlobal   = 6
	secExport   = 7
	secCode     = 10
	secData     = 11
	secDataCnt  = 12
	maxSections = 13
)

// sectionOrder ranks non-custom sections in their required order (the tag
// section, 13, sits between memory and global).
var sectionOrder = [14]int{0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 11, 6}

// Stats describes one instrumentation.
type Stats struct {
	Functions int    // code bodies instrumented (one entry check each)
	Loops     int    // loop headers instrumented
	Global    uint32 // index of the fuel global
}

type section struct {
	id   byte
	body []byte
	off  int // offset of body in the module
}

var header = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// Instrument returns a copy of the module wasm with a fuel counter:
// an exported mutable i64 global named GlobalName, initialised to initial,
// decremented at every function entry and loop header, trapping once
// negative. The host sets it before each call.
func Instrument(wasm []byte, initial int64) ([]byte, Stats, error) {
	var st Stats
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], header) {
		return nil, st, &DecodeError{Reason: "not a WebAssembly 1.0 binary (bad magic or version)"}
	}
	secs, err := splitSections(wasm)
	if err != nil {
		return nil, st, err
	}
	importedGlobals, definedGlobals := uint32(0), uint32(0)
	hasGlobal, hasExport := false, false
	for _, s := range secs {
		switch s.id {
		case secImport:
			if importedGlobals, err = scanImports(s); err != nil {
				return nil, st, err
			}
		case secGlobal:
			hasGlobal = true
			r := &reader{b: s.body, base: s.off}
			if definedGlobals, err = r.u32(); err != nil {
				return nil, st, err
			}
		case secExport:
			hasExport = true
		}
	}
	st.Global = importedGlobals + definedGlobals
	check := fuelCheck(st.Global)
	out := append(make([]byte, 0, len(wasm)+len(wasm)/4+64), header...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	newGlobal := func(prefix []byte) []byte {
		b := appendU32(nil, definedGlobals+1)
		b = append(b, prefix...)
		b = append(b, 0x7e, 0x01, 0x42) // i64, mutable, i64.const
		b = appendS64(b, initial)
		return append(b, 0x0b)
	}
	newExport := func(count uint32, prefix []byte) []byte {
		b := appendU32(nil, count+1)
		b = append(b, prefix...)
		b = appendU32(b, uint32(len(GlobalName)))
		b = append(b, GlobalName...)
		b = append(b, 0x03)
		return appendU32(b, st.Global)
	}
	// Missing global or export sections are created just before the first
	// section that must follow them.
	for _, s := range secs {
		if s.id != secCustom {
			if !hasGlobal && sectionOrder[s.id] > sectionOrder[secGlobal] {
				emit(secGlobal, newGlobal(nil))
				hasGlobal = true
			}
			if !hasExport && sectionOrder[s.id] > sectionOrder[secExport] {
				emit(secExport, newExport(0, nil))
				hasExport = true
			}
		}
		switch s.id {
		case secGlobal:
			r := &reader{b: s.body, base: s.off}
			_, _ = r.u32() // count, read above
			emit(secGlobal, newGlobal(s.body[r.pos:]))
		case secExport:
			body, err := rewriteExports(s, newExport)
			if err != nil {
				return nil, st, err
			}
			emit(secExport, body)
		case secCode:
			body, err := rewriteCode(s, check, &st)
			if err != nil {
				return nil, st, err
			}
			emit(secCode, body)
		default:
			emit(s.id, s.body)
		}
	}
	if !hasGlobal {
		emit(secGlobal, newGlobal(nil))
	}
	if !hasExport {
		emit(secExport, newExport(0, nil))
	}
	return out, st, nil
}

// splitSections checks section framing and order.
func splitSections(wasm []byte) ([]section, error) {
	r := &reader{b: wasm, pos: 8}
	var secs []section
	lastRank := -1
	for !r.eof() {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		if id > maxSections {
			return nil, r.fail("unknown section id %d", id)
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		off := r.pos
		body, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		if id != secCustom {
			if rank := sectionOrder[id]; rank <= lastRank {
				return nil, &DecodeError{Offset: off, Reason: fmt.Sprintf("section %d out of order or repeated", id)}
			} else {
				lastRank = rank
			}
		}
		secs = append(secs, section{id: id, body: body, off: off})
	}
	return secs, nil
}

// scanImports counts imported globals and refuses an import of GlobalName.
func scanImports(s section) (uint32, error) {
	r := &reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	var globals uint32
	for range n {
		if _, err := r.name(); err != nil {
			return 0, err
		}
		field, err := r.name()
		if err != nil {
			return 0, err
		}
		kind, err := r.byte()
		if err != nil {
			return 0, err
		}
		switch kind {
		case 0x00: // function
			_, err = r.u32()
		case 0x01: // table
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 0x02: // memory
			err = r.limits()
		case 0x03: // global
			if field == GlobalName {
				return 0, r.fail("module imports %q", GlobalName)
			}
			globals++
			_, err = r.bytes(2)
		default:
			err = r.fail("import kind 0x%02x not supported", kind)
		}
		if err != nil {
			return 0, err
		}
	}
	if !r.eof() {
		return 0, r.fail("trailing bytes in the import section")
	}
	return globals, nil
}

// rewriteExports appends the fuel export after checking the name is free.
func rewriteExports(s section, newExport func(uint32, []byte) []byte) ([]byte, error) {
	r := &reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	start := r.pos
	for range n {
		name, err := r.name()
		if err != nil {
			return nil, err
		}
		if name == GlobalName {
			return nil, r.fail("module already exports %q", GlobalName)
		}
		if _, err := r.byte(); err != nil {
			return nil, err
		}
		if _, err := r.u32(); err != nil {
			return nil, err
		}
	}
	if !r.eof() {
		return nil, r.fail("trailing bytes in the export section")
	}
	return newExport(n, s.body[start:]), nil
}

// rewriteCode instruments every function body.
func rewriteCode(s section, check []byte, st *Stats) ([]byte, error) {
	r := &reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	// Every body takes at least its one-byte size: a count above what the
	// section holds is a lie, refused before it sizes any buffer.
	if int64(n) > int64(len(s.body)-r.pos) {
		return nil, r.fail("code section claims %d function bodies in %d bytes", n, len(s.body)-r.pos)
	}
	out := appendU32(make([]byte, 0, len(s.body)+int(n)*2*len(check)), n)
	var scratch []byte
	for range n {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		off := r.pos
		body, err := r.bytes(int(size))
		if err != nil {
			return nil, err
		}
		var loops int
		scratch, loops, err = rewriteBody(body, s.off+off, check, scratch[:0])
		if err != nil {
			return nil, err
		}
		st.Functions++
		st.Loops += loops
		out = appendU32(out, uint32(len(scratch)))
		out = append(out, scratch...)
	}
	if !r.eof() {
		return nil, r.fail("trailing bytes in the code section")
	}
	return out, nil
}
