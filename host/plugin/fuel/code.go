package fuel

// Fuel charged for operations whose work grows with an operand (the
// operand on top of the stack): bulk memory operations cost one unit per
// ChargeBytesPerUnit bytes, bulk table operations and table.grow one unit
// per element, memory.grow ChargePerPage units per page. A unit is about
// one loop iteration (~1 ns compiled); memset and memcpy run at 10–30
// bytes per ns, so a step's fuel bounds its time whatever mix of loops and
// bulk operations the guest uses.
const (
	ChargeBytesPerUnit = 16
	ChargePerPage      = 65536 / ChargeBytesPerUnit
)

// isValType reports whether c is a value type byte (i32, i64, f32, f64,
// v128, funcref, externref), which doubles as a one-byte block type.
func isValType(c byte) bool {
	switch c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return true
	}
	return false
}

// funcCode rewrites one function body at a time; its buffers are reused.
type funcCode struct {
	m      *module
	global uint32
	check  []byte
	// per body
	r       reader
	locals  uint64 // parameters + declared locals
	scratch bool   // the body charges an operation: it gets one more i32 local
	loops   int
	charged int
	code    []byte
	out     []byte
}

// charge kinds: how the operand on top of the stack becomes fuel.
const (
	chargeNone = iota
	chargeBytes
	chargeElements
	chargePages
)

// blockType reads a block type: empty (0x40), a value type, or an s33
// type index inside the module.
func (f *funcCode) blockType() error {
	r := &f.r
	if r.eof() {
		return r.fail("unexpected end in block type")
	}
	if c := r.b[r.pos]; c == 0x40 || isValType(c) {
		r.pos++
		return nil
	}
	t, err := r.s33()
	if err != nil {
		return err
	}
	if t < 0 || t >= int64(len(f.m.params)) {
		return r.fail("block type %d: the module has %d types", t, len(f.m.params))
	}
	return nil
}

// memarg reads align and offset; the multi-memory flag is refused.
func (f *funcCode) memarg() error {
	r := &f.r
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		return r.fail("memory index in a memarg (multiple memories are not supported)")
	}
	_, err = r.u32()
	return err
}

// index reads an index immediate and checks it against have.
func (f *funcCode) index(what string, have uint64) error {
	r := &f.r
	v, err := r.u32()
	if err != nil {
		return err
	}
	if uint64(v) >= have {
		return r.fail("%s %d out of range: the function or module has %d", what, v, have)
	}
	return nil
}

// memIndex reads a memory index immediate, which must be 0.
func (f *funcCode) memIndex() error {
	r := &f.r
	v, err := r.u32()
	if err == nil && v != 0 {
		err = r.fail("memory index %d (multiple memories are not supported)", v)
	}
	return err
}

// instr decodes one instruction at f.r.pos, leaving f.r.pos after it,
// checking every index it names. It reports block nesting through
// depthDelta (+1 block/loop/if, -1 end) and whether its cost depends on
// its operand.
func (f *funcCode) instr() (op byte, depthDelta, charge int, err error) {
	r := &f.r
	m := f.m
	op, err = r.byte()
	if err != nil {
		return 0, 0, 0, err
	}
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b:
		return op, 0, chargeNone, nil
	case op == 0x0b:
		return op, -1, chargeNone, nil
	case op == 0x02 || op == 0x03 || op == 0x04:
		return op, 1, chargeNone, f.blockType()
	case op == 0x0c || op == 0x0d:
		_, err = r.u32()
		return op, 0, chargeNone, err
	case op == 0x0e: // br_table
		n, err := r.count("br_table targets", 0, 1)
		if err != nil {
			return op, 0, chargeNone, err
		}
		return op, 0, chargeNone, r.u32s(int(n) + 1)
	case op == 0x10 || op == 0x12: // call, return_call
		return op, 0, chargeNone, f.index("function", uint64(m.funcs()))
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		if err := f.index("type", uint64(len(m.params))); err != nil {
			return op, 0, chargeNone, err
		}
		return op, 0, chargeNone, f.index("table", uint64(m.tables))
	case op == 0x1c: // select t*
		_, err := r.valTypes(0)
		return op, 0, chargeNone, err
	case op >= 0x20 && op <= 0x22:
		return op, 0, chargeNone, f.index("local", f.locals)
	case op == 0x23 || op == 0x24:
		return op, 0, chargeNone, f.index("global", uint64(m.globals))
	case op == 0x25 || op == 0x26:
		return op, 0, chargeNone, f.index("table", uint64(m.tables))
	case op >= 0x28 && op <= 0x3e:
		return op, 0, chargeNone, f.memarg()
	case op == 0x3f:
		return op, 0, chargeNone, f.memIndex()
	case op == 0x40:
		return op, 0, chargePages, f.memIndex()
	case op == 0x41:
		return op, 0, chargeNone, r.skipSigned(32)
	case op == 0x42:
		return op, 0, chargeNone, r.skipSigned(64)
	case op == 0x43:
		_, err = r.bytes(4)
		return op, 0, chargeNone, err
	case op == 0x44:
		_, err = r.bytes(8)
		return op, 0, chargeNone, err
	case op >= 0x45 && op <= 0xc4, op == 0xd1:
		return op, 0, chargeNone, nil
	case op == 0xd0:
		_, err = r.byte()
		return op, 0, chargeNone, err
	case op == 0xd2:
		return op, 0, chargeNone, f.index("function", uint64(m.funcs()))
	case op == 0xfc:
		return f.prefixed()
	case op == 0xfd:
		return op, 0, chargeNone, r.fail("SIMD instructions (0xfd) are not supported; build without -msimd128")
	case op == 0xfe:
		return op, 0, chargeNone, r.fail("thread instructions (0xfe) are not supported")
	case op >= 0x06 && op <= 0x09 || op == 0x18 || op == 0x19:
		return op, 0, chargeNone, r.fail("exception-handling opcode 0x%02x is not supported", op)
	}
	return op, 0, chargeNone, r.fail("unknown opcode 0x%02x", op)
}

// prefixed decodes a 0xFC instruction: saturating truncation (0–7), bulk
// memory (8–11) and tables (12–17).
func (f *funcCode) prefixed() (op byte, depthDelta, charge int, err error) {
	r := &f.r
	m := f.m
	op = 0xfc
	sub, err := r.u32()
	if err != nil {
		return op, 0, chargeNone, err
	}
	tables, elems, datas := uint64(m.tables), uint64(m.elems), uint64(m.datas)
	switch sub {
	case 0, 1, 2, 3, 4, 5, 6, 7:
		return op, 0, chargeNone, nil
	case 8: // memory.init data mem
		if err := f.index("data segment", datas); err != nil {
			return op, 0, chargeNone, err
		}
		return op, 0, chargeBytes, f.memIndex()
	case 9: // data.drop
		return op, 0, chargeNone, f.index("data segment", datas)
	case 10: // memory.copy mem mem
		if err := f.memIndex(); err != nil {
			return op, 0, chargeNone, err
		}
		return op, 0, chargeBytes, f.memIndex()
	case 11: // memory.fill mem
		return op, 0, chargeBytes, f.memIndex()
	case 12: // table.init elem table
		if err := f.index("element segment", elems); err != nil {
			return op, 0, chargeNone, err
		}
		return op, 0, chargeElements, f.index("table", tables)
	case 13: // elem.drop
		return op, 0, chargeNone, f.index("element segment", elems)
	case 14: // table.copy table table
		if err := f.index("table", tables); err != nil {
			return op, 0, chargeNone, err
		}
		return op, 0, chargeElements, f.index("table", tables)
	case 15, 17: // table.grow, table.fill
		return op, 0, chargeElements, f.index("table", tables)
	case 16: // table.size
		return op, 0, chargeNone, f.index("table", tables)
	}
	return op, 0, chargeNone, r.fail("unknown 0xfc sub-opcode %d", sub)
}

// u32s skips n unsigned LEB128 immediates.
func (r *reader) u32s(n int) error {
	for range n {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// rewrite re-encodes one function body (locals and expression, without
// its size prefix) into f.out: the fuel check after the locals and after
// every loop's block type, a charge before every operation whose cost
// grows with its operand (which then needs one scratch i32 local, appended
// after the declared ones), and every index checked against the original
// module and the function's own locals.
func (f *funcCode) rewrite(body []byte, base int, params, maxLocals uint32) error {
	f.r = reader{b: body, base: base}
	f.loops, f.charged, f.scratch = 0, 0, false
	r := &f.r
	groups, err := r.count("local groups", 0, 2)
	if err != nil {
		return err
	}
	f.locals = uint64(params)
	for range groups {
		n, err := r.u32()
		if err != nil {
			return err
		}
		f.locals += uint64(n)
		if maxLocals > 0 && f.locals > uint64(maxLocals) {
			return &LimitError{What: "locals of one function", Have: int64(f.locals), Limit: int64(maxLocals)}
		}
		c, err := r.byte()
		if err != nil {
			return err
		}
		if !isValType(c) {
			return r.fail("local type 0x%02x", c)
		}
	}
	if f.locals >= 1<<32-1 {
		return r.fail("%d locals", f.locals)
	}
	localsEnd := r.pos
	scratch := uint32(f.locals) // index of the scratch local, if needed
	f.code = append(f.code[:0], f.check...)
	last := r.pos
	depth := 1
	for depth > 0 {
		start := r.pos
		op, d, charge, err := f.instr()
		if err != nil {
			return err
		}
		depth += d
		switch {
		case op == 0x03:
			f.code = append(f.code, body[last:r.pos]...)
			f.code = append(f.code, f.check...)
			last = r.pos
			f.loops++
		case charge != chargeNone:
			f.code = append(f.code, body[last:start]...)
			f.code = appendCharge(f.code, f.global, scratch, charge)
			last = start
			f.charged++
			f.scratch = true
		}
	}
	if !r.eof() {
		return r.fail("%d bytes after the function's final end", len(body)-r.pos)
	}
	f.code = append(f.code, body[last:]...)
	// Locals: the original groups, plus one group of one i32 when a charge
	// needs the scratch local.
	f.out = f.out[:0]
	if f.scratch {
		f.out = appendU32(f.out, groups+1)
		gr := &reader{b: body}
		_, _ = gr.u32()
		f.out = append(f.out, body[gr.pos:localsEnd]...)
		f.out = append(f.out, 0x01, 0x7f)
	} else {
		f.out = append(f.out, body[:localsEnd]...)
	}
	f.out = append(f.out, f.code...)
	return nil
}

// fuelCheck is the sequence injected at function entries and loop headers:
// fuel -= 1; if fuel < 0 { unreachable }.
func fuelCheck(global uint32) []byte {
	var b []byte
	b = append(b, 0x23)
	b = appendU32(b, global)
	b = append(b, 0x42, 0x01, 0x7d, 0x24) // i64.const 1, i64.sub, global.set
	b = appendU32(b, global)
	return appendTrapIfNegative(b, global)
}

// appendTrapIfNegative appends: if fuel < 0 { unreachable }.
func appendTrapIfNegative(b []byte, global uint32) []byte {
	b = append(b, 0x23)
	b = appendU32(b, global)
	return append(b, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b) // i64.const 0, i64.lt_s, if, unreachable, end
}

// appendCharge appends, before an operation whose i32 operand n is on top
// of the stack: local.tee scratch; fuel -= cost(n); trap if negative. The
// operand stays on the stack for the operation itself.
func appendCharge(b []byte, global, scratch uint32, kind int) []byte {
	b = append(b, 0x22) // local.tee
	b = appendU32(b, scratch)
	b = append(b, 0x23)
	b = appendU32(b, global)
	b = append(b, 0x20) // local.get
	b = appendU32(b, scratch)
	b = append(b, 0xad) // i64.extend_i32_u
	switch kind {
	case chargeBytes:
		b = append(b, 0x42, 0x04, 0x88) // i64.const 4, i64.shr_u (÷16)
	case chargePages:
		b = append(b, 0x42, 0x0c, 0x86) // i64.const 12, i64.shl (×4096)
	}
	b = append(b, 0x7d, 0x24) // i64.sub, global.set
	b = appendU32(b, global)
	return appendTrapIfNegative(b, global)
}
