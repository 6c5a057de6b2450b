package main

import (
	"fmt"
	"io"

	"lowbit/gpu"
	"lowbit/model"
)

// maxStep is the most tokens a GPU backend processes in one step (the
// sessions' prefill batch stays at or below it).
const maxStep = 512

// openBackend returns the model backend that --device names ("cpu", "cuda"
// or "auto") and a function that releases it. A nil backend means the CPU
// (model.SessionOptions' default). With "auto" a missing or unusable GPU
// is not an error: the reason goes to msg and the CPU is used.
func openBackend(device string, msg io.Writer) (model.Backend, func(), error) {
	switch device {
	case "cpu":
		return nil, func() {}, nil
	case "cuda", "auto", "":
		be, release, err := openCUDA()
		if err == nil {
			return be, release, nil
		}
		if device == "cuda" {
			return nil, nil, fmt.Errorf("--device cuda: %w", err)
		}
		fmt.Fprintf(msg, "lowbit: no usable GPU (%v); running on the CPU\n", err)
		return nil, func() {}, nil
	default:
		return nil, nil, fmt.Errorf("--device %q: want cpu, cuda or auto", device)
	}
}

// openCUDA opens GPU 0 (no driver, no GPU, older than sm_80: gpu.Open's
// error) and a model backend on it.
func openCUDA() (*gpu.Backend, func(), error) {
	d, err := gpu.Open(0)
	if err != nil {
		return nil, nil, err
	}
	be, err := gpu.NewBackend(d, maxStep)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return be, func() { be.Close(); d.Close() }, nil
}
