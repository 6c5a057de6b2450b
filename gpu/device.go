// Package gpu is lowbit's CUDA backend: the kernels (gpu/kernels/*.cu,
// compiled to PTX by `make kernels` and embedded), the matrix products for
// every quantized format, attention, sampling, and model.Backend with CUDA
// graphs for the decode step. It sits on package gpu/cuda, the runtime
// (driver, device thread, memory, launches, graphs, cuBLAS), which knows
// nothing of lowbit.
//
// A Device is a cuda.Device with the kernels loaded and the state of
// lowbit's kernel choices. Its unexported methods marked "(device thread)"
// run inside do, like cuda's; without libcuda.so.1 Open returns
// ErrNoDriver and callers use the CPU.
package gpu

import (
	"fmt"
	"unsafe"

	"lowbit/gpu/cuda"
)

// The runtime's types and errors, under the names the backend's callers
// know.
type (
	// Buffer is a span of device memory (cuda.Buffer).
	Buffer = cuda.Buffer
	// MemKind says what an allocation holds (cuda.MemKind).
	MemKind = cuda.MemKind
	// MemStats is device memory in use by kind (cuda.MemStats).
	MemStats = cuda.MemStats
	// Graph is a captured step, replayed with one launch (cuda.Graph).
	Graph = cuda.Graph
	// Error is a failed driver call (cuda.Error).
	Error = cuda.Error
)

// The kinds of device memory (cuda's).
const (
	MemScratch = cuda.MemScratch // activations, temporaries
	MemWeights = cuda.MemWeights // packed weights, scales, norms
	MemKV      = cuda.MemKV      // the KV cache
)

// ErrNoDriver is cuda.ErrNoDriver: there is no NVIDIA driver on this
// machine, and callers fall back to the CPU.
var ErrNoDriver = cuda.ErrNoDriver

// ErrNoDevice is cuda.ErrNoDevice: the driver reports no usable GPU.
var ErrNoDevice = cuda.ErrNoDevice

// ErrClosed is cuda.ErrClosed, returned by a Device used after Close.
var ErrClosed = cuda.ErrClosed

// IsOutOfMemory says whether err is (or wraps) a device allocation failure.
func IsOutOfMemory(err error) bool { return cuda.IsOutOfMemory(err) }

// minMajor is the oldest compute capability the kernels are built for (sm_80).
const minMajor = 8

// Device is one GPU (a cuda.Device) with lowbit's kernels loaded and the
// state of their choices and scratch. Its methods may be called from any
// goroutine; they serialize on the device's thread.
type Device struct {
	cu *cuda.Device
	// sms, maxShared and major are cu's multiprocessors, most opt-in
	// shared memory a block and capability major, read at Open.
	sms, maxShared, major int

	// matvecGrid, when non-zero, fixes the grid of the fast matvec kernels
	// (tests force a block to loop over several row groups; benchmarks
	// sweep it).
	matvecGrid int
	// matvecMode, when set, forces the matvec kernel (tests and
	// benchmarks; the zero value chooses by shape, matvecTable).
	matvecMode matvecKernel
	// sharedSet records the dynamic shared memory each kernel may use.
	sharedSet map[string]int

	// cuBLAS for prefill products, loaded on first use (blasTried), with
	// the reason when it could not be; x16 and w16 are its scratch: fp16
	// x and weight panels, w16 also the int8 panels of ternary weights.
	blas      *cuda.BLAS
	blasTried bool
	blasErr   error
	x16, w16  Buffer
	// blasOff keeps every product on lowbit's own kernels (tests).
	blasOff bool
	// blasI8Err says why cuBLAS refused an int8 GEMM (matmulI8 then
	// keeps to the kernel).
	blasI8Err error

	// idHost is pinned host memory the argmax kernel writes a chained
	// greedy step's id to, through its device address idDev, and idEv the
	// event that marks it there (chain.go).
	idHost cuda.HostMem
	idDev  Buffer
	idEv   *cuda.Event
	// argmaxPart is the argmax kernel's scratch (argmaxScratch).
	argmaxPart Buffer

	// exp are the experiments of a lowbitexp build (none otherwise).
	exp experiments
}

// Open starts device ordinal (0 is the first GPU) and loads the kernels.
// It fails with ErrNoDriver when the NVIDIA driver is missing, ErrNoDevice
// when there is no GPU, and a message naming the found capability when the
// GPU is older than sm_80.
func Open(ordinal int) (*Device, error) {
	cu, err := cuda.Open(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{cu: cu, sms: cu.Multiprocessors(), maxShared: cu.MaxSharedPerBlock(), sharedSet: map[string]int{}}
	if err := d.init(); err != nil {
		cu.Close()
		return nil, err
	}
	return d, nil
}

// init reads the experiments, checks the capability and loads the kernels.
func (d *Device) init() error {
	exp, err := readExperiments()
	if err != nil {
		return err
	}
	d.exp = exp
	major, minor := d.cu.Capability()
	if major < minMajor {
		return fmt.Errorf("gpu: %s needs sm_80 or newer, found sm_%d%d", d.cu.Name(), major, minor)
	}
	d.major = major
	return d.do(d.loadModules)
}

// Close frees the device's memory, kernels and context and stops its
// goroutine. Buffers and graphs of the device are invalid afterwards.
func (d *Device) Close() error {
	if err := d.do(func() error { d.release(); return nil }); err != nil {
		return err
	}
	return d.cu.Close()
}

// release frees what the backend holds beside the pool's memory, which
// cuda's Close frees (device thread).
func (d *Device) release() {
	// Nothing queued may still use what goes; a failure here is the
	// stream's, which Close cannot mend.
	d.cu.StreamSync()
	if d.blas != nil {
		d.blas.Close()
		d.blas = nil
	}
	if d.idEv != nil {
		d.idEv.Destroy()
		d.idEv = nil
	}
	d.cu.FreeHostMapped(d.idHost)
	d.idHost, d.idDev = cuda.HostMem{}, Buffer{}
	d.argmaxPart, d.x16, d.w16 = Buffer{}, Buffer{}, Buffer{}
}

// Name is the GPU's marketing name, e.g. "NVIDIA H100 80GB HBM3".
func (d *Device) Name() string { return d.cu.Name() }

// Capability is the compute capability, e.g. 9, 0 for sm_90.
func (d *Device) Capability() (major, minor int) { return d.cu.Capability() }

// TotalMem is the device memory in bytes.
func (d *Device) TotalMem() int64 { return d.cu.TotalMem() }

// Multiprocessors is the number of SMs, which sizes persistent grids.
func (d *Device) Multiprocessors() int { return d.sms }

// String describes the device in one line.
func (d *Device) String() string { return d.cu.String() }

// MemInfo returns the free and total device memory in bytes, as the driver
// sees them now (other processes included).
func (d *Device) MemInfo() (free, total int64, err error) { return d.cu.MemInfo() }

// Synchronize waits for all work queued on the device's stream and reports
// any asynchronous error (a failed kernel, for instance).
func (d *Device) Synchronize() error { return d.cu.Synchronize() }

// Alloc reserves n bytes of device memory of the given kind.
func (d *Device) Alloc(n int64, kind MemKind) (Buffer, error) { return d.cu.Alloc(n, kind) }

// Free returns b to the device's pool.
func (d *Device) Free(b Buffer) { d.cu.Free(b) }

// MemStats reports the device memory the pool holds, by kind.
func (d *Device) MemStats() MemStats { return d.cu.MemStats() }

// CopyToDevice copies src into dst from its start.
func (d *Device) CopyToDevice(dst Buffer, src []byte) error { return d.cu.CopyToDevice(dst, src) }

// CopyFromDevice copies len(dst) bytes from the start of src.
func (d *Device) CopyFromDevice(dst []byte, src Buffer) error { return d.cu.CopyFromDevice(dst, src) }

// Capture records the kernels that fn queues (through the Device's stream
// methods) into a graph; fn runs on the device thread.
func (d *Device) Capture(fn func() error) (*Graph, error) { return d.cu.Capture(fn) }

// CopyBandwidth measures the device-to-device copy rate in bytes per second
// (bytes read plus bytes written) with two buffers of n bytes, the
// roofline that decode speed is compared with.
func (d *Device) CopyBandwidth(n int64, iters int) (float64, error) {
	return d.cu.CopyBandwidth(n, iters)
}

// The device-thread methods the kernel wrappers and the backend use, on
// cuda's: short names, as the backend's code reads best with them.

// do runs fn on the device thread and returns its error. fn must not call
// do again (no exported method inside it): the thread would wait on itself.
func (d *Device) do(fn func() error) error { return d.cu.Do(fn) }

// sync waits for the stream's work (device thread).
func (d *Device) sync() error { return d.cu.StreamSync() }

// alloc reserves n bytes of kind from the pool (device thread).
func (d *Device) alloc(n int64, kind MemKind) (Buffer, error) { return d.cu.MemAlloc(n, kind) }

// free returns b to the pool (device thread).
func (d *Device) free(b Buffer) { d.cu.MemFree(b) }

// htod copies src to dst at byte offset off, after the stream's queued
// work (device thread).
func (d *Device) htod(dst Buffer, off int64, src []byte) error { return d.cu.HtoD(dst, off, src) }

// dtoh copies len(dst) bytes from src at offset off, after the stream's
// queued work (device thread).
func (d *Device) dtoh(dst []byte, src Buffer, off int64) error { return d.cu.DtoH(dst, src, off) }

// uploadNew allocates a buffer of kind for src (padded with zeros to pad
// bytes when pad > len) and copies src into it (device thread).
func (d *Device) uploadNew(src []byte, pad int64, kind MemKind) (Buffer, error) {
	return d.cu.UploadNew(src, pad, kind)
}

// memset queues filling b with byte v (device thread).
func (d *Device) memset(b Buffer, v byte) error { return d.cu.Memset(b, v) }

// copyDtoD queues a device-to-device copy of n bytes (device thread).
func (d *Device) copyDtoD(dst, src Buffer, n int64) error { return d.cu.CopyDtoD(dst, src, n) }

// bytesOf views a slice of plain values as bytes (no copy).
func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// dim3 is a grid or block shape.
type dim3 = cuda.Dim3

// grid1 is x blocks (or threads) in one dimension.
func grid1(x int) dim3 { return cuda.Grid1(x) }

// grid2 is x by y blocks (or threads).
func grid2(x, y int) dim3 { return cuda.Grid2(x, y) }

// grid3 is the shape of x by y by z blocks.
func grid3(x, y, z int) dim3 { return dim3{X: uint32(x), Y: uint32(y), Z: uint32(z)} }

// Kernel argument encoders (cuda's).
func argBuf(b Buffer) uint64  { return b.Ptr() }
func argInt(v int) uint64     { return cuda.ArgInt(v) }
func argF32(v float32) uint64 { return cuda.ArgF32(v) }
func argBool(v bool) uint64   { return cuda.ArgBool(v) }

// launch queues kernel name on the device's stream (device thread).
func (d *Device) launch(name string, grid, block dim3, shared int, args ...uint64) error {
	return d.cu.Launch(name, grid, block, shared, args...)
}

// launchPDL queues a kernel that waits for its predecessors itself
// (pdl_wait in kernels/pdl.cuh) with programmatic dependent launch: it may
// start, and fetch its weights, while the kernel before it finishes. Where
// the GPU (before sm_90) or driver lacks it, or LOWBIT_PDL=off, it is an
// ordinary launch (device thread).
func (d *Device) launchPDL(name string, grid, block dim3, shared int, args ...uint64) error {
	if d.exp.noPDL {
		return d.cu.Launch(name, grid, block, shared, args...)
	}
	return d.cu.LaunchPDL(name, grid, block, shared, args...)
}

// function finds a kernel by name in the loaded modules (device thread).
func (d *Device) function(name string) (uintptr, error) { return d.cu.Function(name) }

// maxThreads is the largest block kernel name takes (its launch bounds,
// or what its registers allow), from the driver (device thread).
func (d *Device) maxThreads(name string) (int, error) { return d.cu.MaxThreads(name) }

// allowShared lets kernel name take n bytes of dynamic shared memory,
// raising its limit past the default once (device thread). The default
// 48 KiB holds static and dynamic shared memory together, so the limit is
// raised from 47 KiB on (lowbit's kernels' static arrays take less than
// 1 KiB).
func (d *Device) allowShared(name string, n int) error {
	if n <= 47<<10 || d.sharedSet[name] >= n {
		return nil
	}
	if err := d.cu.SetMaxShared(name, n); err != nil {
		return err
	}
	d.sharedSet[name] = n
	return nil
}

// blocksPerSM is how many blocks of kernel name (threads each, shared
// bytes of dynamic shared memory) fit on one multiprocessor at once, as
// the driver computes it (device thread).
func (d *Device) blocksPerSM(name string, threads, shared int) (int, error) {
	return d.cu.BlocksPerSM(name, threads, shared)
}

// capture records the stream work fn queues into a graph (device thread).
func (d *Device) capture(fn func() error) (*Graph, error) {
	if err := d.beginCapture(); err != nil {
		return nil, err
	}
	return d.endCapture(fn())
}

// beginCapture starts recording the stream's work (device thread).
func (d *Device) beginCapture() error { return d.cu.BeginCapture() }

// endCapture stops recording and instantiates the graph; ferr, the error
// of the work queued meanwhile, discards it (device thread).
func (d *Device) endCapture(ferr error) (*Graph, error) { return d.cu.EndCapture(ferr) }

// launchGraph queues one replay of g (device thread).
func (d *Device) launchGraph(g *Graph) error { return d.cu.LaunchGraph(g) }

// timeIt runs fn (which queues work) iters times between two events and
// returns the mean milliseconds per iteration (device thread).
func (d *Device) timeIt(iters int, fn func() error) (float64, error) { return d.cu.TimeIt(iters, fn) }
