package gpu

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"github.com/ebitengine/purego"

	"lowbit/quantize"
)

// Prefill products through cuBLAS's tensor-core GEMM, when the library is
// found at run time (like libcuda, it is dlopened; nothing is needed at
// build time). A panel of weight rows is dequantized to fp16, the
// activations converted to fp16, and cublasGemmEx multiplies them with
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

// blasLibs are the names tried in order: CUDA 13's and 12's libraries,
// then the toolkit's default place.
var blasLibs = [...]string{
	"libcublas.so.13", "libcublas.so.12", "libcublas.so",
	"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
}

var blasSymbols = [...]string{"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasGemmEx"}

const (
	blasCreate = iota
	blasDestroy
	blasSetStream
	blasGemmEx
	numBlasFns
)

// cuBLAS and CUDA enumerations used by GemmEx.
const (
	blasOpN        = 0
	blasOpT        = 1
	cudaR32F       = 0
	cudaR16F       = 2
	cudaR8I        = 3
	cudaR32I       = 10
	blasCompute32F = 68
	blasCompute32I = 72
	blasGemmDflt   = ^uintptr(0) // CUBLAS_GEMM_DEFAULT (-1)
)

// blas is a loaded cuBLAS and its handle, bound to the device's stream.
type blas struct {
	lib    uintptr
	path   string
	fn     [numBlasFns]uintptr
	handle uintptr
}

// blasStatusNames names cuBLAS status codes for errors.
var blasStatusNames = map[uintptr]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// call invokes cuBLAS entry point i and turns its status into an error.
//
//go:uintptrescapes
func (b *blas) call(i int, args ...uintptr) error {
	r, _, _ := purego.SyscallN(b.fn[i], args...)
	if uint32(r) == 0 {
		return nil
	}
	name := blasStatusNames[uintptr(uint32(r))]
	if name == "" {
		name = fmt.Sprintf("status %d", uint32(r))
	}
	return fmt.Errorf("gpu: %s (%s): %s", blasSymbols[i], b.path, name)
}

// loadBlas finds cuBLAS and creates a handle on stream (device thread,
// the device's context current).
func loadBlas(stream uintptr) (*blas, error) {
	names := blasLibs[:]
	if p := os.Getenv(blasEnv); p != "" {
		if p == "off" {
			return nil, fmt.Errorf("gpu: cuBLAS disabled by %s=off", blasEnv)
		}
		names = []string{p}
	}
	var lib uintptr
	var path string
	var errs []error
	for _, n := range names {
		l, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			lib, path = l, n
			break
		}
		errs = append(errs, err)
	}
	if lib == 0 {
		return nil, fmt.Errorf("gpu: cuBLAS not found (tried %v): %v", names, errs)
	}
	b := &blas{lib: lib, path: path}
	for i, name := range blasSymbols {
		p, err := purego.Dlsym(lib, name)
		if err != nil || p == 0 {
			purego.Dlclose(lib)
			return nil, fmt.Errorf("gpu: %s has no %s: %v", path, name, err)
		}
		b.fn[i] = p
	}
	if err := b.call(blasCreate, uintptr(unsafe.Pointer(&b.handle))); err != nil {
		purego.Dlclose(lib)
		return nil, err
	}
	if err := b.call(blasSetStream, b.handle, stream); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// close destroys the handle and unloads the library.
func (b *blas) close() {
	if b.handle != 0 {
		b.call(blasDestroy, b.handle)
		b.handle = 0
	}
	purego.Dlclose(b.lib)
}

// gemm queues C[n, m] (row stride ldc) = B[n, k] A[m, k]^T with A and B
// row-major (row strides lda, ldb): in cuBLAS's column-major terms C^T =
// op_T(A) B^T. in and out are the inputs' and C's types, ct the compute
// type and one the bits of 1 in it (alpha; beta is zero).
func (b *blas) gemm(in, out, ct uintptr, one uint32, m, n, k int, a Buffer, lda int, bb Buffer, ldb int, c Buffer, ldc int) error {
	alpha, beta := one, uint32(0)
	return b.call(blasGemmEx, b.handle, blasOpT, blasOpN, uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&alpha)), uintptr(a.ptr), in, uintptr(lda),
		uintptr(bb.ptr), in, uintptr(ldb), uintptr(unsafe.Pointer(&beta)),
		uintptr(c.ptr), out, uintptr(ldc), ct, blasGemmDflt)
}

// gemmF16 is gemm of fp16 A and B into fp32 C, with fp32 sums.
func (b *blas) gemmF16(m, n, k int, a Buffer, lda int, bb Buffer, ldb int, c Buffer, ldc int) error {
	return b.gemm(cudaR16F, cudaR32F, blasCompute32F, math.Float32bits(1), m, n, k, a, lda, bb, ldb, c, ldc)
}

// gemmI8 is gemm of int8 A and B into int32 C: cuBLAS's int8 tensor-core
// GEMM, its sums exact.
func (b *blas) gemmI8(m, n, k int, a Buffer, lda int, bb Buffer, ldb int, c Buffer, ldc int) error {
	return b.gemm(cudaR8I, cudaR32I, blasCompute32I, 1, m, n, k, a, lda, bb, ldb, c, ldc)
}

// blasFor returns cuBLAS when a product of m's format over n tokens with
// float activations should use it, loading the library on first use
// (device thread). Float32 weights keep lowbit's kernel; ternary ones take
// int8 activations (matmulI8).
func (d *Device) blasFor(m *Matrix, n int) *blas {
	switch m.Format {
	case quantize.F16, quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1:
		return d.blasLoaded(n)
	}
	return nil
}

// blasLoaded returns cuBLAS for a product of n tokens: nil below
// blasMinTokens, when disabled, or when the library could not be loaded
// (device thread).
func (d *Device) blasLoaded(n int) *blas {
	if n < blasMinTokens || d.blasOff {
		return nil
	}
	if !d.blasTried {
		d.blasTried = true
		d.blas, d.blasErr = loadBlas(d.stream)
	}
	return d.blas
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
			s = "cuBLAS: " + d.blas.path + "; " + d.blasI8Err.Error()
		case d.blas != nil:
			s = "cuBLAS: " + d.blas.path
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
	if slot.size >= n {
		return *slot, nil
	}
	if slot.size > 0 {
		d.pool.release(*slot)
		*slot = Buffer{}
	}
	b, err := d.pool.alloc(d, n, MemScratch)
	if err != nil {
		return Buffer{}, err
	}
	*slot = b
	return b, nil
}

// matmulBlas queues Y[n, Rows] = X[n, Cols] W^T through cuBLAS: X to fp16
// once, then W in panels of rows dequantized to fp16 (f16 weights are used
// as they are), one GEMM a panel (device thread).
func (d *Device) matmulBlas(bl *blas, m *Matrix, X, Y Buffer, n int) error {
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
		return bl.gemmF16(m.Rows, n, m.Cols, m.data, m.rowBytes/2, x16, m.Cols, Y, m.Rows)
	}
	panel := max(blasPanelBytes/(2*m.Cols), 64)
	w16, err := d.scratch16(&d.w16, int64(min(panel, m.Rows))*int64(m.Cols)*2)
	if err != nil {
		return err
	}
	for r0 := 0; r0 < m.Rows; r0 += panel {
		rows := min(panel, m.Rows-r0)
		if err := d.launch("dequant_f16_"+string(m.Format), grid1(rows), grid1(256), 0,
			uint64(m.data.ptr)+uint64(r0)*uint64(m.rowBytes), offsetHalf(m.scales, r0*m.groups()),
			offsetHalf(m.mins, r0*m.groups()), argF32(m.scale), argBuf(w16), argInt(m.Cols),
			argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups())); err != nil {
			return err
		}
		y := Buffer{ptr: Y.ptr + uint64(r0)*4, size: Y.size - int64(r0)*4}
		if err := bl.gemmF16(rows, n, m.Cols, w16, m.Cols, x16, m.Cols, y, m.Rows); err != nil {
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
func (d *Device) matmulBlasI8(bl *blas, m *Matrix, n int, q Buffer, qStride int, scale, y Buffer) error {
	panel := max(blasPanelBytes/m.Cols/64*64, 64)
	w8, err := d.scratch16(&d.w16, int64(min(panel, m.Rows))*int64(m.Cols))
	if err != nil {
		return err
	}
	for r0 := 0; r0 < m.Rows; r0 += panel {
		rows := min(panel, m.Rows-r0)
		if err := d.launch("dequant_i8_tq2", grid1(rows), grid1(256), 0,
			uint64(m.data.ptr)+uint64(r0)*uint64(m.rowBytes), argBuf(w8), argInt(m.Cols), argInt(m.rowBytes)); err != nil {
			return err
		}
		yp := Buffer{ptr: y.ptr + uint64(r0)*4, size: y.size - int64(r0)*4}
		if err := bl.gemmI8(rows, n, m.Cols, w8, m.Cols, q, qStride, yp, m.Rows); err != nil {
			return err
		}
	}
	total := int64(n) * int64(m.Rows)
	return d.launch("scale_i8_tq2", grid1(int(min((total+255)/256, int64(d.sms)*16))), grid1(256), 0,
		argBuf(y), argInt(m.Rows), argInt(n), argBuf(m.rowScale), argF32(m.scale), argBuf(scale))
}

// offsetHalf is the address of fp16 element i of b (null stays null).
func offsetHalf(b Buffer, i int) uint64 {
	if b.ptr == 0 {
		return 0
	}
	return b.ptr + uint64(i)*2
}
