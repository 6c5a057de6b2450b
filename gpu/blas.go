package gpu

import (
	"fmt"
	"os"

	"lowbit/gpu/cuda"
	"lowbit/quantize"
)

// Prefill products through cuBLAS's tensor-core GEMM, when the library is
// found at run time (cuda.LoadBLAS: like libcuda, it is dlopened; nothing
// is needed at build time). A panel of weight rows is dequantized to fp16,
// the activations converted to fp16, and cublasGemmEx multiplies them with
// fp32 accumulation into the fp32 output. Without cuBLAS the fp32
// CUDA-core kernel of matmul.cu does the work.

// blasEnv overrides the library's path; "off" disables cuBLAS.
const blasEnv = "LOWBIT_CUBLAS"

// blasMinTokens is the fewest tokens a product goes to cuBLAS with: below
// it the dequantization costs more than the GEMM saves, and short steps
// keep the exact fp32 kernel.
const blasMinTokens = 32

// blasPanelBytes bounds the fp16 weight panel (rows are dequantized in
// panels of at most this size, so scratch stays small beside the model).
const blasPanelBytes = 64 << 20

// blasFor returns cuBLAS when a product of m's format over n tokens with
// float activations should use it, loading the library on first use
// (device thread). Float32 weights keep lowbit's kernel; ternary ones take
// int8 activations (matmulI8); the block formats' panels are dequantized
// from their blocks as the others' are (dequant_f16_<fmt>).
func (d *Device) blasFor(m *Matrix, n int) *cuda.BLAS {
	switch {
	case m.Format == quantize.F16, m.Format == quantize.Q8, m.Format == quantize.Q4, m.Format == quantize.Q2,
		m.Format == quantize.Q1, blockKernels(m.Format):
		return d.blasLoaded(n)
	}
	return nil
}

// blasLoaded returns cuBLAS for a product of n tokens: nil below
// blasMinTokens, when disabled, or when the library could not be loaded
// (device thread).
func (d *Device) blasLoaded(n int) *cuda.BLAS {
	if n < blasMinTokens || d.blasOff {
		return nil
	}
	if !d.blasTried {
		d.blasTried = true
		d.blas, d.blasErr = d.loadBlas()
	}
	return d.blas
}

// loadBlas loads cuBLAS from LOWBIT_CUBLAS's path when it is set (not
// at all when it is "off"), else from the usual places (device thread).
func (d *Device) loadBlas() (*cuda.BLAS, error) {
	p := os.Getenv(blasEnv)
	if p == "off" {
		return nil, fmt.Errorf("gpu: cuBLAS disabled by %s=off", blasEnv)
	}
	return d.cu.LoadBLAS(p)
}

// BlasStatus says whether prefill products use cuBLAS, and why not
// (before the first prefill it reports nothing tried yet).
func (d *Device) BlasStatus() string {
	var s string
	err := d.do(func() error {
		switch {
		case !d.blasTried:
			s = "cuBLAS: not loaded yet (first used by a prefill of 32 tokens or more)"
		case d.blas != nil && d.blasI8Err != nil:
			s = "cuBLAS: " + d.blas.Path() + "; " + d.blasI8Err.Error()
		case d.blas != nil:
			s = "cuBLAS: " + d.blas.Path()
		default:
			s = d.blasErr.Error()
		}
		return nil
	})
	if err != nil {
		return err.Error()
	}
	return s
}

// scratch16 returns a scratch buffer of at least n bytes from slot (grown
// as needed, kept for the next product).
func (d *Device) scratch16(slot *Buffer, n int64) (Buffer, error) {
	if slot.Size() >= n {
		return *slot, nil
	}
	if slot.Size() > 0 {
		d.free(*slot)
		*slot = Buffer{}
	}
	b, err := d.alloc(n, MemScratch)
	if err != nil {
		return Buffer{}, err
	}
	*slot = b
	return b, nil
}

// matmulBlas queues Y[n, Rows] = X[n, Cols] W^T through cuBLAS: X to fp16
// once, then W in panels of rows dequantized to fp16 (f16 weights are used
// as they are), one GEMM a panel (device thread).
func (d *Device) matmulBlas(bl *cuda.BLAS, m *Matrix, X, Y Buffer, n int) error {
	x16, err := d.scratch16(&d.x16, int64(n)*int64(m.Cols)*2)
	if err != nil {
		return err
	}
	total := int64(n) * int64(m.Cols)
	if err := d.launch("f32_to_f16", grid1(int(min((total+255)/256, int64(d.sms)*16))), grid1(256), 0,
		argBuf(X), argBuf(x16), uint64(total)); err != nil {
		return err
	}
	if m.Format == quantize.F16 {
		return bl.GemmF16(m.Rows, n, m.Cols, m.data, m.rowBytes/2, x16, m.Cols, Y, m.Rows)
	}
	panel := max(blasPanelBytes/(2*m.Cols), 64)
	w16, err := d.scratch16(&d.w16, int64(min(panel, m.Rows))*int64(m.Cols)*2)
	if err != nil {
		return err
	}
	for r0 := 0; r0 < m.Rows; r0 += panel {
		rows := min(panel, m.Rows-r0)
		if err := d.launch("dequant_f16_"+string(m.Format), grid1(rows), grid1(256), 0,
			m.data.Ptr()+uint64(r0)*uint64(m.rowBytes), offsetHalf(m.scales, r0*m.groups()),
			offsetHalf(m.mins, r0*m.groups()), argF32(m.scale), argBuf(w16), argInt(m.Cols),
			argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups())); err != nil {
			return err
		}
		y := Y.Slice(int64(r0)*4, Y.Size()-int64(r0)*4)
		if err := bl.GemmF16(rows, n, m.Cols, w16, m.Cols, x16, m.Cols, y, m.Rows); err != nil {
			return err
		}
	}
	return nil
}

// matmulI8 queues Y[n, Rows] = W q for tq2 weights and n tokens' int8
// activations q (token t's at q + t*qStride, its scale at scale[t]):
// through cuBLAS's int8 GEMM for 32 tokens or more (rows and columns
// multiples of 4), else the int8 matrix-vector kernel, a token a block row
// (device thread). Once cuBLAS refuses the int8 GEMM, the kernel takes
// every product (BlasStatus says why).
func (d *Device) matmulI8(m *Matrix, n int, q Buffer, qStride int, scale, y Buffer) error {
	if bl := d.blasLoaded(n); bl != nil && m.Format == quantize.TQ2 && d.blasI8Err == nil && m.Cols%4 == 0 && m.Rows%4 == 0 {
		err := d.matmulBlasI8(bl, m, n, q, qStride, scale, y)
		if err == nil {
			return nil
		}
		d.blasI8Err = fmt.Errorf("cuBLAS int8 GEMM refused (%s %dx%d, %d tokens): %w", m.Format, m.Rows, m.Cols, n, err)
	}
	return d.matvecI8N(m, n, q, scale, y)
}

// matmulBlasI8 is matmulI8 through cuBLAS: W in panels of rows unpacked to
// int8 (dequant_i8_tq2), one int8 GEMM a panel into Y as int32, then the
// sums scaled into floats in place (scale_i8_tq2) (device thread).
func (d *Device) matmulBlasI8(bl *cuda.BLAS, m *Matrix, n int, q Buffer, qStride int, scale, y Buffer) error {
	panel := max(blasPanelBytes/m.Cols/64*64, 64)
	w8, err := d.scratch16(&d.w16, int64(min(panel, m.Rows))*int64(m.Cols))
	if err != nil {
		return err
	}
	for r0 := 0; r0 < m.Rows; r0 += panel {
		rows := min(panel, m.Rows-r0)
		if err := d.launch("dequant_i8_tq2", grid1(rows), grid1(256), 0,
			m.data.Ptr()+uint64(r0)*uint64(m.rowBytes), argBuf(w8), argInt(m.Cols), argInt(m.rowBytes)); err != nil {
			return err
		}
		yp := y.Slice(int64(r0)*4, y.Size()-int64(r0)*4)
		if err := bl.GemmI8(rows, n, m.Cols, w8, m.Cols, q, qStride, yp, m.Rows); err != nil {
			return err
		}
	}
	total := int64(n) * int64(m.Rows)
	return d.launch("scale_i8_tq2", grid1(int(min((total+255)/256, int64(d.sms)*16))), grid1(256), 0,
		argBuf(y), argInt(m.Rows), argInt(n), argBuf(m.rowScale), argF32(m.scale), argBuf(scale))
}

// offsetHalf is the address of fp16 element i of b (null stays null).
func offsetHalf(b Buffer, i int) uint64 {
	if b.Ptr() == 0 {
		return 0
	}
	return b.Ptr() + uint64(i)*2
}
