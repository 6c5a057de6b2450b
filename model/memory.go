package model

import (
	"fmt"
	"strings"
)

// SessionMemory is what a session takes on its backend, estimated before
// it allocates anything.
type SessionMemory struct {
	// Weights are the model's tensors as stored.
	Weights int64
	// KV is the cache: every slot's positions, as its type stores them.
	KV int64
	// Scratch is the activations of the largest step, twice over for the
	// backend's own buffers.
	Scratch int64
}

// Total is the sum.
func (m SessionMemory) Total() int64 { return m.Weights + m.KV + m.Scratch }

// Memory is the session's estimate.
func (s *Session) Memory() SessionMemory {
	c := s.cfg
	qDim, kvDim := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	row := int64(c.HiddenSize + 2*qDim + 2*kvDim + c.IntermediateSize + c.VocabSize)
	return SessionMemory{Weights: s.m.WeightBytes(), KV: s.shape.Bytes(), Scratch: 2 * 4 * int64(s.batch) * row}
}

// fits checks the session's estimate against what the backend can still
// allocate, so that a context too long for the device fails at once with
// the figures and what to change, not midway through the upload.
func (s *Session) fits() error {
	avail := s.be.Available()
	need := s.Memory()
	if avail <= 0 || need.Total() <= avail {
		return nil
	}
	var hints []string
	if s.ctx > 1 {
		hints = append(hints, "a shorter context (--ctx)")
	}
	if s.slots > 1 {
		hints = append(hints, "fewer sequences at once (--parallel, --kv-budget)")
	}
	for _, t := range []KVType{KVF16, KVQ8} {
		if t.RowBytes(s.shape.KVDim, s.shape.headDim()) < s.shape.Type.RowBytes(s.shape.KVDim, s.shape.headDim()) {
			sh := s.shape
			sh.Type = t
			hints = append(hints, fmt.Sprintf("--kv-cache %s (%s)", t, gib(sh.Bytes())))
		}
	}
	return fmt.Errorf("model: %s: the session needs %s (weights %s, KV cache %s for %d positions x %d slots in %s, buffers %s) and %s is free: try %s",
		s.be.Name(), gib(need.Total()), gib(need.Weights), gib(need.KV), s.ctx, s.slots, s.shape.Type, gib(need.Scratch), gib(avail), strings.Join(hints, ", or "))
}

// gib formats bytes in GiB for messages.
func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
