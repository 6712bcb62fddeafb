package compile

import (
	"fmt"
	"math/big"
	"strings"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// bound is one end of a numeric interval; v nil means unbounded.
type bound struct {
	v      *big.Rat
	strict bool
}

var digit = g.Bytes('0', '9')

// numberExpr is the JSON numbers in the interval (lo, hi) — canonical
// integers when integer — written without an exponent. Unbounded sides
// are limited to maxIntDigits integer digits like every other number.
func numberExpr(lo, hi bound, integer bool) (g.Expr, error) {
	if lo.v != nil && hi.v != nil {
		if c := lo.v.Cmp(hi.v); c > 0 || c == 0 && (lo.strict || hi.strict) {
			return nil, fmt.Errorf("the interval from %s to %s is empty", lo.v.RatString(), hi.v.RatString())
		}
	}
	if integer {
		return integerExpr(lo, hi)
	}
	var alts []g.Expr
	zero := new(big.Rat)
	// Negative numbers: magnitudes in (max(0, -hi), -lo]; -0 never.
	if lo.v == nil || lo.v.Sign() < 0 {
		mlo := bound{v: zero, strict: true}
		if hi.v != nil && hi.v.Sign() < 0 {
			mlo = bound{v: new(big.Rat).Neg(hi.v), strict: hi.strict}
		}
		mhi := bound{}
		if lo.v != nil {
			mhi = bound{v: new(big.Rat).Neg(lo.v), strict: lo.strict}
		}
		m, err := magnitude(mlo, mhi)
		if err != nil {
			return nil, err
		}
		if m != nil {
			alts = append(alts, g.Seq(g.Lit("-"), m))
		}
	}
	// Zero and positive numbers.
	if hi.v == nil || hi.v.Sign() > 0 || hi.v.Sign() == 0 && !hi.strict {
		mlo := bound{v: zero}
		if lo.v != nil && lo.v.Sign() >= 0 {
			mlo = lo
		}
		m, err := magnitude(mlo, hi)
		if err != nil {
			return nil, err
		}
		if m != nil {
			alts = append(alts, m)
		}
	}
	if len(alts) == 0 {
		return nil, fmt.Errorf("no number lies in the interval")
	}
	return g.Alt(alts...), nil
}

// integerExpr is the canonical integers in (lo, hi).
func integerExpr(lo, hi bound) (g.Expr, error) {
	var a, b *big.Int
	if lo.v != nil {
		a = ceilRat(lo.v)
		if lo.strict && lo.v.IsInt() {
			a.Add(a, big.NewInt(1))
		}
	}
	if hi.v != nil {
		b = floorRat(hi.v)
		if hi.strict && hi.v.IsInt() {
			b.Sub(b, big.NewInt(1))
		}
	}
	if a != nil && b != nil && a.Cmp(b) > 0 {
		return nil, fmt.Errorf("no integer lies between %s and %s", lo.v.RatString(), hi.v.RatString())
	}
	var alts []g.Expr
	if a == nil || a.Sign() < 0 {
		// Negative: magnitudes in [max(1, -b), -a].
		mlo := big.NewInt(1)
		if b != nil && b.Sign() < 0 {
			mlo = new(big.Int).Neg(b)
		}
		var mhi *big.Int
		if a != nil {
			mhi = new(big.Int).Neg(a)
		}
		if e := posIntRange(mlo, mhi); e != nil {
			alts = append(alts, g.Seq(g.Lit("-"), e))
		}
	}
	if b == nil || b.Sign() >= 0 {
		mlo := new(big.Int)
		if a != nil && a.Sign() > 0 {
			mlo = a
		}
		if e := posIntRange(mlo, b); e != nil {
			alts = append(alts, e)
		}
	}
	return g.Alt(alts...), nil
}

func floorRat(r *big.Rat) *big.Int {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	return q
}

func ceilRat(r *big.Rat) *big.Int {
	q := floorRat(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// posIntRange is the canonical decimals of the integers in [a, b], a >= 0
// (b nil: unbounded, up to max(maxIntDigits, digits of a) digits); nil
// when the range is empty.
func posIntRange(a, b *big.Int) g.Expr {
	if b != nil && a.Cmp(b) > 0 {
		return nil
	}
	as := a.String()
	if b == nil {
		alts := []g.Expr{sameLen(as, strings.Repeat("9", len(as)))}
		if longest := max(maxIntDigits, len(as)); longest > len(as) {
			alts = append(alts, g.Seq(g.Bytes('1', '9'), g.Repeat(digit, len(as), longest-1)))
		}
		return g.Alt(alts...)
	}
	bs := b.String()
	var alts []g.Expr
	for d := len(as); d <= len(bs); d++ {
		lo, hi := as, bs
		if d > len(as) {
			lo = "1" + strings.Repeat("0", d-1)
		}
		if d < len(bs) {
			hi = strings.Repeat("9", d)
		}
		alts = append(alts, sameLen(lo, hi))
	}
	return g.Alt(alts...)
}

// sameLen is the digit strings of len(lo) between lo and hi inclusive.
func sameLen(lo, hi string) g.Expr {
	n := len(lo)
	if n == 0 {
		return g.Empty()
	}
	if lo[0] == hi[0] {
		return g.Seq(g.Lit(lo[:1]), sameLen(lo[1:], hi[1:]))
	}
	if strings.Trim(lo[1:], "0") == "" && strings.Trim(hi[1:], "9") == "" {
		return g.Seq(g.Bytes(lo[0], hi[0]), g.Repeat(digit, n-1, n-1))
	}
	alts := []g.Expr{g.Seq(g.Lit(lo[:1]), sameLen(lo[1:], strings.Repeat("9", n-1)))}
	if lo[0]+1 <= hi[0]-1 {
		alts = append(alts, g.Seq(g.Bytes(lo[0]+1, hi[0]-1), g.Repeat(digit, n-1, n-1)))
	}
	alts = append(alts, g.Seq(g.Lit(hi[:1]), sameLen(strings.Repeat("0", n-1), hi[1:])))
	return g.Alt(alts...)
}

// decimal splits r >= 0, a finite decimal (every JSON number is), into its
// integer part and its fraction digits without trailing zeros.
func decimal(r *big.Rat) (*big.Int, string, error) {
	d := new(big.Int).Set(r.Denom())
	k := 0
	ten, two, five := big.NewInt(10), big.NewInt(2), big.NewInt(5)
	m := new(big.Int)
	for d.Cmp(big.NewInt(1)) != 0 {
		if k > 400 {
			return nil, "", fmt.Errorf("bound %s is not a finite decimal of at most 400 digits", r.RatString())
		}
		switch {
		case m.Mod(d, ten).Sign() == 0:
			d.Quo(d, ten)
		case m.Mod(d, two).Sign() == 0:
			d.Quo(d, two)
		case m.Mod(d, five).Sign() == 0:
			d.Quo(d, five)
		default:
			return nil, "", fmt.Errorf("bound %s is not a finite decimal", r.RatString())
		}
		k++
	}
	s := r.FloatString(k)
	ip, fp, _ := strings.Cut(s, ".")
	i, _ := new(big.Int).SetString(ip, 10)
	return i, strings.TrimRight(fp, "0"), nil
}

// magnitude is the non-negative decimals (integer part, optional
// fraction) in (lo, hi); lo.v is set, hi.v may be nil. nil when empty.
func magnitude(lo, hi bound) (g.Expr, error) {
	li, lf, err := decimal(lo.v)
	if err != nil {
		return nil, err
	}
	lower := fracBound{s: lf, strict: lo.strict, active: lf != "" || lo.strict}
	if hi.v == nil {
		alts := []g.Expr{g.Seq(g.Lit(li.String()), fraction(lower, fracBound{}))}
		if e := posIntRange(new(big.Int).Add(li, big.NewInt(1)), nil); e != nil {
			alts = append(alts, g.Seq(e, fraction(fracBound{}, fracBound{})))
		}
		return g.Alt(alts...), nil
	}
	hiI, hf, err := decimal(hi.v)
	if err != nil {
		return nil, err
	}
	upper := fracBound{s: hf, strict: hi.strict, active: true}
	if li.Cmp(hiI) == 0 {
		if !feasible(lower, upper) {
			return nil, nil
		}
		return g.Seq(g.Lit(li.String()), fraction(lower, upper)), nil
	}
	alts := []g.Expr{g.Seq(g.Lit(li.String()), fraction(lower, fracBound{}))}
	if e := posIntRange(new(big.Int).Add(li, big.NewInt(1)), new(big.Int).Sub(hiI, big.NewInt(1))); e != nil {
		alts = append(alts, g.Seq(e, fraction(fracBound{}, fracBound{})))
	}
	if feasible(fracBound{}, upper) {
		alts = append(alts, g.Seq(g.Lit(hiI.String()), fraction(fracBound{}, upper)))
	}
	return g.Alt(alts...), nil
}

// fracBound bounds the fraction 0.D of a number by 0.s; inactive means no
// bound. Trailing zeros of s are irrelevant (stripped by decimal).
type fracBound struct {
	s      string
	strict bool
	active bool
}

// first is s's leading digit, or 0 when s is exhausted.
func (f fracBound) first() byte {
	if f.s == "" {
		return '0'
	}
	return f.s[0]
}

func (f fracBound) rest() fracBound {
	if f.s != "" {
		f.s = f.s[1:]
	}
	return f
}

// feasible reports whether some fraction satisfies both bounds.
func feasible(lo, hi fracBound) bool {
	if !lo.active || !hi.active {
		return !hi.active || strings.Trim(hi.s, "0") != "" || !hi.strict
	}
	c := strings.Compare(padRight(lo.s, len(hi.s)), padRight(hi.s, len(lo.s)))
	return c < 0 || c == 0 && !lo.strict && !hi.strict
}

func padRight(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat("0", n-len(s))
}

// fraction is the optional fraction part ("" or "." and digits) of a
// number whose fraction 0.D lies within lo and hi.
func fraction(lo, hi fracBound) g.Expr {
	var alts []g.Expr
	if emptyOK(lo, hi) {
		alts = append(alts, g.Empty())
	}
	if d := digitsFrom(lo, hi, true); d != nil {
		alts = append(alts, g.Seq(g.Lit("."), d))
	}
	return g.Alt(alts...)
}

// emptyOK: no more digits (the rest is 0) satisfies both bounds.
func emptyOK(lo, hi fracBound) bool {
	loOK := !lo.active || strings.Trim(lo.s, "0") == "" && !lo.strict
	hiOK := !hi.active || !hi.strict || strings.Trim(hi.s, "0") != ""
	return loOK && hiOK
}

// digitsFrom is the digit strings D (non-empty when nonEmpty) with 0.D
// within the bounds; nil when there is none. Each recursion consumes a
// digit of an active bound, and the two states that would repeat forever
// (a lower bound used up but strict, an upper bound used up) are closed
// forms, so building terminates.
func digitsFrom(lo, hi fracBound, nonEmpty bool) g.Expr {
	if lo.active && lo.s == "" && !lo.strict {
		lo = fracBound{} // >= 0 always holds
	}
	many := g.Star(digit)
	if nonEmpty {
		many = g.Plus(digit)
	}
	switch {
	case hi.active && hi.s == "":
		// <= 0 (or < 0): only zeros, and only if nothing needs more.
		if hi.strict || lo.active {
			return nil
		}
		if nonEmpty {
			return g.Plus(g.Lit("0"))
		}
		return g.Star(g.Lit("0"))
	case !lo.active && !hi.active:
		return many
	case lo.active && lo.s == "" && !hi.active:
		// > 0: some non-zero digit.
		return g.Seq(g.Star(g.Lit("0")), g.Bytes('1', '9'), g.Star(digit))
	}
	var alts []g.Expr
	if !nonEmpty && emptyOK(lo, hi) {
		alts = append(alts, g.Empty())
	}
	lo0, hi0 := byte('0'), byte('9')
	if lo.active {
		lo0 = lo.first()
	}
	if hi.active {
		hi0 = hi.first()
	}
	// A digit strictly between the bounds' digits frees both bounds.
	if lo0+1 <= hi0-1 {
		alts = append(alts, g.Seq(g.Bytes(lo0+1, hi0-1), g.Star(digit)))
	}
	// follow adds digit d followed by what the next bounds allow.
	follow := func(d byte, nlo, nhi fracBound) {
		if !feasible(nlo, nhi) {
			return
		}
		if e := digitsFrom(nlo, nhi, false); e != nil {
			alts = append(alts, g.Seq(g.Lit(string(d)), e))
		}
	}
	next := func(f fracBound) fracBound {
		if !f.active {
			return f
		}
		return f.rest()
	}
	switch {
	case lo0 == hi0:
		follow(lo0, next(lo), next(hi))
	case lo0 < hi0:
		follow(lo0, next(lo), fracBound{}) // the upper bound is free
		follow(hi0, fracBound{}, next(hi)) // the lower bound is free
	}
	if len(alts) == 0 {
		return nil
	}
	return g.Alt(alts...)
}
