package main

import (
	"encoding/json"
	"io"
	"os"

	"golang.org/x/term"
)

// progressWriter is where progress bars go: stderr when it is a terminal and
// --quiet is off, else nowhere.
func progressWriter(quiet bool) io.Writer {
	if quiet || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return os.Stderr
}

// printJSON writes v as indented JSON for scripts.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// humanBytes formats a byte count the way people read sizes.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return itoa(n) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return ftoa(float64(n)/float64(div)) + " " + string("KMGTPE"[exp]) + "iB"
}
