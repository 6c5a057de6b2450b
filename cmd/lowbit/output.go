package main

import (
	"encoding/json"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"
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

// noticeWriter is where one-line notices go: stderr (a terminal or not),
// unless --quiet.
func noticeWriter(cmd *cobra.Command, quiet bool) io.Writer {
	if quiet {
		return nil
	}
	return cmd.ErrOrStderr()
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

// humanCount formats a parameter count as llama-bench does (1.10 B), with
// K and M for the tiny models that would print as 0.00 B.
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 2, 64) + " B"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 2, 64) + " M"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 2, 64) + " K"
	}
	return strconv.FormatInt(n, 10)
}
