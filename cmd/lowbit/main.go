// Command lowbit takes a HuggingFace model to a fast, validated low-bit
// model: download, quantize, export, validate and run. This package holds
// only the cobra commands: flags, wiring and output.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCmd().ExecuteContext(ctx)
	if err == nil {
		return
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "lowbit:", ee.msg)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "lowbit:", err)
	os.Exit(1)
}

// exitError carries a specific exit status (validation failures exit 1 with
// their report already printed).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
