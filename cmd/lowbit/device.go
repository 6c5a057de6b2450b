package main

import (
	"errors"
	"fmt"
	"io"

	"lowbit/gpu"
	"lowbit/model"
)

// maxStep is the most tokens a GPU backend processes in one step (the
// sessions' prefill batch stays at or below it).
const maxStep = 512

// backends opens the model backends that --device names ("cpu", "cuda" or
// "auto") for one command. With "auto" a missing or unusable GPU is not an
// error: the CPU is used, and the reason is told once a command (never
// under --quiet).
type backends struct {
	device string
	msg    io.Writer // nil: --quiet
	told   bool
}

// newBackends checks --device at once, so that a wrong value fails before a
// model is loaded.
func newBackends(device string, msg io.Writer, quiet bool) (*backends, error) {
	switch device {
	case "cpu", "cuda", "auto", "":
	default:
		return nil, fmt.Errorf("--device %q: want cpu, cuda or auto", device)
	}
	if quiet {
		msg = nil
	}
	return &backends{device: device, msg: msg}, nil
}

// openBackend is newBackends and open in one, for a command that runs on
// one backend.
func openBackend(device string, msg io.Writer, quiet bool) (model.Backend, func(), error) {
	b, err := newBackends(device, msg, quiet)
	if err != nil {
		return nil, nil, err
	}
	return b.open()
}

// open returns a backend and a function that releases it. A nil backend
// means the CPU (model.SessionOptions' default).
func (b *backends) open() (model.Backend, func(), error) {
	if b.device == "cpu" {
		return nil, func() {}, nil
	}
	be, release, err := openCUDA()
	if err == nil {
		return be, release, nil
	}
	if b.device == "cuda" {
		return nil, nil, fmt.Errorf("--device cuda: %w", err)
	}
	if !b.told && b.msg != nil {
		why := err.Error()
		if errors.Is(err, gpu.ErrNoDriver) {
			why = "no NVIDIA driver"
		}
		fmt.Fprintf(b.msg, "lowbit: no usable GPU (%s); running on the CPU (--device cpu or -q: no notice)\n", why)
	}
	b.told = true
	return nil, func() {}, nil
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

// kvCacheFlag is --kv-cache: how the KV cache stores keys and values.
type kvCacheFlag struct{ t model.KVType }

func (f *kvCacheFlag) String() string { return f.t.String() }
func (f *kvCacheFlag) Type() string   { return "type" }
func (f *kvCacheFlag) Set(s string) error {
	t, err := model.ParseKVType(s)
	if err != nil {
		return err
	}
	f.t = t
	return nil
}

// kvCacheUsage is --kv-cache's help.
const kvCacheUsage = "how the KV cache stores keys and values: f32, f16 (half the memory) or q8 (int8 with a scale per head row: a quarter)"
