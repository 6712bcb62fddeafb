package cuda

import "fmt"

// ringAlign keeps every staged span 256-byte aligned, the alignment cuBLAS
// and vectorised kernel loads like.
const ringAlign = 256

// ring hands out spans of a pinned host buffer that is mirrored by a device
// buffer of the same size. A span's host bytes must not be overwritten until
// the copy that reads them has run, so when the ring is full the caller must
// synchronise the stream before reuse (wrap reports that); while a graph is
// being captured or replayed nothing may wrap, because the graph bakes the
// spans' addresses in.
type ring struct {
	size int64
	off  int64
}

// ErrRingFull is returned when a span does not fit and wrapping is not
// allowed (during capture or replay).
type ErrRingFull struct{ Need, Size int64 }

func (e *ErrRingFull) Error() string {
	return fmt.Sprintf("cuda: staging ring of %d bytes cannot hold %d more bytes during capture or replay", e.Size, e.Need)
}

// take returns the offset of an n-byte span. wrap is true when the ring had
// to start over at 0 (the caller must have synchronised first; take is only
// called with mayWrap when that is allowed).
func (r *ring) take(n int64, mayWrap bool) (off int64, wrap bool, err error) {
	if n < 0 {
		return 0, false, fmt.Errorf("cuda: staging span of %d bytes", n)
	}
	a := (n + ringAlign - 1) / ringAlign * ringAlign
	if a > r.size {
		return 0, false, &ErrRingFull{Need: a, Size: r.size}
	}
	if r.off+a > r.size {
		if !mayWrap {
			return 0, false, &ErrRingFull{Need: a, Size: r.size}
		}
		r.off = 0
		wrap = true
	}
	off = r.off
	r.off += a
	return off, wrap, nil
}

// fits reports whether an n-byte span fits after the spans already taken,
// without wrapping.
func (r *ring) fits(n int64) bool {
	a := (n + ringAlign - 1) / ringAlign * ringAlign
	return n >= 0 && r.off+a <= r.size
}

// reset makes the whole ring free (after a stream synchronisation).
func (r *ring) reset() { r.off = 0 }
