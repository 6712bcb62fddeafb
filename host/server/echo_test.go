package server

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"
)

// wireCompletionLP is completions logprobs as a client parses them: nulls
// stay visible.
type wireCompletionLP struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type wireCompletion struct {
	Choices []struct {
		Index        int               `json:"index"`
		Text         string            `json:"text"`
		Logprobs     *wireCompletionLP `json:"logprobs"`
		FinishReason *string           `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

func TestEcho(t *testing.T) {
	env := newEnv(t) // generates "Hello"
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"Hi","echo":true,"max_tokens":5}`)
	c := decode[completionResponse](t, rec.Body.Bytes()).Choices[0]
	// The prompt as the model saw it: its tokens' bytes, BOS included.
	if c.Text != "<s>HiHello" || c.Logprobs != nil {
		t.Errorf("choice %+v", c)
	}
	if r := env.eng.requests()[0]; r.PromptLogprobs {
		t.Error("prompt logprobs asked for without logprobs")
	}
}

func TestEchoLogprobs(t *testing.T) {
	for _, stream := range []bool{false, true} {
		env := newEnv(t)
		body := `{"prompt":"Hi","echo":true,"logprobs":2,"max_tokens":5`
		if stream {
			body += `,"stream":true`
		}
		rec := env.do(t, http.MethodPost, "/v1/completions", body+"}")
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		r := env.eng.requests()[0]
		if !r.PromptLogprobs || r.PromptLogprobStart != 0 || r.PromptTopLogprobs != 2 || !r.Logprobs || r.TopLogprobs != 2 {
			t.Fatalf("engine request %+v", r)
		}
		var text string
		var lp wireCompletionLP
		if stream {
			for _, d := range readSSE(t, rec.Body.String()) {
				ch := decode[wireCompletion](t, []byte(d))
				text += ch.Choices[0].Text
				if l := ch.Choices[0].Logprobs; l != nil {
					lp.Tokens = append(lp.Tokens, l.Tokens...)
					lp.TokenLogprobs = append(lp.TokenLogprobs, l.TokenLogprobs...)
					lp.TopLogprobs = append(lp.TopLogprobs, l.TopLogprobs...)
					lp.TextOffset = append(lp.TextOffset, l.TextOffset...)
				}
			}
		} else {
			resp := decode[wireCompletion](t, rec.Body.Bytes())
			text, lp = resp.Choices[0].Text, *resp.Choices[0].Logprobs
		}
		if text != "<s>HiHello" {
			t.Errorf("stream=%v: text %q", stream, text)
		}
		// Reference: prompt token k scores -k/100 (the fake's rule), the
		// first has none; generated token i scores -(i+1)/10.
		wantTok := []string{"<s>", "H", "i", "H", "e", "l", "l", "o"}
		wantOff := []int{0, 3, 4, 5, 6, 7, 8, 9}
		if len(lp.Tokens) != len(wantTok) || len(lp.TokenLogprobs) != len(wantTok) || len(lp.TopLogprobs) != len(wantTok) {
			t.Fatalf("stream=%v: logprobs %+v", stream, lp)
		}
		for k := range wantTok {
			var want float64
			switch {
			case k == 0:
				if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
					t.Errorf("stream=%v: the first prompt token has logprob %v top %v, want null", stream, lp.TokenLogprobs[0], lp.TopLogprobs[0])
				}
				continue
			case k < 3:
				want = -float64(k) / 100
			default:
				want = -float64(k-3+1) / 10
			}
			if lp.Tokens[k] != wantTok[k] || lp.TextOffset[k] != wantOff[k] || lp.TokenLogprobs[k] == nil ||
				math.Abs(*lp.TokenLogprobs[k]-want) > 1e-6 || len(lp.TopLogprobs[k]) != 2 || lp.TopLogprobs[k]["z"] > -5+1e-6 {
				t.Errorf("stream=%v position %d: %q off %d lp %v top %v; want %q %d %v", stream, k, lp.Tokens[k], lp.TextOffset[k], lp.TokenLogprobs[k], lp.TopLogprobs[k], wantTok[k], wantOff[k], want)
			}
		}
	}
}

// max_tokens 0 with echo scores the prompt: nothing generated is returned.
func TestEchoMaxTokensZero(t *testing.T) {
	env := newEnv(t)
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"abc","echo":true,"max_tokens":0,"logprobs":0}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	resp := decode[wireCompletion](t, rec.Body.Bytes())
	c := resp.Choices[0]
	if c.Text != "<s>abc" || *c.FinishReason != "length" || len(c.Logprobs.Tokens) != 4 || c.Logprobs.TopLogprobs != nil {
		t.Errorf("choice %+v", c)
	}
	if resp.Usage != (usage{PromptTokens: 4, TotalTokens: 4}) || env.eng.requests()[0].MaxTokens != 1 {
		t.Errorf("usage %+v, engine max_tokens %d", resp.Usage, env.eng.requests()[0].MaxTokens)
	}
	if lp := c.Logprobs.TokenLogprobs[3]; lp == nil || math.Abs(*lp+0.03) > 1e-6 {
		t.Errorf("token 3 logprob %v", lp)
	}
}

// With n > 1 every choice echoes the prompt and its logprobs, which the
// engine sends once (on choice 0).
func TestEchoN(t *testing.T) {
	env := newEnv(t, withChoiceScript(perChoice([]string{"x", "yz"}, "length")))
	rec := env.do(t, http.MethodPost, "/v1/completions", `{"prompt":"Hi","echo":true,"n":2,"logprobs":1}`)
	var resp wireCompletion
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Choices) != 2 {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	for i, want := range []string{"<s>Hix", "<s>Hiyz"} {
		c := resp.Choices[i]
		if c.Text != want || len(c.Logprobs.Tokens) != len(want)-2 || c.Logprobs.TokenLogprobs[2] == nil {
			t.Errorf("choice %d: %+v", i, c)
		}
	}
}
