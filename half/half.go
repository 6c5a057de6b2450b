// Package half converts between float32 and the 16-bit float formats that
// model files carry: IEEE 754 binary16 (F16) and bfloat16 (BF16). Every
// package that reads tensors or stores scales uses it, so rounding is the
// same everywhere.
package half

import "math"

// Float16 is an IEEE 754 binary16 value kept as its bit pattern.
type Float16 uint16

// BFloat16 is a bfloat16 value (the top 16 bits of a float32) kept as its bit pattern.
type BFloat16 uint16

// FromFloat32 rounds f to the nearest binary16 value, ties to even, with
// overflow to infinity and gradual underflow to subnormals, as IEEE 754 requires.
func FromFloat32(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return Float16(sign | 0x7e00)
		}
		return Float16(sign | 0x7c00)
	case exp == 0 && mant == 0:
		return Float16(sign)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return Float16(sign | 0x7c00)
	}
	if e <= 0 {
		// Subnormal half (or zero): shift the full mantissa with the implicit bit.
		if e < -10 {
			return Float16(sign)
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rem := m & ((uint32(1) << shift) - 1)
		h := m >> shift
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return Float16(sign | uint16(h))
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is still correct (up to Inf)
	}
	return Float16(sign | uint16(h))
}

// Float32 widens h to float32 exactly.
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Normalise the subnormal.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFromFloat32 rounds f to the nearest bfloat16, ties to even; NaN stays NaN.
func BFromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return BFloat16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// Float32 widens b to float32 exactly.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// Round16 returns f rounded through binary16, the value a stored F16 scale will have.
func Round16(f float32) float32 { return FromFloat32(f).Float32() }
