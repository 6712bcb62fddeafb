package grammar

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// jsonish is a small recursive grammar: JSON-like values with objects,
// arrays, strings (with escapes and any non-ASCII character), integers
// and literals.
func jsonish(t testing.TB) *Grammar {
	t.Helper()
	b := NewBuilder()
	ws := Star(Chars(" \n"))
	b.Define("value", Alt(Named("object"), Named("array"), Named("string"), Named("int"), Lit("true"), Lit("null")))
	b.Define("object", Seq(Lit("{"), ws, Opt(Seq(Named("member"), Star(Seq(ws, Lit(","), ws, Named("member"))))), ws, Lit("}")))
	b.Define("member", Seq(Named("string"), ws, Lit(":"), ws, Named("value")))
	b.Define("array", Seq(Lit("["), ws, Opt(Seq(Named("value"), Star(Seq(ws, Lit(","), ws, Named("value"))))), ws, Lit("]")))
	b.Define("string", Seq(Lit(`"`), Star(Alt(Class(true, RuneRange{'"', '"'}, RuneRange{'\\', '\\'}, RuneRange{0, 0x1f}), Seq(Lit(`\`), Chars(`"\nt`)))), Lit(`"`)))
	b.Define("int", Seq(Opt(Lit("-")), Alt(Lit("0"), Seq(Bytes('1', '9'), Star(Bytes('0', '9'))))))
	g, err := b.Build("value")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// testVocab has every single byte, common JSON pieces and multi-byte
// pieces that split UTF-8 characters, plus an EOG and a special token.
func testVocab(t testing.TB, r *rand.Rand, extra int) (*Vocab, [][]byte) {
	t.Helper()
	var toks [][]byte
	for b := 0; b < 256; b++ {
		toks = append(toks, []byte{byte(b)})
	}
	for _, s := range []string{`{"`, `":`, `",`, `"}`, `},`, `[`, `]}`, `true`, `null`, `nul`, `12`, `-0`, `00`, ` "`, `\n`, `\"`, `é`, "\xc3", "\xa9\"", "日本", "\xe6\x97", "\xa5\xe6", "💡", `"a":1}`, `{}`, `{"a": [1, 2]}`} {
		toks = append(toks, []byte(s))
	}
	alphabet := []byte(`{}[]":,\ 0123456789-truenlabcé`)
	for range extra {
		n := 1 + r.IntN(6)
		s := make([]byte, n)
		for i := range s {
			s[i] = alphabet[r.IntN(len(alphabet))]
		}
		toks = append(toks, s)
	}
	toks = append(toks, nil, nil) // an EOG and a special token
	flags := make([]uint8, len(toks))
	flags[len(toks)-2] = FlagEOG
	flags[len(toks)-1] = FlagSpecial
	v, err := NewVocab(toks, flags)
	if err != nil {
		t.Fatal(err)
	}
	return v, toks
}

// bruteMask is the reference: token by token, does advancing a copy of m
// succeed?
func bruteMask(t testing.TB, m *Matcher) []uint32 {
	t.Helper()
	v := m.p.vocab
	out := make([]uint32, v.Words())
	for id := int32(0); int(id) < v.n; id++ {
		if m.Clone().Advance(id) == nil {
			out[id>>5] |= 1 << (id & 31)
		}
	}
	return out
}

func TestMaskMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	v, _ := testVocab(t, r, 400)
	p, err := Compile(jsonish(t), v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for walk := range 30 {
		m := p.Start()
		var text []byte
		for step := 0; step < 60; step++ {
			mk, err := m.Mask(0)
			if err != nil {
				t.Fatal(err)
			}
			want := bruteMask(t, m)
			for w := range want {
				if want[w] != mk.Bits[w] {
					t.Fatalf("walk %d after %q: mask word %d = %032b, brute force %032b", walk, text, w, mk.Bits[w], want[w])
				}
			}
			if mk.Complete {
				if !mk.Accept {
					t.Fatalf("complete but not accepting after %q", text)
				}
				break
			}
			// Pick an allowed non-EOG token at random.
			var allowed []int32
			for id := int32(0); int(id) < v.n; id++ {
				if Allowed(mk.Bits, id) && !v.IsEOG(id) {
					allowed = append(allowed, id)
				}
			}
			if len(allowed) == 0 {
				t.Fatalf("no token allowed after %q", text)
			}
			id := allowed[r.IntN(len(allowed))]
			if err := m.Advance(id); err != nil {
				t.Fatal(err)
			}
			text = append(text, v.Bytes(id)...)
		}
	}
}

func TestBudgetClosesInTime(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	v, _ := testVocab(t, r, 200)
	p, err := Compile(jsonish(t), v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, budget := range []int{4, 9, 20, 40} {
		for walk := range 40 {
			m := p.Start()
			var text []byte
			for left := budget; left > 0; left-- {
				mk, err := m.Mask(left)
				if err != nil {
					t.Fatal(err)
				}
				if mk.Complete {
					break
				}
				var allowed []int32
				for id := int32(0); int(id) < v.n; id++ {
					if Allowed(mk.Bits, id) && !v.IsEOG(id) {
						allowed = append(allowed, id)
					}
				}
				if len(allowed) == 0 {
					break // only EOG: accepted
				}
				id := allowed[r.IntN(len(allowed))]
				if err := m.Advance(id); err != nil {
					t.Fatal(err)
				}
				text = append(text, v.Bytes(id)...)
			}
			if !m.Accepting() {
				t.Fatalf("budget %d walk %d: %q is not complete", budget, walk, text)
			}
		}
	}
}

func TestEOGOnlyWhenAccepting(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	v, toks := testVocab(t, r, 0)
	eog, special := int32(len(toks)-2), int32(len(toks)-1)
	p, err := Compile(jsonish(t), v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := p.Start()
	if err := m.AdvanceBytes([]byte(`{"a": 1`)); err != nil {
		t.Fatal(err)
	}
	mk, _ := m.Mask(0)
	if Allowed(mk.Bits, eog) || Allowed(mk.Bits, special) || mk.Accept {
		t.Fatal("EOG or special allowed inside an object")
	}
	if err := m.Clone().Advance(eog); !errors.Is(err, ErrRefused) {
		t.Fatalf("EOG inside an object: %v", err)
	}
	if err := m.AdvanceBytes([]byte(`}`)); err != nil {
		t.Fatal(err)
	}
	mk, _ = m.Mask(0)
	if !Allowed(mk.Bits, eog) || Allowed(mk.Bits, special) || !mk.Accept || !mk.Complete {
		t.Fatalf("after the object: accept %v complete %v eog %v", mk.Accept, mk.Complete, Allowed(mk.Bits, eog))
	}
	if Count(mk.Bits) != 1 {
		t.Fatalf("%d tokens allowed after a complete object, want only EOG", Count(mk.Bits))
	}
	if err := m.Advance(eog); err != nil || !m.Done() {
		t.Fatalf("EOG at the end: %v", err)
	}
	if err := m.Advance(0); err == nil {
		t.Fatal("token after EOG accepted")
	}
}

func TestUTF8Sequences(t *testing.T) {
	cases := []RuneRange{{0, 0x7f}, {0x80, 0x7ff}, {0x41, 0x3042}, {0xd000, 0xe100}, {0xfff0, 0x10010}, {0x10fff0, 0x10ffff}, {0, utf8.MaxRune}, {0x3b1, 0x3c9}}
	for _, c := range cases {
		seqs := utf8Sequences(c.Lo, c.Hi)
		match := func(b []byte) bool {
			for _, s := range seqs {
				if len(s) != len(b) {
					continue
				}
				ok := true
				for i, e := range s {
					if b[i] < e.Lo || b[i] > e.Hi {
						ok = false
						break
					}
				}
				if ok {
					return true
				}
			}
			return false
		}
		for r := rune(0); r <= utf8.MaxRune; r++ {
			if r >= 0xd800 && r <= 0xdfff {
				continue
			}
			var buf [4]byte
			n := utf8.EncodeRune(buf[:], r)
			want := r >= c.Lo && r <= c.Hi
			if got := match(buf[:n]); got != want {
				t.Fatalf("range %x-%x: rune %x matched=%v", c.Lo, c.Hi, r, got)
			}
		}
		// Nothing but valid encodings: every byte string the sequences
		// accept decodes to one rune in range.
		for _, s := range seqs {
			b := make([]byte, len(s))
			for i, e := range s {
				b[i] = e.Hi
			}
			r, n := utf8.DecodeRune(b)
			if r == utf8.RuneError || n != len(b) || r < c.Lo || r > c.Hi {
				t.Fatalf("range %x-%x: sequence %v accepts %x", c.Lo, c.Hi, s, b)
			}
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	cases := map[string]struct {
		g    *Grammar
		want string
	}{
		"left recursion": {&Grammar{Rules: []Rule{{Name: "a", Alts: [][]Elem{{Ref(0), Byte('x', 'x')}, {Byte('y', 'y')}}}}}, "left-recursive"},
		"nullable left recursion": {&Grammar{Rules: []Rule{
			{Name: "a", Alts: [][]Elem{{Ref(1), Ref(0), Byte('x', 'x')}, {Byte('y', 'y')}}},
			{Name: "e", Alts: [][]Elem{{}, {Byte('z', 'z')}}}}}, "left-recursive"},
		"unproductive": {&Grammar{Rules: []Rule{{Name: "a", Alts: [][]Elem{{Byte('x', 'x'), Ref(0)}}}}}, "no finite string"},
		"dangling":     {&Grammar{Rules: []Rule{{Name: "a", Alts: [][]Elem{{Ref(3)}}}}}, "references rule 3"},
		"empty range":  {&Grammar{Rules: []Rule{{Name: "a", Alts: [][]Elem{{Byte('z', 'a')}}}}}, "empty byte range"},
		"no alts":      {&Grammar{Rules: []Rule{{Name: "a"}}}, "no alternatives"},
	}
	for name, c := range cases {
		err := c.g.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestBinaryRoundTrip(t *testing.T) {
	g := jsonish(t)
	b, err := g.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	h, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := h.MarshalBinary()
	if string(b) != string(b2) {
		t.Fatal("round trip changed the grammar")
	}
	for i := range b {
		if _, err := Decode(b[:i]); err == nil {
			t.Fatalf("truncation at %d accepted", i)
		}
	}
}

func TestVocabRoundTrip(t *testing.T) {
	toks := [][]byte{[]byte("a"), nil, []byte("ab"), []byte("é"), []byte("a")}
	flags := []uint8{0, FlagEOG, 0, 0, 0}
	v, err := DecodeVocab(MarshalVocab(toks, flags))
	if err != nil {
		t.Fatal(err)
	}
	if v.Size() != 5 || !v.IsEOG(1) || string(v.Bytes(3)) != "é" || v.Bytes(1) != nil {
		t.Fatalf("decoded %+v", v)
	}
	// Tokens with equal bytes share a trie node.
	if v.Nodes() != 4 { // a, ab, 0xc3, 0xc3 0xa9
		t.Fatalf("%d trie nodes, want 4", v.Nodes())
	}
}

func FuzzDecode(f *testing.F) {
	g := jsonish(f)
	b, _ := g.MarshalBinary()
	f.Add(b)
	f.Add([]byte("KVG1\x01\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Decode(data)
		if err != nil {
			return
		}
		v, err := NewVocab([][]byte{[]byte("a"), []byte("{"), []byte("\""), nil}, []uint8{0, 0, 0, FlagEOG})
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(g, v, Options{MaxConfigs: 1000})
		if err != nil {
			return
		}
		m := p.Start()
		for range 8 {
			mk, err := m.Mask(0)
			if err != nil || mk.Complete {
				return
			}
			for id := int32(0); id < 3; id++ {
				if Allowed(mk.Bits, id) {
					if err := m.Advance(id); err != nil {
						t.Fatalf("allowed token %d refused: %v", id, err)
					}
					break
				}
			}
		}
	})
}
