// Package cuda is a CUDA runtime for Go without cgo: the NVIDIA driver API
// reached at run time through purego (no CUDA toolkit at build time), one
// device's context and stream on a thread of its own, a caching pool of
// device memory, modules loaded from PTX, kernel launches (programmatic
// dependent launch included), CUDA graphs, events, pinned host memory and
// cuBLAS's GEMM.
//
// It exists apart from lowbit's GPU backend (package gpu) so that the
// runtime knows nothing of lowbit's formats, kernels or models: it imports
// no lowbit package (a test enforces it), can be reused and tested on its
// own, and the backend is written on top of it.
//
// CUDA's current context belongs to an OS thread, so each Device owns one
// goroutine locked to its thread and every driver call runs there. Methods
// whose comment says "(device thread)" run only inside Do, on that thread;
// where one has a twin that any goroutine may call, the device-thread one
// is named after the driver call (MemAlloc beside Alloc, StreamSync beside
// Synchronize). The other methods may be called from any goroutine, never
// inside Do: the thread would wait on itself. Without libcuda.so.1 Open
// returns ErrNoDriver, and callers use the CPU.
package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Device is one GPU with its primary context, a stream, the loaded
// modules and a memory pool.
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
	// threadsOf caches each kernel's largest block (MaxThreads).
	threadsOf map[string]int
	pool      pool

	calls chan func()
	quit  chan struct{}
	once  sync.Once

	// queued says whether work went to the stream since it was last
	// synchronized: copies to and from the host wait for it only then.
	queued bool
	// Launch parameter slots, reused by every launch (device thread only).
	argv [maxParams]uint64
	argp [maxParams]uintptr
	// pdl says whether LaunchPDL uses programmatic dependent launch (sm_90
	// and newer, a driver with cuLaunchKernelEx); pdlCfg and pdlAttr are
	// its launch parameters.
	pdl     bool
	pdlCfg  launchConfig
	pdlAttr launchAttr
}

// maxParams bounds a kernel's parameter count.
const maxParams = 24

// Open starts device ordinal (0 is the first GPU). It fails with ErrNoDriver
// when the NVIDIA driver is missing and ErrNoDevice when there is no such
// GPU.
func Open(ordinal int) (*Device, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, ordinal: ordinal, funcs: map[string]uintptr{}, threadsOf: map[string]int{},
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

// init runs on the device thread: driver, device, context, stream.
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
	d.pdl = d.major >= 9 && c.fn[fnLaunchKernelEx] != 0
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
	return c.check(c.call(fnStreamCreate, uintptr(unsafe.Pointer(&d.stream)), 1), "cuStreamCreate")
}

// release frees everything the device holds (device thread only).
func (d *Device) release() {
	c := d.drv
	if d.ctx == 0 {
		return
	}
	c.call(fnCtxSynchronize)
	d.pool.freeAll(d)
	for _, m := range d.mods {
		c.call(fnModuleUnload, m)
	}
	d.mods = nil
	if d.stream != 0 {
		c.call(fnStreamDestroy, d.stream)
		d.stream = 0
	}
	c.call(fnPrimaryCtxRelease, uintptr(d.dev))
	d.ctx = 0
}

// Do runs fn on the device thread and returns its error: the way to call
// the "(device thread)" methods. fn must not call Do again (nor a method
// that does): the thread would wait on itself.
func (d *Device) Do(fn func() error) error {
	errc := make(chan error, 1)
	select {
	case d.calls <- func() { errc <- fn() }:
	case <-d.quit:
		return ErrClosed
	}
	return <-errc
}

// Close frees the device's memory, modules and context and stops its
// goroutine. Buffers, graphs and events of the device are invalid
// afterwards; a second Close returns ErrClosed.
func (d *Device) Close() error {
	err := ErrClosed
	d.once.Do(func() {
		err = d.Do(func() error { d.release(); return nil })
		close(d.quit)
	})
	return err
}

// Name is the GPU's marketing name, e.g. "NVIDIA H100 80GB HBM3".
func (d *Device) Name() string { return d.name }

// Capability is the compute capability, e.g. 9, 0 for sm_90, which decides
// the PTX to load and the instructions a kernel may use.
func (d *Device) Capability() (major, minor int) { return d.major, d.minor }

// TotalMem is the device memory in bytes.
func (d *Device) TotalMem() int64 { return int64(d.totalMem) }

// Multiprocessors is the number of SMs, which sizes persistent grids.
func (d *Device) Multiprocessors() int { return d.sms }

// L2Size is the L2 cache in bytes, which bounds what stays cached between
// kernels.
func (d *Device) L2Size() int { return d.l2 }

// MaxSharedPerBlock is the most dynamic shared memory a block may opt in
// to (SetMaxShared), in bytes.
func (d *Device) MaxSharedPerBlock() int { return d.maxShared }

// String describes the device in one line.
func (d *Device) String() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %.1f GiB)", d.name, d.major, d.minor, d.sms, float64(d.totalMem)/(1<<30))
}

// MemInfo returns the free and total device memory in bytes, as the driver
// sees them now (other processes included).
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.Do(func() error {
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
	return d.Do(d.StreamSync)
}

// StreamSync is Synchronize on the device thread (device thread).
func (d *Device) StreamSync() error {
	if err := d.drv.check(d.drv.call(fnStreamSynchronize, d.stream), "cuStreamSynchronize"); err != nil {
		return err
	}
	d.queued = false
	return nil
}
