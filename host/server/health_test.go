package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/chat"
)

// stallingBackend reports the engine stalled when stalled is set, using
// the engine's own error and the threshold the server passes.
type stallingBackend struct {
	fakeBackend
	stalled   bool
	threshold time.Duration
}

func (b *stallingBackend) Stalled(threshold time.Duration) error {
	b.threshold = threshold
	if !b.stalled {
		return nil
	}
	return &engine.StalledError{Since: 2 * threshold, Threshold: threshold, Running: 3, Waiting: 1}
}

// TestHealthAndReadyReportStall: /health (liveness) and /ready (readiness)
// answer 200 while the engine makes progress and 503 "engine stalled",
// naming the delay and the pending work, while it does not; both answer
// 503 while draining. The threshold comes from Options.StallThreshold.
func TestHealthAndReadyReportStall(t *testing.T) {
	tmpl, _ := chat.New("", "", "")
	b := &stallingBackend{fakeBackend: fakeBackend{eng: newEnv(t).eng, tmpl: tmpl}}
	h := New(b, Options{StallThreshold: 250 * time.Millisecond})
	env := &testEnv{h: h}
	for _, path := range []string{"/health", "/ready"} {
		rec := env.do(t, http.MethodGet, path, "")
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"status"`) {
			t.Fatalf("%s while progressing: %d %s", path, rec.Code, rec.Body)
		}
	}
	if b.threshold != 250*time.Millisecond {
		t.Fatalf("threshold passed %v", b.threshold)
	}
	b.stalled = true
	for _, path := range []string{"/health", "/ready"} {
		rec := env.do(t, http.MethodGet, path, "")
		body := rec.Body.String()
		if rec.Code != 503 || !strings.Contains(body, `"code":"engine_stalled"`) || !strings.Contains(body, "engine stalled: no step completed for 500ms (threshold 250ms) with 3 running and 1 waiting requests") {
			t.Fatalf("%s while stalled: %d %s", path, rec.Code, body)
		}
	}
	b.stalled = false
	h.Drain("maintenance")
	for _, path := range []string{"/health", "/ready"} {
		if rec := env.do(t, http.MethodGet, path, ""); rec.Code != 503 || !strings.Contains(rec.Body.String(), "maintenance") {
			t.Fatalf("%s while draining: %d %s", path, rec.Code, rec.Body)
		}
	}
	if err := (Options{StallThreshold: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "stall_threshold") {
		t.Fatalf("negative threshold: %v", err)
	}
}
