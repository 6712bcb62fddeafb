package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
)

// generated is a /generate answer: output ids and, with return_logprob,
// each position's raw top logprobs as [logprob, id] pairs.
type generated struct {
	OutputIDs []int32 `json:"output_ids"`
	Meta      struct {
		Top [][][2]float64 `json:"output_top_logprobs"`
	} `json:"meta_info"`
}

func postDecode(t *testing.T, url, body string, out any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

// TestLogitBiasServed: on the real serve stack (stories260K, the built-in
// policies), logit_bias -100 on the greedy token makes the server choose
// another, and +100 on a token makes it choose that token at every step,
// on the host's greedy path, through a named policy and when sampling.
func TestLogitBiasServed(t *testing.T) {
	ts, _, _ := fullServer(t, sharedModel(t), "k")
	gen := func(top, sampling string) []int32 {
		var g generated
		postDecode(t, ts.URL+"/generate", `{"text":"Once upon a time",`+top+`"sampling_params":{"max_new_tokens":12,"ignore_eos":true,`+sampling+`}}`, &g)
		return g.OutputIDs
	}
	base := gen("", `"temperature":0`)
	first := base[0]
	force := int32(300)
	if first == force {
		force = 301
	}
	for _, path := range []struct{ name, top, sampling string }{
		{"host greedy", "", `"temperature":0`},
		{"greedy policy", `"sampler":"greedy",`, `"temperature":0`},
		{"standard policy sampling", "", `"temperature":0.9,"seed":5`},
	} {
		banned := gen(path.top, path.sampling+fmt.Sprintf(`,"logit_bias":{"%d":-100}`, first))
		for i, id := range banned {
			if id == first {
				t.Errorf("%s: bias -100 on %d, generated at %d: %v", path.name, first, i, banned)
			}
		}
		forced := gen(path.top, path.sampling+fmt.Sprintf(`,"logit_bias":{"%d":100}`, force))
		for i, id := range forced {
			if id != force {
				t.Errorf("%s: bias +100 on %d, got %d at %d: %v", path.name, force, id, i, forced)
				break
			}
		}
	}
	// The OpenAI routes take the same field at the top level.
	var c struct {
		Choices []struct{ Text string }
	}
	postDecode(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":12,"temperature":0}`, &c)
	plain := c.Choices[0].Text
	postDecode(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"logit_bias":{"%d":-100}}`, first), &c)
	if c.Choices[0].Text == plain {
		t.Errorf("completions: the banned first token left the text unchanged: %q", plain)
	}
}

// TestPenaltiesServed: a served greedy request with frequency and presence
// penalties chooses, at every step, the argmax of the model's raw logprobs
// minus count·frequency + presence over the tokens generated so far — the
// rule computed here from the response's own raw top-20 logprobs (a common
// shift of all logits, so the argmax is the same). Without penalties the
// output repeats tokens; with them it changes.
func TestPenaltiesServed(t *testing.T) {
	ts, _, _ := fullServer(t, sharedModel(t), "k")
	const freq, pres = 0.6, 0.4
	run := func(penalties string) generated {
		var g generated
		postDecode(t, ts.URL+"/generate", `{"text":"Once upon a time","return_logprob":true,"top_logprobs_num":20,`+
			`"sampling_params":{"max_new_tokens":40,"ignore_eos":true,"temperature":0`+penalties+`}}`, &g)
		return g
	}
	base := run("")
	pen := run(fmt.Sprintf(`,"frequency_penalty":%v,"presence_penalty":%v`, freq, pres))
	if fmt.Sprint(base.OutputIDs) == fmt.Sprint(pen.OutputIDs) {
		t.Fatalf("the penalties changed nothing: %v", base.OutputIDs)
	}
	counts := map[int32]int{}
	for step, id := range pen.OutputIDs {
		top := pen.Meta.Top[step]
		adj := func(tok int32, v float64) float64 {
			if c := counts[tok]; c > 0 {
				v -= float64(c)*freq + pres
			}
			return v
		}
		best, bestV, chosenV := int32(-1), 0.0, math.Inf(-1)
		for _, e := range top {
			tok, v := int32(e[1]), adj(int32(e[1]), e[0])
			if best < 0 || v > bestV {
				best, bestV = tok, v
			}
			if tok == id {
				chosenV = v
			}
		}
		// A token outside the top 20 has a raw logprob below the 20th and
		// penalties only lower it: the reference is decided when the best
		// adjusted value beats the 20th raw one.
		if floor := top[len(top)-1][0]; bestV < floor {
			t.Fatalf("step %d: undecidable from the top 20 (best %v < floor %v)", step, bestV, floor)
		}
		// The server adjusts float32 logits, the rule here float64
		// logprobs: a near-tie may go either way.
		if id != best && bestV-chosenV > 1e-4 {
			t.Fatalf("step %d: chose %d, the penalty rule says %d (counts %v)", step, id, best, counts)
		}
		counts[id]++
	}
}

// TestAPIKeyCoversServe: with --api-key, serve's whole handler needs the
// key except /health and the dashboard's static shell.
func TestAPIKeyCoversServe(t *testing.T) {
	ts, _, _ := fullServer(t, sharedModel(t), "admin-k", "api-k")
	for _, tc := range []struct {
		path   string
		open   bool
		status int // with the key
	}{
		{"/health", true, 200},
		{"/", true, 200},
		{"/ui/js/app.js", true, 200},
		{"/metrics", false, 200},
		{"/v1/memory", false, 200},
		{"/v1/models", false, 200},
		{"/ui/api/config", false, 200},
		{"/ui/api/work", false, 200},
		{"/ui/api/plugins", false, 200},
	} {
		for _, key := range []string{"", "api-k"} {
			req, _ := http.NewRequest(http.MethodGet, ts.URL+tc.path, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := tc.status
			if key == "" && !tc.open {
				want = 401
			}
			if resp.StatusCode != want {
				t.Errorf("GET %s with key %q: %d, want %d", tc.path, key, resp.StatusCode, want)
			}
		}
	}
}
