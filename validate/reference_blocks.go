package validate

import (
	"encoding/binary"
	"fmt"
	"math"

	"lowbit/quantize"
)

// refBlockWeights unpacks a tensor of one of GGUF's block formats (q5_0 ...
// q6k) into float64 rows, each weight read field by field from ggml's
// block layouts (ARCHITECTURE.md) with code of its own.
func refBlockWeights(t *quantize.Tensor) ([][]float64, error) {
	block, size, ok := refBlockSize(t.Format)
	if !ok {
		return nil, fmt.Errorf("validate: no reference for format %q", t.Format)
	}
	if t.Cols%block != 0 || len(t.Data) != t.Rows*t.Cols/block*size {
		return nil, fmt.Errorf("validate: %s [%d, %d] holds %d bytes, want whole %d-weight blocks of %d bytes", t.Format, t.Rows, t.Cols, len(t.Data), block, size)
	}
	out := make([][]float64, t.Rows)
	for r := range out {
		row := make([]float64, t.Cols)
		for c := range row {
			n := (r*t.Cols + c) / block
			row[c] = refBlockWeight(t.Format, t.Data[n*size:(n+1)*size], c%block)
		}
		out[r] = row
	}
	return out, nil
}

// refBlockSize is the weights and bytes of a block format's block.
func refBlockSize(f quantize.Format) (block, size int, ok bool) {
	switch f {
	case quantize.Q5_0:
		return 32, 22, true
	case quantize.Q5_1:
		return 32, 24, true
	case quantize.Q2K:
		return 256, 84, true
	case quantize.Q3K:
		return 256, 110, true
	case quantize.Q4K:
		return 256, 144, true
	case quantize.Q5K:
		return 256, 176, true
	case quantize.Q6K:
		return 256, 210, true
	}
	return 0, 0, false
}

// refBlockWeight is weight i of block b.
func refBlockWeight(f quantize.Format, b []byte, i int) float64 {
	h := func(off int) float64 { return fp16(binary.LittleEndian.Uint16(b[off:])) }
	bits := func(off, shift, n int) int { return int(b[off]) >> shift & (1<<n - 1) }
	switch f {
	case quantize.Q5_0, quantize.Q5_1:
		// q5_0: d, qh[4], qs[16]; q5_1: d, m, qh[4], qs[16].
		qh := 2
		if f == quantize.Q5_1 {
			qh = 4
		}
		q := bits(qh+4+i%16, 4*(i/16), 4) | bits(qh+i/8, i%8, 1)<<4
		if f == quantize.Q5_0 {
			return h(0) * float64(q-16)
		}
		return h(0)*float64(q) + h(2)
	case quantize.Q2K:
		// scales[16] (scale low, min high), qs[64], d, dmin.
		sc, m := bits(i/16, 0, 4), bits(i/16, 4, 4)
		q := bits(16+32*(i/128)+i%32, 2*(i%128/32), 2)
		return h(80)*float64(sc)*float64(q) - h(82)*float64(m)
	case quantize.Q3K:
		// hmask[32], qs[64], scales[12], d.
		k := i / 16
		s := bits(96+k%8, 4*(k/8), 4) | bits(104+k%4, 2*(k/4), 2)<<4
		q := bits(32+32*(i/128)+i%32, 2*(i%128/32), 2) | bits(i%32, 4*(i/128)+i%128/32, 1)<<2
		return h(108) * float64(s-32) * float64(q-4)
	case quantize.Q4K, quantize.Q5K:
		// d, dmin, scales[12], (q5k: qh[32]), qs[128].
		j := i / 32
		var sc, m int
		if j < 4 {
			sc, m = bits(4+j, 0, 6), bits(8+j, 0, 6)
		} else {
			sc = bits(8+j, 0, 4) | bits(j, 6, 2)<<4
			m = bits(8+j, 4, 4) | bits(4+j, 6, 2)<<4
		}
		qs := 16
		if f == quantize.Q5K {
			qs = 48
		}
		q := bits(qs+32*(i/64)+i%32, 4*(i%64/32), 4)
		if f == quantize.Q5K {
			q |= bits(16+i%32, j, 1) << 4
		}
		return h(0)*float64(sc)*float64(q) - h(2)*float64(m)
	case quantize.Q6K:
		// ql[128], qh[64], scales[16] (int8), d.
		half, p, l := i/128, i%128/32, i%32
		q := bits(64*half+l+32*(p%2), 4*(p/2), 4) | bits(128+32*half+l, 2*p, 2)<<4
		return h(208) * float64(int8(b[192+i/16])) * float64(q-32)
	}
	return 0
}

// refSblockWeights unpacks a super-block format (q2s, q3s, q4s) by its
// layout in ARCHITECTURE.md: per 32 weights two sub-block bytes (scale
// code k low, zero point z high), then the codes; a weight of a sub-block
// is ds*q - ds*(z*L/15), ds = S*2^((k-15)/6), S the tensor's scale.
func refSblockWeights(t *quantize.Tensor) ([][]float64, error) {
	var bits, bb int
	switch t.Format {
	case quantize.Q2S:
		bits, bb = 2, 10
	case quantize.Q3S:
		bits, bb = 3, 14
	case quantize.Q4S:
		bits, bb = 4, 18
	default:
		return nil, fmt.Errorf("validate: no reference for format %q", t.Format)
	}
	blocks := (t.Cols + 31) / 32
	if len(t.Data) != t.Rows*blocks*bb {
		return nil, fmt.Errorf("validate: %s [%d, %d] holds %d bytes, want %d", t.Format, t.Rows, t.Cols, len(t.Data), t.Rows*blocks*bb)
	}
	L := int32(1)<<bits - 1
	out := make([][]float64, t.Rows)
	for r := range out {
		row := make([]float64, t.Cols)
		for c := range row {
			blk := t.Data[(r*blocks+c/32)*bb:][:bb]
			i := c % 32
			var q int32
			switch bits {
			case 2, 3:
				q = int32(blk[2+i%8]>>(2*(i/8))) & 3
				if bits == 3 {
					h := binary.LittleEndian.Uint32(blk[10:14])
					q |= int32(h>>i&1) << 2
				}
			case 4:
				q = int32(blk[2+i%16]>>(4*(i/16))) & 15
			}
			sb := blk[i/16]
			ds := float32(t.Scale * float32(math.Pow(2, float64(int(sb&15)-15)/6)))
			zp := float32(int32(sb>>4)*L) / 15
			row[c] = float64(float32(ds*float32(q)) + -float32(ds*zp))
		}
		out[r] = row
	}
	return out, nil
}
