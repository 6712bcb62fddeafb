package fuel

import "fmt"

// valTypes skips a vector of value types, returning its length.
func (r *reader) valTypes(limit uint32) (uint32, error) {
	n, err := r.count("value types", limit, 1)
	if err != nil {
		return 0, err
	}
	for range n {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if !isValType(c) {
			return 0, r.fail("value type 0x%02x", c)
		}
	}
	return n, nil
}

func (m *module) scanTypes(r *reader, opts Options) error {
	n, err := r.count("types", opts.MaxSectionLength, 3)
	if err != nil {
		return err
	}
	m.params = make([]uint32, n)
	for i := range n {
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return r.fail("type %d: form 0x%02x (only function types are supported)", i, form)
		}
		if m.params[i], err = r.valTypes(0); err != nil {
			return err
		}
		if _, err := r.valTypes(0); err != nil {
			return err
		}
	}
	return nil
}

// scanImports counts imports by kind and refuses an import of GlobalName
// or of a table (which the table cap could not bound).
func (m *module) scanImports(r *reader, opts Options) error {
	n, err := r.count("imports", opts.MaxSectionLength, 4)
	if err != nil {
		return err
	}
	for range n {
		if _, err := r.name(); err != nil {
			return err
		}
		field, err := r.name()
		if err != nil {
			return err
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		switch kind {
		case 0x00: // function
			t, err := r.u32()
			if err != nil {
				return err
			}
			if t >= uint32(len(m.params)) {
				return r.fail("imported function %q: type %d, the module has %d types", field, t, len(m.params))
			}
			m.funcTypes = append(m.funcTypes, t)
			m.imported++
			if opts.MaxFunctions > 0 && m.funcs() > opts.MaxFunctions {
				return &LimitError{What: "functions", Have: int64(m.funcs()), Limit: int64(opts.MaxFunctions)}
			}
		case 0x01: // table
			if opts.MaxTableElements > 0 {
				return r.fail("imports table %q: a plugin must define its own tables, not import one (they are capped)", field)
			}
			if _, err := r.byte(); err != nil {
				return err
			}
			if _, _, _, err := r.limits(); err != nil {
				return err
			}
			m.tables++
		case 0x02: // memory
			if opts.MaxMemoryPages > 0 {
				return r.fail("imports memory %q: a plugin must define its own memory, not import one (it is capped)", field)
			}
			if _, _, _, err := r.limits(); err != nil {
				return err
			}
			m.mems++
		case 0x03: // global
			if field == GlobalName {
				return r.fail("module imports %q", GlobalName)
			}
			if _, err := r.bytes(2); err != nil {
				return err
			}
			m.globals++
		default:
			return r.fail("import kind 0x%02x not supported", kind)
		}
	}
	return nil
}

func (m *module) scanFunctions(r *reader, opts Options) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	if total := int64(m.imported) + int64(n); opts.MaxFunctions > 0 && total > int64(opts.MaxFunctions) {
		return &LimitError{What: "functions", Have: total, Limit: int64(opts.MaxFunctions)}
	}
	if int64(n) > int64(len(r.b)-r.pos) {
		return r.fail("function section claims %d functions in %d bytes", n, len(r.b)-r.pos)
	}
	m.defined = n
	for range n {
		t, err := r.u32()
		if err != nil {
			return err
		}
		if t >= uint32(len(m.params)) {
			return r.fail("function %d: type %d, the module has %d types", len(m.funcTypes), t, len(m.params))
		}
		m.funcTypes = append(m.funcTypes, t)
	}
	return nil
}

// scanLimited counts the tables (ref true) or memories of their section
// and returns the section re-encoded with every maximum at most limit
// (0: unchanged): a minimum above it is refused, a missing or larger
// maximum is set to it, so growth past it fails in the guest.
func (m *module) scanLimited(r *reader, ref bool, limit uint32, maxEntries uint32, st *Stats) ([]byte, uint32, error) {
	what, minEntry := "memories", 2
	if ref {
		what, minEntry = "tables", 3
	}
	n, err := r.count(what, maxEntries, minEntry)
	if err != nil {
		return nil, 0, err
	}
	out := appendU32(nil, n)
	for i := range n {
		if ref {
			t, err := r.byte()
			if err != nil {
				return nil, 0, err
			}
			if t != 0x70 && t != 0x6f {
				return nil, 0, r.fail("table type 0x%02x (funcref and externref are supported)", t)
			}
			out = append(out, t)
		}
		flag, lo, hi, err := r.limits()
		if err != nil {
			return nil, 0, err
		}
		if flag&2 != 0 {
			return nil, 0, r.fail("shared %s are not supported", what)
		}
		if !ref && (lo > maxPages || flag&1 != 0 && hi > maxPages) {
			// Invalid as declared: lowering the maximum must not make it valid.
			return nil, 0, r.fail("memory limits %d..%d pages: a memory holds at most %d", lo, hi, maxPages)
		}
		if limit > 0 {
			if lo > limit {
				return nil, 0, &LimitError{What: fmt.Sprintf("%s: minimum of entry %d", what, i), Have: int64(lo), Limit: int64(limit)}
			}
			if flag&1 == 0 || hi > limit {
				// A maximum below the minimum stays invalid, as it was.
				flag, hi = flag|1, limit
				if ref {
					st.Tables++
				} else {
					st.Memories++
				}
			}
		}
		out = append(out, flag)
		out = appendU32(out, lo)
		if flag&1 != 0 {
			out = appendU32(out, hi)
		}
	}
	if !r.eof() {
		return nil, 0, r.fail("trailing bytes in the %s section", what)
	}
	return out, n, nil
}

// constExpr checks a constant expression up to its end: only constants,
// global.get and ref.func (and the extended-constant arithmetic), every
// index inside the module.
func (m *module) constExpr(r *reader) error {
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b:
			return nil
		case 0x41:
			err = r.skipSigned(32)
		case 0x42:
			err = r.skipSigned(64)
		case 0x43:
			_, err = r.bytes(4)
		case 0x44:
			_, err = r.bytes(8)
		case 0x23:
			var g uint32
			if g, err = r.u32(); err == nil && g >= m.globals {
				err = r.fail("global.get %d in a constant expression: the module has %d globals", g, m.globals)
			}
		case 0xd0:
			_, err = r.byte()
		case 0xd2:
			var f uint32
			if f, err = r.u32(); err == nil && f >= m.funcs() {
				err = r.fail("ref.func %d: the module has %d functions", f, m.funcs())
			}
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended const
		default:
			return r.fail("opcode 0x%02x in a constant expression", op)
		}
		if err != nil {
			return err
		}
	}
}

func (m *module) scanGlobals(r *reader, opts Options) error {
	n, err := r.count("globals", opts.MaxSectionLength, 3)
	if err != nil {
		return err
	}
	for range n {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if !isValType(c) {
			return r.fail("global type 0x%02x", c)
		}
		if _, err := r.byte(); err != nil { // mutability
			return err
		}
		// A global's initializer may read only the globals before it.
		if err := m.constExpr(r); err != nil {
			return err
		}
		m.globals++
	}
	return nil
}

// scanExports checks every export's index and that GlobalName is free.
func (m *module) scanExports(r *reader, opts Options) error {
	n, err := r.count("exports", opts.MaxSectionLength, 3)
	if err != nil {
		return err
	}
	for range n {
		name, err := r.name()
		if err != nil {
			return err
		}
		if name == GlobalName {
			return r.fail("module already exports %q", GlobalName)
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		idx, err := r.u32()
		if err != nil {
			return err
		}
		var have uint32
		switch kind {
		case 0x00:
			have = m.funcs()
			m.exports = append(m.exports, name)
		case 0x01:
			have = m.tables
		case 0x02:
			have = m.mems
		case 0x03:
			have = m.globals
		default:
			return r.fail("export %q: kind 0x%02x not supported", name, kind)
		}
		if idx >= have {
			return r.fail("export %q: index %d, the module has %d of that kind", name, idx, have)
		}
	}
	return nil
}

// funcIndices checks a vector of function indices.
func (m *module) funcIndices(r *reader) error {
	n, err := r.count("element function indices", 0, 1)
	if err != nil {
		return err
	}
	for range n {
		f, err := r.u32()
		if err != nil {
			return err
		}
		if f >= m.funcs() {
			return r.fail("element segment names function %d: the module has %d", f, m.funcs())
		}
	}
	return nil
}

// exprs checks a vector of constant expressions.
func (m *module) exprs(r *reader) error {
	n, err := r.count("element expressions", 0, 1)
	if err != nil {
		return err
	}
	for range n {
		if err := m.constExpr(r); err != nil {
			return err
		}
	}
	return nil
}

func (m *module) table(r *reader) error {
	t, err := r.u32()
	if err == nil && t >= m.tables {
		err = r.fail("element segment for table %d: the module has %d tables", t, m.tables)
	}
	return err
}

// scanElements checks the eight element segment forms (spec §5.5.12).
func (m *module) scanElements(r *reader, opts Options) error {
	n, err := r.count("element segments", opts.MaxSectionLength, 2)
	if err != nil {
		return err
	}
	for range n {
		flags, err := r.u32()
		if err != nil {
			return err
		}
		if flags > 7 {
			return r.fail("element segment flags %d", flags)
		}
		if flags&2 != 0 && flags&1 == 0 { // active with an explicit table
			if err := m.table(r); err != nil {
				return err
			}
		}
		if flags&1 == 0 { // active: offset
			if err := m.constExpr(r); err != nil {
				return err
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			if _, err := r.byte(); err != nil {
				return err
			}
		}
		if flags&4 == 0 {
			err = m.funcIndices(r)
		} else {
			err = m.exprs(r)
		}
		if err != nil {
			return err
		}
	}
	m.elems = n
	return nil
}

func (m *module) scanData(r *reader, opts Options) error {
	n, err := r.count("data segments", opts.MaxSectionLength, 2)
	if err != nil {
		return err
	}
	for range n {
		flags, err := r.u32()
		if err != nil {
			return err
		}
		switch flags {
		case 0:
			err = m.constExpr(r)
		case 1:
		case 2:
			var mem uint32
			if mem, err = r.u32(); err == nil && mem != 0 {
				err = r.fail("data segment for memory %d (multiple memories are not supported)", mem)
			}
			if err == nil {
				err = m.constExpr(r)
			}
		default:
			err = r.fail("data segment flags %d", flags)
		}
		if err != nil {
			return err
		}
		size, err := r.u32()
		if err != nil {
			return err
		}
		if _, err := r.bytes(int(size)); err != nil {
			return err
		}
	}
	return nil
}
