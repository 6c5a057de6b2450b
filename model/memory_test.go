package model

import (
	"context"
	"strings"
	"testing"

	"lowbit/internal/fixture"
)

// small is a CPU backend that says it has little memory left.
type small struct {
	*CPU
	avail int64
}

func (b small) Available() int64 { return b.avail }

// TestSessionFits checks that a session whose estimate is over what the
// backend has left fails before allocating, naming the figures and what
// to change, and that one that fits opens.
func TestSessionFits(t *testing.T) {
	m, err := Load(context.Background(), writeFixture(t, fixture.Llama()), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(SessionOptions{Backend: NewCPU(1), Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	need := s.Memory()
	if need.Weights != m.WeightBytes() || need.KV != s.CacheBytes() || need.Scratch <= 0 {
		t.Fatalf("estimate %+v for weights %d, cache %d", need, m.WeightBytes(), s.CacheBytes())
	}
	if _, err := m.NewSession(SessionOptions{Backend: small{NewCPU(1), need.Total()}, Context: 64}); err != nil {
		t.Fatalf("a session in exactly its memory: %v", err)
	}
	_, err = m.NewSession(SessionOptions{Backend: small{NewCPU(1), need.Total() - 1}, Context: 64, Slots: 2})
	for _, want := range []string{"the session needs", "64 positions x 2 slots in f32", "--ctx", "--parallel", "--kv-cache f16", "--kv-cache q8"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want one saying %q", err, want)
		}
	}
}
