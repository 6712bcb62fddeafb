package fuel

// isValType reports whether c is a value type byte (i32, i64, f32, f64,
// v128, funcref, externref), which doubles as a one-byte block type.
func isValType(c byte) bool {
	switch c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return true
	}
	return false
}

// blockType skips a block type: empty (0x40), a value type, or an s33 type
// index.
func (r *reader) blockType() error {
	if r.eof() {
		return r.fail("unexpected end in block type")
	}
	if c := r.b[r.pos]; c == 0x40 || isValType(c) {
		r.pos++
		return nil
	}
	return r.skipSigned(33)
}

// memarg skips align (with the multi-memory index flag) and offset.
func (r *reader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.u32()
	return err
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

// fcImmediates is the number of u32 immediates of each 0xFC sub-opcode
// (0–7 saturating truncation, 8–17 bulk memory and tables).
var fcImmediates = [18]int{0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2, 1, 2, 1, 2, 1, 1, 1}

// instr decodes one instruction at r.pos, leaving r.pos after it. It
// returns the opcode (for 0xFC, the prefix) and reports block nesting
// through depthDelta (+1 block/loop/if, -1 end).
func (r *reader) instr() (op byte, depthDelta int, err error) {
	op, err = r.byte()
	if err != nil {
		return 0, 0, err
	}
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b:
		return op, 0, nil
	case op == 0x0b:
		return op, -1, nil
	case op == 0x02 || op == 0x03 || op == 0x04:
		return op, 1, r.blockType()
	case op == 0x0c || op == 0x0d || op == 0x10 || op == 0x12 || op == 0xd2 ||
		op >= 0x20 && op <= 0x26 || op == 0x3f || op == 0x40:
		_, err = r.u32()
		return op, 0, err
	case op == 0x0e: // br_table
		n, err := r.u32()
		if err != nil {
			return op, 0, err
		}
		if int(n) > len(r.b)-r.pos {
			return op, 0, r.fail("br_table with %d targets past the end", n)
		}
		return op, 0, r.u32s(int(n) + 1)
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		return op, 0, r.u32s(2)
	case op == 0x1c: // select t*
		n, err := r.u32()
		if err != nil {
			return op, 0, err
		}
		_, err = r.bytes(int(n))
		return op, 0, err
	case op >= 0x28 && op <= 0x3e:
		return op, 0, r.memarg()
	case op == 0x41:
		return op, 0, r.skipSigned(32)
	case op == 0x42:
		return op, 0, r.skipSigned(64)
	case op == 0x43:
		_, err = r.bytes(4)
		return op, 0, err
	case op == 0x44:
		_, err = r.bytes(8)
		return op, 0, err
	case op >= 0x45 && op <= 0xc4, op == 0xd1:
		return op, 0, nil
	case op == 0xd0:
		_, err = r.byte()
		return op, 0, err
	case op == 0xfc:
		sub, err := r.u32()
		if err != nil {
			return op, 0, err
		}
		if sub >= uint32(len(fcImmediates)) {
			return op, 0, r.fail("unknown 0xfc sub-opcode %d", sub)
		}
		return op, 0, r.u32s(fcImmediates[sub])
	case op == 0xfd:
		return op, 0, r.fail("SIMD instructions (0xfd) are not supported; build without -msimd128")
	case op == 0xfe:
		return op, 0, r.fail("thread instructions (0xfe) are not supported")
	case op >= 0x06 && op <= 0x09 || op == 0x18 || op == 0x19:
		return op, 0, r.fail("exception-handling opcode 0x%02x is not supported", op)
	}
	return op, 0, r.fail("unknown opcode 0x%02x", op)
}

// rewriteBody re-encodes one function body (locals and expression, without
// its size prefix), inserting check after the locals and after every loop's
// block type.
func rewriteBody(body []byte, base int, check []byte, out []byte) ([]byte, int, error) {
	r := &reader{b: body, base: base}
	groups, err := r.u32()
	if err != nil {
		return nil, 0, err
	}
	for range groups {
		if _, err := r.u32(); err != nil {
			return nil, 0, err
		}
		c, err := r.byte()
		if err != nil {
			return nil, 0, err
		}
		if !isValType(c) {
			return nil, 0, r.fail("local type 0x%02x", c)
		}
	}
	out = append(out, body[:r.pos]...)
	out = append(out, check...)
	loops := 0
	last := r.pos
	depth := 1
	for depth > 0 {
		op, d, err := r.instr()
		if err != nil {
			return nil, 0, err
		}
		depth += d
		if op == 0x03 {
			out = append(out, body[last:r.pos]...)
			out = append(out, check...)
			last = r.pos
			loops++
		}
	}
	if !r.eof() {
		return nil, 0, r.fail("%d bytes after the function's final end", len(body)-r.pos)
	}
	return append(out, body[last:]...), loops, nil
}

// fuelCheck is the injected sequence: fuel -= 1; if fuel < 0 { unreachable }.
func fuelCheck(global uint32) []byte {
	var b []byte
	b = append(b, 0x23)
	b = appendU32(b, global)
	b = append(b, 0x42, 0x01, 0x7d, 0x24) // i64.const 1, i64.sub, global.set
	b = appendU32(b, global)
	b = append(b, 0x23)
	b = appendU32(b, global)
	return append(b, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b) // i64.const 0, i64.lt_s, if, unreachable, end
}
