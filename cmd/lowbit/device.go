package main

import (
	"fmt"
	"io"

	"lowbit/model"
)

// openBackend returns the model backend that --device names ("cpu", "cuda"
// or "auto") and a function that releases it. A nil backend means the CPU
// (model.SessionOptions' default). With "auto" a missing GPU is not an
// error: the reason goes to msg and the CPU is used.
func openBackend(device string, msg io.Writer) (model.Backend, func(), error) {
	switch device {
	case "cpu", "":
		return nil, func() {}, nil
	case "auto": // no CUDA forward pass yet: the CPU, silently
		return nil, func() {}, nil
	case "cuda":
		return nil, nil, fmt.Errorf("--device cuda: the CUDA backend is not built yet")
	default:
		return nil, nil, fmt.Errorf("--device %q: want cpu, cuda or auto", device)
	}
}
