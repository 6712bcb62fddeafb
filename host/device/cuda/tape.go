package cuda

import "fmt"

// tape records the work a step issues — every launch, staged copy and GEMM,
// as a tag and its argument words — while a graph is captured, and checks
// at each replay (which re-runs the host code without launching) that the
// same work with the same addresses and sizes is issued again. A mismatch
// means the graph would compute something else than the host asked for
// (an activation landed at another address, a batch changed shape), so the
// replay is refused instead of returning wrong logits.
type tape struct {
	words []uint64
	pos   int
	calls int
	mode  tapeMode
}

type tapeMode uint8

const (
	tapeOff tapeMode = iota
	tapeRecord
	tapeVerify
)

// Tags of the entries on a tape.
const (
	tagLaunch uint64 = 0xA0000000 + iota
	tagStage
	tagGemm
	tagToHost
)

// ReplayMismatchError says where a replay diverged from its capture.
type ReplayMismatchError struct {
	Call      int
	Word      int
	Got, Want uint64
}

func (e *ReplayMismatchError) Error() string {
	return fmt.Sprintf("cuda: graph replay diverged from its capture at call %d (word %d: got %#x, captured %#x)", e.Call, e.Word, e.Got, e.Want)
}

func (t *tape) record() { *t = tape{mode: tapeRecord} }

func (t *tape) verify() {
	t.mode, t.pos, t.calls = tapeVerify, 0, 0
}

func (t *tape) stop() { t.mode = tapeOff }

// entry appends or checks one call: its tag, then its words.
func (t *tape) entry(tag uint64, words ...uint64) error {
	switch t.mode {
	case tapeRecord:
		t.words = append(t.words, tag, uint64(len(words)))
		t.words = append(t.words, words...)
		t.calls++
	case tapeVerify:
		call := t.calls
		t.calls++
		want := append([]uint64{tag, uint64(len(words))}, words...)
		for i, w := range want {
			if t.pos+i >= len(t.words) {
				return &ReplayMismatchError{Call: call, Word: i, Got: w, Want: 0}
			}
			if t.words[t.pos+i] != w {
				return &ReplayMismatchError{Call: call, Word: i, Got: w, Want: t.words[t.pos+i]}
			}
		}
		t.pos += len(want)
	}
	return nil
}

// done checks that a verified replay issued all the captured calls.
func (t *tape) done() error {
	if t.mode == tapeVerify && t.pos != len(t.words) {
		return fmt.Errorf("cuda: graph replay issued %d calls, fewer than its capture (%d of %d words matched)", t.calls, t.pos, len(t.words))
	}
	return nil
}
