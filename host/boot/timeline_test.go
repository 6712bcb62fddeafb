package boot

import (
	"strings"
	"testing"
)

// TestTimeline: steps come back in the order marked, each with its own
// share of the wall and CPU time (CPU spent in a step lands in it), and a
// nil timeline records nothing.
func TestTimeline(t *testing.T) {
	tl := NewTimeline()
	tl.Mark("first")
	x := 0
	for i := range 20_000_000 { // a few milliseconds of CPU
		x ^= i * i
	}
	_ = x
	tl.Mark("second")
	s := tl.Steps()
	if len(s) != 2 || s[0].Name != "first" || s[1].Name != "second" {
		t.Fatalf("steps %+v", s)
	}
	if s[1].CPU <= 0 || s[1].Wall <= 0 {
		t.Fatalf("the busy step took %v wall, %v CPU", s[1].Wall, s[1].CPU)
	}
	if got := tl.String(); !strings.HasPrefix(got, "first ") || !strings.Contains(got, ", second ") {
		t.Fatalf("String() = %q", got)
	}
	var none *Timeline
	none.Mark("ignored")
	if none.Steps() != nil {
		t.Fatal("a nil timeline recorded a step")
	}
}
