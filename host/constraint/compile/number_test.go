package compile

import (
	"fmt"
	"math/big"
	"testing"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

func rat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic(s)
	}
	return r
}

// candidates are decimal strings: canonical ones and malformed ones.
func candidates() []string {
	var out []string
	for i := -130; i <= 130; i++ {
		out = append(out, fmt.Sprint(i))
		for _, f := range []string{"0", "00", "05", "1", "25", "249", "25001", "5", "50", "501", "9", "99", "999"} {
			s := fmt.Sprintf("%d.%s", i, f)
			if i == 0 {
				s = "-0." + f
				out = append(out, s)
				s = "0." + f
			}
			out = append(out, s)
		}
	}
	return append(out, "-0", "01", "1.", ".5", "+1", "1e2", "")
}

// inInterval is the reference: is s a canonical decimal in (lo, hi)?
func inInterval(s string, lo, hi bound, integer bool) bool {
	r, ok := new(big.Rat).SetString(s)
	if !ok || s == "" || s[0] == '+' || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for _, bad := range []string{"e", "E"} {
		for i := range s {
			if s[i:i+1] == bad {
				return false
			}
		}
	}
	neg := s[0] == '-'
	body := s
	if neg {
		body = s[1:]
	}
	if len(body) > 1 && body[0] == '0' && body[1] != '.' {
		return false // leading zero
	}
	if neg && r.Sign() == 0 {
		return false // -0 is never generated
	}
	if integer {
		for i := range s {
			if s[i] == '.' {
				return false
			}
		}
	}
	if lo.v != nil {
		if c := r.Cmp(lo.v); c < 0 || c == 0 && lo.strict {
			return false
		}
	}
	if hi.v != nil {
		if c := r.Cmp(hi.v); c > 0 || c == 0 && hi.strict {
			return false
		}
	}
	return true
}

func TestNumberIntervalsMatchReference(t *testing.T) {
	type iv struct {
		lo, hi  bound
		integer bool
	}
	b := func(s string, strict bool) bound {
		if s == "" {
			return bound{}
		}
		return bound{v: rat(s), strict: strict}
	}
	var cases []iv
	ends := []string{"", "0", "-1.05", "-0.001", "0.25", "2.5", "10", "99.5", "-100", "0.5", "0.25001", "1"}
	for _, lo := range ends {
		for _, hi := range ends {
			for _, ls := range []bool{false, true} {
				for _, hs := range []bool{false, true} {
					for _, integer := range []bool{false, true} {
						l, h := b(lo, ls), b(hi, hs)
						if l.v != nil && h.v != nil {
							if c := l.v.Cmp(h.v); c > 0 || c == 0 && (ls || hs) {
								continue
							}
						}
						cases = append(cases, iv{l, h, integer})
					}
				}
			}
		}
	}
	cands := candidates()
	for _, c := range cases {
		e, err := numberExpr(c.lo, c.hi, c.integer)
		if err != nil {
			if c.integer {
				continue // no integer inside (checked below by the reference)
			}
			t.Fatalf("%+v: %v", c, err)
		}
		bd := g.NewBuilder()
		bd.Define("root", e)
		gr, err := bd.Build("root")
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		p := program(t, gr)
		for _, s := range cands {
			m := p.Start()
			got := m.AdvanceBytes([]byte(s)) == nil && m.Accepting()
			if want := inInterval(s, c.lo, c.hi, c.integer); got != want {
				t.Fatalf("interval lo=%v(%v) hi=%v(%v) integer=%v: %q accepted=%v, want %v",
					c.lo.v, c.lo.strict, c.hi.v, c.hi.strict, c.integer, s, got, want)
			}
		}
	}
}
