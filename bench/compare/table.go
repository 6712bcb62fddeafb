package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// printTable prints one line per row: kvhost's median (and range), its
// eager-decode median where measured, llama.cpp's median (and range), and
// kvhost/llama.cpp of the medians. For time and memory (lower is better)
// the ratio is still kvhost/llama.cpp, so below 1 means kvhost is ahead
// there and above 1 ahead for throughput.
func printTable(w io.Writer, rows []*row) {
	fmt.Fprintln(w, "| work | kvhost (median, range) | kvhost eager | llama.cpp (median, range) | kvhost / llama.cpp |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		ratio := "—"
		if len(r.kvS) > 0 && len(r.llS) > 0 && median(r.llS) > 0 {
			ratio = fmt.Sprintf("%.2f", median(r.kvS)/median(r.llS))
			if r.lowerBetter {
				ratio += " (lower is better)"
			}
		}
		ex := "—"
		if len(r.exS) > 0 {
			ex = num(median(r.exS))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.title(), summary(r.kvS, r.unit), ex, summary(r.llS, r.unit), ratio)
	}
	var errs []string
	for _, r := range rows {
		for _, e := range r.errs {
			errs = append(errs, r.title()+": "+firstLine(e))
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\n%d measurements failed:\n", len(errs))
		for _, e := range errs {
			fmt.Fprintln(w, "  "+e)
		}
	}
}

func summary(v []float64, unit string) string {
	if len(v) == 0 {
		return "—"
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%s %s (%s–%s)", num(median(v)), unit, num(lo), num(hi))
}

func num(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
