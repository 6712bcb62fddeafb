package compile

import (
	"slices"
	"strings"

	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// Formats lists the string formats a schema may ask for. Each grammar
// produces only values every validator accepts: dates stop at the 28th of
// February (the 29th depends on the year), times never use a leap second,
// emails stay within RFC 5321's length limits with plain atoms and labels.
var Formats = []string{"date", "date-time", "email", "ipv4", "time", "uuid"}

// formatExpr is the JSON string (quotes included) of a format; the
// characters used never need escaping.
func formatExpr(name string) (g.Expr, bool) {
	var e g.Expr
	switch name {
	case "date":
		e = dateExpr()
	case "time":
		e = timeExpr()
	case "date-time":
		e = g.Seq(dateExpr(), g.Chars("T"), timeExpr())
	case "uuid":
		hex := g.Alt(g.Bytes('0', '9'), g.Bytes('a', 'f'))
		e = g.Seq(g.Repeat(hex, 8, 8), g.Lit("-"), g.Repeat(hex, 4, 4), g.Lit("-"), g.Repeat(hex, 4, 4), g.Lit("-"),
			g.Repeat(hex, 4, 4), g.Lit("-"), g.Repeat(hex, 12, 12))
	case "email":
		atomChar := g.Alt(g.Bytes('a', 'z'), g.Bytes('A', 'Z'), g.Bytes('0', '9'), g.Chars("_+-"))
		atom := g.Repeat(atomChar, 1, 16)
		label := g.Repeat(g.Alt(g.Bytes('a', 'z'), g.Bytes('0', '9')), 1, 20)
		e = g.Seq(atom, g.Repeat(g.Seq(g.Lit("."), atom), 0, 2), g.Lit("@"),
			g.Repeat(g.Seq(label, g.Lit(".")), 1, 3), g.Repeat(g.Bytes('a', 'z'), 2, 10))
	case "ipv4":
		octet := g.Alt(g.Seq(g.Lit("25"), g.Bytes('0', '5')), g.Seq(g.Lit("2"), g.Bytes('0', '4'), digit),
			g.Seq(g.Lit("1"), digit, digit), g.Seq(g.Bytes('1', '9'), digit), digit)
		e = g.Seq(octet, g.Repeat(g.Seq(g.Lit("."), octet), 3, 3))
	default:
		return nil, false
	}
	return g.Seq(g.Lit(`"`), e, g.Lit(`"`)), true
}

func formatList() string { return strings.Join(slices.Sorted(slices.Values(Formats)), ", ") }

// dateExpr is YYYY-MM-DD with a day that exists in every year.
func dateExpr() g.Expr {
	d := digit
	day28 := g.Alt(g.Seq(g.Lit("0"), g.Bytes('1', '9')), g.Seq(g.Lit("1"), d), g.Seq(g.Lit("2"), g.Bytes('0', '8')))
	day30 := g.Alt(day28, g.Lit("29"), g.Lit("30"))
	day31 := g.Alt(day30, g.Lit("31"))
	month := g.Alt(
		g.Seq(g.Alt(g.Lit("01"), g.Lit("03"), g.Lit("05"), g.Lit("07"), g.Lit("08"), g.Lit("10"), g.Lit("12")), g.Lit("-"), day31),
		g.Seq(g.Alt(g.Lit("04"), g.Lit("06"), g.Lit("09"), g.Lit("11")), g.Lit("-"), day30),
		g.Seq(g.Lit("02-"), day28))
	return g.Seq(g.Repeat(d, 4, 4), g.Lit("-"), month)
}

// timeExpr is RFC 3339 full-time: HH:MM:SS, optional fraction, offset.
func timeExpr() g.Expr {
	d := digit
	hour := g.Alt(g.Seq(g.Chars("01"), d), g.Seq(g.Lit("2"), g.Bytes('0', '3')))
	minute := g.Seq(g.Bytes('0', '5'), d)
	offset := g.Alt(g.Chars("Z"), g.Seq(g.Chars("+-"), hour, g.Lit(":"), minute))
	return g.Seq(hour, g.Lit(":"), minute, g.Lit(":"), minute, g.Opt(g.Seq(g.Lit("."), g.Repeat(d, 1, 6))), offset)
}
