package cuda

import (
	"fmt"
	"math"
	"unsafe"
)

// Dim3 is a grid or block shape, as cuLaunchKernel takes it.
type Dim3 struct{ X, Y, Z uint32 }

// Grid1 is the shape of x blocks (or threads) in one dimension.
func Grid1(x int) Dim3 { return Dim3{uint32(x), 1, 1} }

// Grid2 is the shape of x by y blocks (or threads).
func Grid2(x, y int) Dim3 { return Dim3{uint32(x), uint32(y), 1} }

// Kernel argument encoders: every parameter travels in an 8-byte slot and
// the driver copies the parameter's own size from its start. A Buffer
// travels as its Ptr.

// ArgInt encodes an int parameter (a 32-bit int in the kernel).
func ArgInt(v int) uint64 { return uint64(uint32(int32(v))) }

// ArgF32 encodes a float parameter.
func ArgF32(v float32) uint64 { return uint64(math.Float32bits(v)) }

// ArgBool encodes a bool parameter.
func ArgBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// Launch queues kernel name (found in the loaded modules) on the device's
// stream with grid, block, shared bytes of dynamic shared memory and the
// encoded args; an empty grid launches nothing (device thread).
func (d *Device) Launch(name string, grid, block Dim3, shared int, args ...uint64) error {
	f, ok, err := d.setArgs(name, grid, args)
	if !ok {
		return err
	}
	d.queued = true
	r := d.drv.call(fnLaunchKernel, f, uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(shared), d.stream,
		uintptr(unsafe.Pointer(&d.argp[0])), 0)
	return d.drv.check(r, "cuLaunchKernel "+name)
}

// setArgs finds kernel name and fills the parameter slots with args; ok
// is false, with no error, when the grid is empty (nothing to launch).
func (d *Device) setArgs(name string, grid Dim3, args []uint64) (f uintptr, ok bool, err error) {
	if f, err = d.Function(name); err != nil {
		return 0, false, err
	}
	if len(args) > maxParams {
		return 0, false, fmt.Errorf("cuda: kernel %s: %d parameters, at most %d", name, len(args), maxParams)
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 {
		return 0, false, nil
	}
	for i, a := range args {
		d.argv[i] = a
		d.argp[i] = uintptr(unsafe.Pointer(&d.argv[i]))
	}
	return f, true, nil
}

// launchConfig is CUlaunchConfig, and launchAttr CUlaunchAttribute, as
// cuLaunchKernelEx reads them (64-bit layout).
type launchConfig struct {
	gridX, gridY, gridZ    uint32
	blockX, blockY, blockZ uint32
	shared                 uint32
	_                      uint32
	stream                 uintptr
	attrs                  uintptr
	numAttrs               uint32
	_                      uint32
}

type launchAttr struct {
	id  uint32
	_   uint32
	val [64]byte
}

// attrProgrammaticSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const attrProgrammaticSerialization = 6

// PDL says whether LaunchPDL uses programmatic dependent launch here
// (sm_90 and newer, with a driver that has cuLaunchKernelEx).
func (d *Device) PDL() bool { return d.pdl }

// LaunchPDL queues a kernel that waits for its predecessors itself
// (griddepcontrol.wait) with programmatic dependent launch: it may start,
// and read constant data, while the kernel before it finishes. Where the
// GPU (before sm_90) or driver lacks it, it is an ordinary Launch (device
// thread).
func (d *Device) LaunchPDL(name string, grid, block Dim3, shared int, args ...uint64) error {
	if !d.pdl {
		return d.Launch(name, grid, block, shared, args...)
	}
	f, ok, err := d.setArgs(name, grid, args)
	if !ok {
		return err
	}
	d.pdlAttr = launchAttr{id: attrProgrammaticSerialization}
	d.pdlAttr.val[0] = 1 // programmaticStreamSerializationAllowed
	d.pdlCfg = launchConfig{gridX: grid.X, gridY: grid.Y, gridZ: grid.Z, blockX: block.X, blockY: block.Y,
		blockZ: block.Z, shared: uint32(shared), stream: d.stream,
		attrs: uintptr(unsafe.Pointer(&d.pdlAttr)), numAttrs: 1}
	d.queued = true
	r := d.drv.call(fnLaunchKernelEx, uintptr(unsafe.Pointer(&d.pdlCfg)), f, uintptr(unsafe.Pointer(&d.argp[0])), 0)
	return d.drv.check(r, "cuLaunchKernelEx "+name)
}

// SetMaxShared lets kernel name use up to n bytes of dynamic shared memory
// (above the default 48 KiB, up to MaxSharedPerBlock) (device thread).
func (d *Device) SetMaxShared(name string, n int) error {
	f, err := d.Function(name)
	if err != nil {
		return err
	}
	return d.drv.check(d.drv.call(fnFuncSetAttribute, f, funcAttrMaxDynShared, uintptr(n)), "cuFuncSetAttribute "+name)
}

// MaxThreads is the largest block kernel name takes (its launch bounds,
// or what its registers allow), from the driver once (device thread).
func (d *Device) MaxThreads(name string) (int, error) {
	if n, ok := d.threadsOf[name]; ok {
		return n, nil
	}
	f, err := d.Function(name)
	if err != nil {
		return 0, err
	}
	var n int32
	r := d.drv.call(fnFuncGetAttribute, uintptr(unsafe.Pointer(&n)), funcAttrMaxThreads, f)
	if err := d.drv.check(r, "cuFuncGetAttribute "+name); err != nil {
		return 0, err
	}
	d.threadsOf[name] = int(n)
	return int(n), nil
}

// BlocksPerSM is how many blocks of kernel name (threads each, shared
// bytes of dynamic shared memory) fit on one multiprocessor at once, as
// the driver computes it from registers, shared memory and threads; at
// least 1 (device thread).
func (d *Device) BlocksPerSM(name string, threads, shared int) (int, error) {
	f, err := d.Function(name)
	if err != nil {
		return 0, err
	}
	var n int32
	r := d.drv.call(fnOccupancy, uintptr(unsafe.Pointer(&n)), f, uintptr(threads), uintptr(shared))
	if err := d.drv.check(r, "cuOccupancyMaxActiveBlocksPerMultiprocessor "+name); err != nil {
		return 0, err
	}
	return max(int(n), 1), nil
}

// Graph is a captured sequence of stream work, replayed with one launch:
// a step that launches many kernels costs the host one call.
type Graph struct {
	d    *Device
	g    uintptr
	exec uintptr
}

// BeginCapture starts recording the stream's work into a graph instead of
// running it (device thread).
func (d *Device) BeginCapture() error {
	// CU_STREAM_CAPTURE_MODE_RELAXED: allocations elsewhere stay legal.
	return d.drv.check(d.drv.call(fnStreamBeginCapture, d.stream, 2), "cuStreamBeginCapture_v2")
}

// EndCapture stops recording and instantiates the graph; ferr, the error
// of the work queued meanwhile, discards it. It must follow every
// BeginCapture, whatever happened in between (device thread).
func (d *Device) EndCapture(ferr error) (*Graph, error) {
	c := d.drv
	var g uintptr
	eerr := c.check(c.call(fnStreamEndCapture, d.stream, uintptr(unsafe.Pointer(&g))), "cuStreamEndCapture")
	if ferr != nil || eerr != nil {
		if g != 0 {
			c.call(fnGraphDestroy, g)
		}
		if ferr != nil {
			return nil, fmt.Errorf("cuda: capturing a graph: %w", ferr)
		}
		return nil, eerr
	}
	var exec uintptr
	if err := c.check(c.call(fnGraphInstantiate, uintptr(unsafe.Pointer(&exec)), g, 0), "cuGraphInstantiateWithFlags"); err != nil {
		c.call(fnGraphDestroy, g)
		return nil, err
	}
	return &Graph{d: d, g: g, exec: exec}, nil
}

// LaunchGraph queues one replay of g (device thread).
func (d *Device) LaunchGraph(g *Graph) error {
	d.queued = true
	return d.drv.check(d.drv.call(fnGraphLaunch, g.exec, d.stream), "cuGraphLaunch")
}

// Destroy frees the graph (device thread).
func (g *Graph) Destroy() {
	g.d.drv.call(fnGraphExecDestroy, g.exec)
	g.d.drv.call(fnGraphDestroy, g.g)
}

// Capture records the work that fn queues (through the device-thread
// methods; fn runs on the device thread) into a graph.
func (d *Device) Capture(fn func() error) (*Graph, error) {
	var g *Graph
	err := d.Do(func() error {
		if err := d.BeginCapture(); err != nil {
			return err
		}
		var err error
		g, err = d.EndCapture(fn())
		return err
	})
	return g, err
}

// Launch queues one replay of the graph.
func (g *Graph) Launch() error { return g.d.Do(func() error { return g.d.LaunchGraph(g) }) }

// Close frees the graph.
func (g *Graph) Close() { g.d.Do(func() error { g.Destroy(); return nil }) }

// TimeIt runs fn (which queues work) iters times between two events and
// returns the mean milliseconds per iteration, as the GPU measured them
// (device thread).
func (d *Device) TimeIt(iters int, fn func() error) (float64, error) {
	start, err := d.newEvent(eventDefault)
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	stop, err := d.newEvent(eventDefault)
	if err != nil {
		return 0, err
	}
	defer stop.Destroy()
	if err := start.Record(); err != nil {
		return 0, err
	}
	for i := 0; i < iters; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := stop.Record(); err != nil {
		return 0, err
	}
	if err := stop.Synchronize(); err != nil {
		return 0, err
	}
	var ms float32
	if err := d.drv.check(d.drv.call(fnEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.ev, stop.ev), "cuEventElapsedTime"); err != nil {
		return 0, err
	}
	return float64(ms) / float64(iters), nil
}

// CopyBandwidth measures the device-to-device copy rate in bytes per second
// (bytes read plus bytes written) with two buffers of n bytes: the
// roofline a memory-bound kernel is compared with.
func (d *Device) CopyBandwidth(n int64, iters int) (float64, error) {
	var bw float64
	err := d.Do(func() error {
		a, err := d.MemAlloc(n, MemScratch)
		if err != nil {
			return err
		}
		defer d.MemFree(a)
		b, err := d.MemAlloc(n, MemScratch)
		if err != nil {
			return err
		}
		defer d.MemFree(b)
		if err := d.Memset(a, 1); err != nil {
			return err
		}
		if _, err := d.TimeIt(3, func() error { return d.CopyDtoD(b, a, n) }); err != nil {
			return err
		}
		ms, err := d.TimeIt(iters, func() error { return d.CopyDtoD(b, a, n) })
		if err != nil {
			return err
		}
		bw = 2 * float64(n) / (ms / 1e3)
		return nil
	})
	return bw, err
}
