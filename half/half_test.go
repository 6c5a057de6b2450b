package half

import (
	"math"
	"testing"
)

func TestFloat16KnownValues(t *testing.T) {
	tests := []struct {
		f    float32
		bits uint16
	}{
		{0, 0x0000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},           // largest finite
		{65520, 0x7c00},           // rounds to Inf
		{6.103515625e-05, 0x0400}, // smallest normal
		{5.960464477539063e-08, 0x0001},
		{float32(math.Inf(1)), 0x7c00},
		{1.0009765625, 0x3c01},
		{1.00048828125, 0x3c00}, // tie rounds to even
		{1.00146484375, 0x3c02}, // tie rounds to even (up)
	}
	for _, tc := range tests {
		if got := FromFloat32(tc.f); uint16(got) != tc.bits {
			t.Errorf("FromFloat32(%g) = %#04x, want %#04x", tc.f, uint16(got), tc.bits)
		}
	}
}

func TestFloat16RoundTripAllBits(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := Float16(i)
		f := h.Float32()
		if f != f {
			if g := FromFloat32(f); g.Float32() == g.Float32() {
				t.Fatalf("NaN %#04x did not stay NaN", i)
			}
			continue
		}
		if g := FromFloat32(f); g != h {
			t.Fatalf("round trip %#04x -> %g -> %#04x", i, f, uint16(g))
		}
	}
}

func TestFloat16NearestRounding(t *testing.T) {
	// Every float32 between two adjacent halves must round to the nearer one.
	for i := 0x3c00; i < 0x3c00+200; i++ {
		lo, hi := Float16(i).Float32(), Float16(i+1).Float32()
		for _, frac := range []float32{0.1, 0.4, 0.6, 0.9} {
			f := lo + (hi-lo)*frac
			want := Float16(i)
			if frac > 0.5 {
				want = Float16(i + 1)
			}
			if got := FromFloat32(f); got != want {
				t.Fatalf("FromFloat32(%g) = %#04x, want %#04x", f, uint16(got), uint16(want))
			}
		}
	}
}

func TestBFloat16(t *testing.T) {
	tests := []struct {
		f    float32
		bits uint16
	}{
		{1, 0x3f80},
		{-1, 0xbf80},
		{3.140625, 0x4049},
		{1.00390625, 0x3f80}, // tie to even (down)
		{1.01171875, 0x3f82}, // tie to even (up)
	}
	for _, tc := range tests {
		if got := BFromFloat32(tc.f); uint16(got) != tc.bits {
			t.Errorf("BFromFloat32(%g) = %#04x, want %#04x", tc.f, uint16(got), tc.bits)
		}
		if back := BFloat16(tc.bits).Float32(); BFromFloat32(back) != BFloat16(tc.bits) {
			t.Errorf("bf16 round trip failed for %#04x", tc.bits)
		}
	}
	if nan := BFromFloat32(float32(math.NaN())).Float32(); nan == nan {
		t.Error("NaN became a number")
	}
}
