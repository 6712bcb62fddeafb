package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/engine"
)

// The HTTP layer's own cost per request and per token: a fake engine that
// answers at once, so the numbers are parsing, tokenizing, detokenizing,
// stop matching, JSON and SSE.
func benchRoundTrip(b *testing.B, path, body string) {
	const tokens = 128
	text := strings.Repeat("héllo wörld ", 11)[:tokens]
	env := newEnv(b, withScript(func(req engine.Request) []engine.Event {
		return events(byteIDs(text), "length", len(req.Prompt))
	}))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := env.do(b, http.MethodPost, path, body)
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkCompletionsRoundTrip(b *testing.B) {
	benchRoundTrip(b, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":200,"stop":["THE END"]}`)
}

func BenchmarkChatStreamRoundTrip(b *testing.B) {
	benchRoundTrip(b, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Tell me a story"}],"stream":true,"stop":["THE END"],"max_tokens":200}`)
}
