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

// limits skips a table or memory limits record.
func (r *reader) limits() error {
	flag, err := r.byte()
	if err != nil {
		return err
	}
	if flag > 3 {
		return r.fail("limits flag 0x%02x (memory64 or unknown) not supported", flag)
	}
	if _, err := r.u32(); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = r.u32()
	}
	return err
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
