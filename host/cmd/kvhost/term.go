package main

import (
	"os"

	"golang.org/x/term"
)

// isTerminal reports whether f is a terminal (progress bars and the chat
// prompt are drawn only there).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
