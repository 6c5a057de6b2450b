// Package gpu is lowbit's CUDA backend: the NVIDIA driver API reached at run
// time through purego (no cgo, no CUDA toolkit at build time), the kernels
// (gpu/kernels/*.cu, compiled to PTX by `make kernels` and embedded), device
// memory, CUDA graphs for the decode step, and the matrix products for every
// quantized format.
//
// CUDA's current context belongs to an OS thread, so each Device owns one
// goroutine locked to its thread and every driver call runs there; exported
// methods hand it a closure and wait. Without libcuda.so.1 Open returns
// ErrNoDriver and callers use the CPU.
package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// ErrClosed is returned by a Device used after Close.
var ErrClosed = errors.New("gpu: device is closed")

// minMajor is the oldest compute capability the kernels are built for (sm_80).
const minMajor = 8

// Device is one GPU with its primary context, a stream, the loaded kernels
// and a memory pool. Its methods may be called from any goroutine; they
// serialize on the device's own thread.
type Device struct {
	drv     *driver
	ordinal int
	dev     int32
	ctx     uintptr
	stream  uintptr

	name         string
	major, minor int
	totalMem     uint64
	sms          int
	l2           int
	maxShared    int

	mods  []uintptr
	funcs map[string]uintptr
	pool  pool

	calls chan func()
	quit  chan struct{}
	once  sync.Once

	// matvecGrid, when non-zero, fixes the grid of the fast matvec kernels
	// (tests force a block to loop over several row groups; benchmarks
	// sweep it).
	matvecGrid int
	// matvecMode, when set, forces the matvec kernel (tests and
	// benchmarks; the zero value chooses by shape, matvecTable).
	matvecMode matvecKernel
	// sharedSet records the dynamic shared memory each kernel may use.
	sharedSet map[string]int
	// threadsOf caches each kernel's largest block (maxThreads).
	threadsOf map[string]int

	// cuBLAS for prefill products, loaded on first use (blasTried), with
	// the reason when it could not be; x16 and w16 are its scratch: fp16
	// x and weight panels, w16 also the int8 panels of ternary weights.
	blas      *blas
	blasTried bool
	blasErr   error
	x16, w16  Buffer
	// blasOff keeps every product on lowbit's own kernels (tests).
	blasOff bool
	// blasI8Err says why cuBLAS refused an int8 GEMM (matmulI8 then
	// keeps to the kernel).
	blasI8Err error

	// queued says whether work went to the stream since it was last
	// synchronized: copies to and from the host wait for it only then.
	queued bool
	// idHost is pinned host memory the argmax kernel writes a chained
	// greedy step's id to, through its device address idDev, and idEv the
	// event that marks it there (chain.go).
	idHost *[2]int32
	idDev  Buffer
	idEv   uintptr
	// argmaxPart is the argmax kernel's scratch (argmaxScratch).
	argmaxPart Buffer

	// Launch parameter slots, reused by every launch (device thread only).
	argv [maxParams]uint64
	argp [maxParams]uintptr
	// pdl says whether launchPDL uses programmatic dependent launch (sm_90
	// and newer, a driver with cuLaunchKernelEx, LOWBIT_PDL not "off");
	// pdlCfg and pdlAttr are its launch parameters.
	pdl     bool
	pdlCfg  launchConfig
	pdlAttr launchAttr
	// exp are the experiments of a lowbitexp build (none otherwise).
	exp experiments
}

// maxParams bounds a kernel's parameter count.
const maxParams = 24

// Open starts device ordinal (0 is the first GPU). It fails with ErrNoDriver
// when the NVIDIA driver is missing, ErrNoDevice when there is no GPU, and a
// message naming the found capability when the GPU is older than sm_80.
func Open(ordinal int) (*Device, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, ordinal: ordinal, funcs: map[string]uintptr{}, sharedSet: map[string]int{}, threadsOf: map[string]int{},
		calls: make(chan func()), quit: make(chan struct{})}
	started := make(chan error, 1)
	go d.loop(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return d, nil
}

// loop is the device goroutine: it locks its OS thread, makes the context
// current there and then runs submitted closures until Close.
func (d *Device) loop(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.init(); err != nil {
		d.release()
		started <- err
		return
	}
	started <- nil
	for {
		select {
		case f := <-d.calls:
			f()
		case <-d.quit:
			return
		}
	}
}

// init runs on the device thread: driver, device, context, stream, kernels.
func (d *Device) init() error {
	c := d.drv
	if r := c.call(fnInit, 0); r != cuSuccess {
		if r == cuNoDevice {
			return ErrNoDevice
		}
		return c.check(r, "cuInit")
	}
	var n int32
	if err := c.check(c.call(fnDeviceGetCount, uintptr(unsafe.Pointer(&n))), "cuDeviceGetCount"); err != nil {
		return err
	}
	if n == 0 {
		return ErrNoDevice
	}
	if d.ordinal < 0 || d.ordinal >= int(n) {
		return fmt.Errorf("%w: ordinal %d, the driver sees %d GPU(s)", ErrNoDevice, d.ordinal, n)
	}
	if err := c.check(c.call(fnDeviceGet, uintptr(unsafe.Pointer(&d.dev)), uintptr(d.ordinal)), "cuDeviceGet"); err != nil {
		return err
	}
	name := make([]byte, 256)
	if err := c.check(c.call(fnDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(d.dev)), "cuDeviceGetName"); err != nil {
		return err
	}
	d.name = cString(&name[0])
	attrs := []struct {
		attr int
		dst  *int
	}{
		{attrCapabilityMajor, &d.major}, {attrCapabilityMinor, &d.minor},
		{attrMultiprocessors, &d.sms}, {attrL2Size, &d.l2}, {attrMaxSharedOptin, &d.maxShared},
	}
	for _, a := range attrs {
		var v int32
		if err := c.check(c.call(fnDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(d.dev)), "cuDeviceGetAttribute"); err != nil {
			return err
		}
		*a.dst = int(v)
	}
	exp, err := readExperiments()
	if err != nil {
		return err
	}
	d.exp = exp
	d.pdl = d.major >= 9 && c.fn[fnLaunchKernelEx] != 0 && !d.exp.noPDL
	if d.major < minMajor {
		return fmt.Errorf("gpu: %s needs sm_80 or newer, found sm_%d%d", d.name, d.major, d.minor)
	}
	if err := c.check(c.call(fnDeviceTotalMem, uintptr(unsafe.Pointer(&d.totalMem)), uintptr(d.dev)), "cuDeviceTotalMem_v2"); err != nil {
		return err
	}
	if err := c.check(c.call(fnPrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(d.dev)), "cuDevicePrimaryCtxRetain"); err != nil {
		return err
	}
	if err := c.check(c.call(fnCtxSetCurrent, d.ctx), "cuCtxSetCurrent"); err != nil {
		return err
	}
	// CU_STREAM_NON_BLOCKING: no implicit sync with the legacy stream.
	if err := c.check(c.call(fnStreamCreate, uintptr(unsafe.Pointer(&d.stream)), 1), "cuStreamCreate"); err != nil {
		return err
	}
	return d.loadModules()
}

// release frees everything the device holds (device thread only).
func (d *Device) release() {
	c := d.drv
	if d.ctx == 0 {
		return
	}
	c.call(fnCtxSynchronize)
	if d.blas != nil {
		d.blas.close()
		d.blas = nil
	}
	d.pool.freeAll(d)
	d.argmaxPart = Buffer{}
	for _, m := range d.mods {
		c.call(fnModuleUnload, m)
	}
	d.mods = nil
	if d.idEv != 0 {
		c.call(fnEventDestroy, d.idEv)
		d.idEv = 0
	}
	if d.idHost != nil {
		c.call(fnMemFreeHost, uintptr(unsafe.Pointer(d.idHost)))
		d.idHost, d.idDev = nil, Buffer{}
	}
	if d.stream != 0 {
		c.call(fnStreamDestroy, d.stream)
		d.stream = 0
	}
	c.call(fnPrimaryCtxRelease, uintptr(d.dev))
	d.ctx = 0
}

// do runs fn on the device thread and returns its error. fn must not call
// do again (no exported method inside it): the thread would wait on itself.
func (d *Device) do(fn func() error) error {
	errc := make(chan error, 1)
	select {
	case d.calls <- func() { errc <- fn() }:
	case <-d.quit:
		return ErrClosed
	}
	return <-errc
}

// Close frees the device's memory, kernels and context and stops its
// goroutine. Buffers and graphs of the device are invalid afterwards.
func (d *Device) Close() error {
	err := ErrClosed
	d.once.Do(func() {
		err = d.do(func() error { d.release(); return nil })
		close(d.quit)
	})
	return err
}

// Name is the GPU's marketing name, e.g. "NVIDIA H100 80GB HBM3".
func (d *Device) Name() string { return d.name }

// Capability is the compute capability, e.g. 9, 0 for sm_90.
func (d *Device) Capability() (major, minor int) { return d.major, d.minor }

// TotalMem is the device memory in bytes.
func (d *Device) TotalMem() int64 { return int64(d.totalMem) }

// Multiprocessors is the number of SMs, which sizes persistent grids.
func (d *Device) Multiprocessors() int { return d.sms }

// String describes the device in one line.
func (d *Device) String() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %.1f GiB)", d.name, d.major, d.minor, d.sms, float64(d.totalMem)/(1<<30))
}

// MemInfo returns the free and total device memory in bytes, as the driver
// sees them now (other processes included).
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.do(func() error {
		var f, t uint64
		if err := d.drv.check(d.drv.call(fnMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))), "cuMemGetInfo_v2"); err != nil {
			return err
		}
		free, total = int64(f), int64(t)
		return nil
	})
	return free, total, err
}

// Synchronize waits for all work queued on the device's stream and reports
// any asynchronous error (a failed kernel, for instance).
func (d *Device) Synchronize() error {
	return d.do(d.sync)
}

func (d *Device) sync() error {
	if err := d.drv.check(d.drv.call(fnStreamSynchronize, d.stream), "cuStreamSynchronize"); err != nil {
		return err
	}
	d.queued = false
	return nil
}
