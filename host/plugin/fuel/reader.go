package fuel

import (
	"fmt"
)

// DecodeError says where and why a module could not be decoded.
type DecodeError struct {
	Offset int // byte offset in the module
	Reason string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("fuel: offset %d: %s", e.Offset, e.Reason)
}

// LimitError is a module over one of Options' cost limits; it is refused
// before anything is compiled.
type LimitError struct {
	What        string // "module bytes", "functions", "code bytes", …
	Have, Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("fuel: %s: %d is over the limit of %d", e.What, e.Have, e.Limit)
}

// reader walks a byte slice; base is the slice's offset in the module, for
// errors.
type reader struct {
	b    []byte
	pos  int
	base int
}

func (r *reader) fail(format string, args ...any) error {
	return &DecodeError{Offset: r.base + r.pos, Reason: fmt.Sprintf(format, args...)}
}

func (r *reader) eof() bool { return r.pos >= len(r.b) }

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.pos {
		return nil, r.fail("%d bytes past the end", n)
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s, nil
}

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c&0x70 != 0 {
			return 0, r.fail("u32 overflows")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.fail("u32 longer than 5 bytes")
}

// skipSigned skips a signed LEB128 of at most maxBits bits.
func (r *reader) skipSigned(maxBits int) error {
	for n := 0; n < (maxBits+6)/7; n++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return r.fail("signed LEB128 longer than %d bits", maxBits)
}

// name reads a length-prefixed string.
func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(int(n))
	return string(b), err
}

// limits reads a table or memory limits record: its flag (bit 0: a
// maximum follows; bit 1: shared), minimum and maximum (0 when absent).
func (r *reader) limits() (flag byte, lo, hi uint32, err error) {
	if flag, err = r.byte(); err != nil {
		return 0, 0, 0, err
	}
	if flag > 3 {
		return 0, 0, 0, r.fail("limits flag 0x%02x (memory64 or unknown) not supported", flag)
	}
	if lo, err = r.u32(); err != nil {
		return 0, 0, 0, err
	}
	if flag&1 != 0 {
		hi, err = r.u32()
	}
	return flag, lo, hi, err
}

// s33 reads a signed LEB128 of at most 33 bits (a block type index).
func (r *reader) s33() (int64, error) {
	var v int64
	var shift uint
	for n := 0; n < 5; n++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
	}
	return 0, r.fail("signed LEB128 longer than 33 bits")
}

// count reads a vector length and refuses one above limit (0: none) or
// one the remaining bytes cannot hold at minEntry bytes per entry, so a
// lying count never sizes a buffer.
func (r *reader) count(what string, limit uint32, minEntry int) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if limit > 0 && n > limit {
		return 0, &LimitError{What: what, Have: int64(n), Limit: int64(limit)}
	}
	if int64(n)*int64(minEntry) > int64(len(r.b)-r.pos) {
		return 0, r.fail("%s: %d entries cannot fit in the %d bytes left", what, n, len(r.b)-r.pos)
	}
	return n, nil
}

// appendU32 appends v as unsigned LEB128.
func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// appendS64 appends v as signed LEB128.
func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
