package sampler

import (
	"strings"
	"testing"
)

const good = `{"abi":1,"kind":"sampler","name":"standard","version":"1.0.0","candidates":64,"argmax_invariant":false,
"preops":["penalties","bias","temperature"],"params":[{"name":"top_p","type":"float","min":0,"max":1,"default":1}]}`

func TestParseDescriptor(t *testing.T) {
	d, err := ParseDescriptor([]byte(good))
	if err != nil || d.Candidates != 64 || len(d.Params) != 1 {
		t.Fatalf("%+v %v", d, err)
	}
	tests := []struct{ name, from, to, want string }{
		{"abi", `"abi":1`, `"abi":2`, "abi 2"},
		{"kind", `"kind":"sampler"`, `"kind":"configurator"`, "kind"},
		{"name path", `"name":"standard"`, `"name":"../x"`, "name"},
		{"candidates 0", `"candidates":64`, `"candidates":0`, "candidates 0"},
		{"candidates big", `"candidates":64`, `"candidates":1025`, "candidates 1025"},
		{"unknown preop", `"bias"`, `"magic"`, "preop"},
		{"shadowed param", `"name":"top_p"`, `"name":"temperature"`, "already defined"},
		{"default out", `"default":1}`, `"default":2}`, "outside"},
		{"int not int", `"type":"float","min":0,"max":1,"default":1`, `"type":"int","min":0,"max":1.5,"default":1`, "int"},
		{"bad type", `"type":"float"`, `"type":"string"`, "type"},
		{"unknown field", `"abi":1`, `"abi":1,"extra":true`, "unknown field"},
		{"nan-ish", `"max":1`, `"max":1e300`, "finite"},
		{"history", `"argmax_invariant":false`, `"argmax_invariant":false,"history":5000`, "history"},
	}
	for _, tc := range tests {
		src := strings.Replace(good, tc.from, tc.to, 1)
		if src == good {
			t.Fatalf("%s: replacement did not apply", tc.name)
		}
		if _, err := ParseDescriptor([]byte(src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, s := range []string{"standard", "top-n-sigma", "a.b_c", "x1"} {
		if !ValidName(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{"", "..", ".x", "a/b", "A", strings.Repeat("a", 65), "a b", "-x"} {
		if ValidName(s) {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestRandUniform(t *testing.T) {
	const n = 20000
	var buckets [10]int
	for i := range uint64(n) {
		u := Rand(42, i, 3)
		if u < 0 || u >= 1 {
			t.Fatalf("%v out of [0,1)", u)
		}
		buckets[int(u*10)]++
	}
	for i, c := range buckets {
		if c < n/10-300 || c > n/10+300 {
			t.Fatalf("bucket %d has %d of %d", i, c, n)
		}
	}
	if Rand(1, 2, 0) == Rand(1, 2, 1) {
		t.Fatal("streams 0 and 1 coincide")
	}
}

func FuzzParseDescriptor(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDescriptor(b)
		if err != nil {
			return
		}
		if d.Validate() != nil || d.Candidates < 1 || d.Candidates > MaxCandidates {
			t.Fatalf("accepted an invalid descriptor %+v", d)
		}
	})
}
