package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoDriver means libcuda.so.1 (the NVIDIA driver's library) could not be
// loaded: there is no NVIDIA driver on this machine. Callers fall back to
// the CPU.
var ErrNoDriver = errors.New("cuda: no CUDA driver (libcuda.so.1 not found)")

// ErrNoDevice means the driver loaded but reports no usable GPU.
var ErrNoDevice = errors.New("cuda: no CUDA device")

// ErrClosed is returned by a Device used after Close.
var ErrClosed = errors.New("cuda: device is closed")

// cuResult is a CUresult, the driver API's status code.
type cuResult uint32

// Driver API status codes that the code reacts to.
const (
	cuSuccess      cuResult = 0
	cuOutOfMemory  cuResult = 2
	cuNoDevice     cuResult = 100
	cuInvalidDev   cuResult = 101
	cuNotInitDrv   cuResult = 3
	cuInsufficient cuResult = 35 // CUDA_ERROR_INSUFFICIENT_DRIVER
)

// Device attributes (CUdevice_attribute) read at Open.
const (
	attrMultiprocessors  = 16
	attrCapabilityMajor  = 75
	attrCapabilityMinor  = 76
	attrMaxSharedOptin   = 97
	attrL2Size           = 38
	attrMemoryClockKHz   = 36
	attrMemoryBusWidth   = 37
	funcAttrMaxDynShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	funcAttrMaxThreads   = 0 // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
)

// driverSymbols lists every driver entry point used, by its exported name
// (the _v2 names where the API has them).
var driverSymbols = [...]string{
	"cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceGetAttribute",
	"cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
	"cuCtxSetCurrent", "cuCtxSynchronize", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2",
	"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoDAsync_v2", "cuMemsetD8Async",
	"cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuFuncSetAttribute",
	"cuLaunchKernel", "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize",
	"cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuEventElapsedTime", "cuEventDestroy_v2",
	"cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
	"cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy", "cuGetErrorName", "cuGetErrorString",
	"cuDriverGetVersion", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
	"cuMemAllocHost_v2", "cuMemFreeHost", "cuFuncGetAttribute", "cuMemHostGetDevicePointer_v2",
}

// optionalSymbols are entry points used when the driver has them
// (cuLaunchKernelEx: CUDA 11.8 and newer).
var optionalSymbols = [...]string{"cuLaunchKernelEx"}

// Indices into driver.fn, in driverSymbols' order.
const (
	fnInit = iota
	fnDeviceGetCount
	fnDeviceGet
	fnDeviceGetName
	fnDeviceGetAttribute
	fnDeviceTotalMem
	fnPrimaryCtxRetain
	fnPrimaryCtxRelease
	fnCtxSetCurrent
	fnCtxSynchronize
	fnMemAlloc
	fnMemFree
	fnMemGetInfo
	fnMemcpyHtoD
	fnMemcpyDtoH
	fnMemcpyDtoDAsync
	fnMemsetD8Async
	fnModuleLoadData
	fnModuleUnload
	fnModuleGetFunction
	fnFuncSetAttribute
	fnLaunchKernel
	fnStreamCreate
	fnStreamDestroy
	fnStreamSynchronize
	fnEventCreate
	fnEventRecord
	fnEventSynchronize
	fnEventElapsedTime
	fnEventDestroy
	fnStreamBeginCapture
	fnStreamEndCapture
	fnGraphInstantiate
	fnGraphLaunch
	fnGraphExecDestroy
	fnGraphDestroy
	fnGetErrorName
	fnGetErrorString
	fnDriverGetVersion
	fnOccupancy
	fnMemAllocHost
	fnMemFreeHost
	fnFuncGetAttribute
	fnMemHostGetDevicePointer
	fnLaunchKernelEx // optional: zero when the driver lacks it
	numFns
)

// driver holds libcuda's handle and the addresses of its entry points.
type driver struct {
	lib uintptr
	fn  [numFns]uintptr
}

// loadDriver dlopens libcuda.so.1 and resolves every symbol, failing with
// ErrNoDriver when the library is absent and naming a missing symbol (a
// driver too old) otherwise.
func loadDriver() (*driver, error) {
	lib, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	d := &driver{lib: lib}
	for i, name := range driverSymbols {
		p, err := purego.Dlsym(lib, name)
		if err != nil || p == 0 {
			purego.Dlclose(lib)
			return nil, fmt.Errorf("cuda: libcuda.so.1 has no %s (driver too old?): %v", name, err)
		}
		d.fn[i] = p
	}
	for i, name := range optionalSymbols {
		if p, err := purego.Dlsym(lib, name); err == nil {
			d.fn[len(driverSymbols)+i] = p
		}
	}
	return d, nil
}

// call invokes driver entry point i. Pointers passed as
// uintptr(unsafe.Pointer(p)) in the call expression stay valid for the
// call (uintptrescapes moves their objects to the heap).
//
//go:uintptrescapes
func (d *driver) call(i int, args ...uintptr) cuResult {
	r, _, _ := purego.SyscallN(d.fn[i], args...)
	return cuResult(uint32(r))
}

// check turns a status code into an error naming the operation, with the
// driver's own name and description of the code.
func (d *driver) check(r cuResult, op string) error {
	if r == cuSuccess {
		return nil
	}
	return &Error{Op: op, Code: int(r), Name: d.errName(r), Desc: d.errString(r)}
}

// errName is the driver's name of a status code (CUDA_ERROR_...).
func (d *driver) errName(r cuResult) string {
	var p *byte
	if d.call(fnGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&p))) != cuSuccess || p == nil {
		return fmt.Sprintf("CUDA_ERROR_%d", int(r))
	}
	return cString(p)
}

// errString is the driver's description of a status code.
func (d *driver) errString(r cuResult) string {
	var p *byte
	if d.call(fnGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&p))) != cuSuccess || p == nil {
		return "unknown error"
	}
	return cString(p)
}

// cString copies a NUL-terminated C string (owned by the driver).
func cString(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0 && len(b) < 4096; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

// Error is a failed driver call: the operation, the CUresult and the
// driver's name and description of it, so a report says which call failed
// and how without a CUDA manual at hand.
type Error struct {
	Op   string // the driver call, with what it was called on
	Code int    // the CUresult
	Name string // the driver's name of Code, e.g. CUDA_ERROR_OUT_OF_MEMORY
	Desc string // the driver's description of Code
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Op, e.Name, e.Code, e.Desc)
}

// IsOutOfMemory says whether err is (or wraps) a device allocation failure,
// which a caller may answer by using less memory rather than giving up.
func IsOutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && cuResult(e.Code) == cuOutOfMemory
}
