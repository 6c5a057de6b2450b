package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuBLAS's tensor-core GEMM, found at run time: like libcuda it is
// dlopened, so nothing is needed at build time and a machine without it
// still runs (the caller keeps to its own kernels).

// blasLibs are the names LoadBLAS tries by default, in order: CUDA 13's
// and 12's libraries, then the toolkit's default place.
var blasLibs = [...]string{
	"libcublas.so.13", "libcublas.so.12", "libcublas.so",
	"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
}

// blasSymbols lists the cuBLAS entry points used, in blasCreate.. order.
var blasSymbols = [...]string{"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasGemmEx"}

// Indices into BLAS.fn, in blasSymbols' order.
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

// BLAS is a loaded cuBLAS and its handle, bound to the device's stream, so
// its GEMMs queue behind and before the device's kernels.
type BLAS struct {
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
func (b *BLAS) call(i int, args ...uintptr) error {
	r, _, _ := purego.SyscallN(b.fn[i], args...)
	if uint32(r) == 0 {
		return nil
	}
	name := blasStatusNames[uintptr(uint32(r))]
	if name == "" {
		name = fmt.Sprintf("status %d", uint32(r))
	}
	return fmt.Errorf("cuda: %s (%s): %s", blasSymbols[i], b.path, name)
}

// LoadBLAS loads cuBLAS from path (when it is empty, the usual names and
// places: blasLibs) and creates a handle on the device's stream (device
// thread).
func (d *Device) LoadBLAS(path string) (*BLAS, error) {
	names := blasLibs[:]
	if path != "" {
		names = []string{path}
	}
	var lib uintptr
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
		return nil, fmt.Errorf("cuda: cuBLAS not found (tried %v): %v", names, errs)
	}
	b := &BLAS{lib: lib, path: path}
	for i, name := range blasSymbols {
		p, err := purego.Dlsym(lib, name)
		if err != nil || p == 0 {
			purego.Dlclose(lib)
			return nil, fmt.Errorf("cuda: %s has no %s: %v", path, name, err)
		}
		b.fn[i] = p
	}
	if err := b.call(blasCreate, uintptr(unsafe.Pointer(&b.handle))); err != nil {
		purego.Dlclose(lib)
		return nil, err
	}
	if err := b.call(blasSetStream, b.handle, d.stream); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Path is the library that was loaded, for reports.
func (b *BLAS) Path() string { return b.path }

// Close destroys the handle and unloads the library (device thread).
func (b *BLAS) Close() {
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
func (b *BLAS) gemm(in, out, ct uintptr, one uint32, m, n, k int, a Buffer, lda int, bb Buffer, ldb int, c Buffer, ldc int) error {
	alpha, beta := one, uint32(0)
	return b.call(blasGemmEx, b.handle, blasOpT, blasOpN, uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&alpha)), uintptr(a.ptr), in, uintptr(lda),
		uintptr(bb.ptr), in, uintptr(ldb), uintptr(unsafe.Pointer(&beta)),
		uintptr(c.ptr), out, uintptr(ldc), ct, blasGemmDflt)
}

// GemmF16 queues C[n, m] (row stride ldc) = B[n, k] A[m, k]^T for
// row-major fp16 A and B (row strides lda, ldb) into fp32 C, with fp32
// sums: a product of m weight rows and n activation rows (device thread).
func (b *BLAS) GemmF16(m, n, k int, a Buffer, lda int, bb Buffer, ldb int, c Buffer, ldc int) error {
	return b.gemm(cudaR16F, cudaR32F, blasCompute32F, math.Float32bits(1), m, n, k, a, lda, bb, ldb, c, ldc)
}

// GemmI8 is GemmF16 for int8 A and B into int32 C: cuBLAS's int8
// tensor-core GEMM, its sums exact (device thread).
func (b *BLAS) GemmI8(m, n, k int, a Buffer, lda int, bb Buffer, ldb int, c Buffer, ldc int) error {
	return b.gemm(cudaR8I, cudaR32I, blasCompute32I, 1, m, n, k, a, lda, bb, ldb, c, ldc)
}
