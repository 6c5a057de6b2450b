package gpu

import (
	"fmt"
	"math"
	"unsafe"
)

// dim3 is a grid or block shape.
type dim3 struct{ x, y, z uint32 }

func grid1(x int) dim3    { return dim3{uint32(x), 1, 1} }
func grid2(x, y int) dim3 { return dim3{uint32(x), uint32(y), 1} }

// Kernel argument encoders: every parameter travels in an 8-byte slot and
// the driver copies the parameter's own size from its start.
func argBuf(b Buffer) uint64  { return b.ptr }
func argInt(v int) uint64     { return uint64(uint32(int32(v))) }
func argF32(v float32) uint64 { return uint64(math.Float32bits(v)) }
func argBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// launch queues kernel name on the device's stream (device thread).
func (d *Device) launch(name string, grid, block dim3, shared int, args ...uint64) error {
	f, ok, err := d.setArgs(name, grid, args)
	if !ok {
		return err
	}
	d.queued = true
	r := d.drv.call(fnLaunchKernel, f, uintptr(grid.x), uintptr(grid.y), uintptr(grid.z),
		uintptr(block.x), uintptr(block.y), uintptr(block.z), uintptr(shared), d.stream,
		uintptr(unsafe.Pointer(&d.argp[0])), 0)
	return d.drv.check(r, "cuLaunchKernel "+name)
}

// setArgs finds kernel name and fills the parameter slots with args; ok
// is false, with no error, when the grid is empty (nothing to launch).
func (d *Device) setArgs(name string, grid dim3, args []uint64) (f uintptr, ok bool, err error) {
	if f, err = d.function(name); err != nil {
		return 0, false, err
	}
	if len(args) > maxParams {
		return 0, false, fmt.Errorf("gpu: kernel %s: %d parameters, at most %d", name, len(args), maxParams)
	}
	if grid.x == 0 || grid.y == 0 || grid.z == 0 {
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

// launchPDL queues a kernel that waits for its predecessors itself
// (pdl_wait in kernels/pdl.cuh) with programmatic dependent launch: it may
// start, and fetch its weights, while the kernel before it finishes. Where
// the GPU (before sm_90) or driver lacks it, or LOWBIT_PDL=off, it is an
// ordinary launch (device thread).
func (d *Device) launchPDL(name string, grid, block dim3, shared int, args ...uint64) error {
	if !d.pdl {
		return d.launch(name, grid, block, shared, args...)
	}
	f, ok, err := d.setArgs(name, grid, args)
	if !ok {
		return err
	}
	d.pdlAttr = launchAttr{id: attrProgrammaticSerialization}
	d.pdlAttr.val[0] = 1 // programmaticStreamSerializationAllowed
	d.pdlCfg = launchConfig{gridX: grid.x, gridY: grid.y, gridZ: grid.z, blockX: block.x, blockY: block.y,
		blockZ: block.z, shared: uint32(shared), stream: d.stream,
		attrs: uintptr(unsafe.Pointer(&d.pdlAttr)), numAttrs: 1}
	d.queued = true
	r := d.drv.call(fnLaunchKernelEx, uintptr(unsafe.Pointer(&d.pdlCfg)), f, uintptr(unsafe.Pointer(&d.argp[0])), 0)
	return d.drv.check(r, "cuLaunchKernelEx "+name)
}

// setMaxShared lets kernel name use up to n bytes of dynamic shared memory
// (above the default 48 KiB).
func (d *Device) setMaxShared(name string, n int) error {
	f, err := d.function(name)
	if err != nil {
		return err
	}
	return d.drv.check(d.drv.call(fnFuncSetAttribute, f, funcAttrMaxDynShared, uintptr(n)), "cuFuncSetAttribute "+name)
}

// maxThreads is the largest block kernel name takes (its launch bounds,
// or what its registers allow), from the driver (device thread).
func (d *Device) maxThreads(name string) (int, error) {
	if n, ok := d.threadsOf[name]; ok {
		return n, nil
	}
	f, err := d.function(name)
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

// allowShared lets kernel name take n bytes of dynamic shared memory,
// raising its limit past the default once (device thread). The default
// 48 KiB holds static and dynamic shared memory together, so the limit is
// raised from 47 KiB on (the kernels' static arrays take less than 1 KiB).
func (d *Device) allowShared(name string, n int) error {
	if n <= 47<<10 || d.sharedSet[name] >= n {
		return nil
	}
	if err := d.setMaxShared(name, n); err != nil {
		return err
	}
	d.sharedSet[name] = n
	return nil
}

// blocksPerSM is how many blocks of kernel name (threads each, shared
// bytes of dynamic shared memory) fit on one multiprocessor at once, as
// the driver computes it from registers, shared memory and threads.
func (d *Device) blocksPerSM(name string, threads, shared int) (int, error) {
	f, err := d.function(name)
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

// Graph is a captured sequence of kernels, replayed with one launch.
type Graph struct {
	d    *Device
	g    uintptr
	exec uintptr
}

// capture records the stream work fn queues into a graph (device thread).
func (d *Device) capture(fn func() error) (*Graph, error) {
	if err := d.beginCapture(); err != nil {
		return nil, err
	}
	return d.endCapture(fn())
}

// beginCapture starts recording the stream's work (device thread).
func (d *Device) beginCapture() error {
	// CU_STREAM_CAPTURE_MODE_RELAXED: allocations elsewhere stay legal.
	return d.drv.check(d.drv.call(fnStreamBeginCapture, d.stream, 2), "cuStreamBeginCapture_v2")
}

// endCapture stops recording and instantiates the graph; ferr, the error
// of the work queued meanwhile, discards it (device thread).
func (d *Device) endCapture(ferr error) (*Graph, error) {
	c := d.drv
	var g uintptr
	eerr := c.check(c.call(fnStreamEndCapture, d.stream, uintptr(unsafe.Pointer(&g))), "cuStreamEndCapture")
	if ferr != nil || eerr != nil {
		if g != 0 {
			c.call(fnGraphDestroy, g)
		}
		if ferr != nil {
			return nil, fmt.Errorf("gpu: capturing a graph: %w", ferr)
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

// launchGraph queues one replay of g (device thread).
func (d *Device) launchGraph(g *Graph) error {
	d.queued = true
	return d.drv.check(d.drv.call(fnGraphLaunch, g.exec, d.stream), "cuGraphLaunch")
}

// destroy frees the graph (device thread).
func (g *Graph) destroy() {
	g.d.drv.call(fnGraphExecDestroy, g.exec)
	g.d.drv.call(fnGraphDestroy, g.g)
}

// Capture records the kernels that fn queues (through the Device's stream
// methods) into a graph; fn runs on the device thread.
func (d *Device) Capture(fn func() error) (*Graph, error) {
	var g *Graph
	err := d.do(func() (err error) {
		g, err = d.capture(fn)
		return err
	})
	return g, err
}

// Launch queues one replay of the graph.
func (g *Graph) Launch() error { return g.d.do(func() error { return g.d.launchGraph(g) }) }

// Close frees the graph.
func (g *Graph) Close() { g.d.do(func() error { g.destroy(); return nil }) }

// timeIt runs fn (which queues work) iters times between two events and
// returns the mean milliseconds per iteration (device thread).
func (d *Device) timeIt(iters int, fn func() error) (float64, error) {
	c := d.drv
	var start, stop uintptr
	if err := c.check(c.call(fnEventCreate, uintptr(unsafe.Pointer(&start)), 0), "cuEventCreate"); err != nil {
		return 0, err
	}
	defer c.call(fnEventDestroy, start)
	if err := c.check(c.call(fnEventCreate, uintptr(unsafe.Pointer(&stop)), 0), "cuEventCreate"); err != nil {
		return 0, err
	}
	defer c.call(fnEventDestroy, stop)
	d.queued = true
	if err := c.check(c.call(fnEventRecord, start, d.stream), "cuEventRecord"); err != nil {
		return 0, err
	}
	for i := 0; i < iters; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := c.check(c.call(fnEventRecord, stop, d.stream), "cuEventRecord"); err != nil {
		return 0, err
	}
	if err := c.check(c.call(fnEventSynchronize, stop), "cuEventSynchronize"); err != nil {
		return 0, err
	}
	var ms float32
	if err := c.check(c.call(fnEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start, stop), "cuEventElapsedTime"); err != nil {
		return 0, err
	}
	return float64(ms) / float64(iters), nil
}

// CopyBandwidth measures the device-to-device copy rate in bytes per second
// (bytes read plus bytes written) with two buffers of n bytes, the
// roofline that decode speed is compared with.
func (d *Device) CopyBandwidth(n int64, iters int) (float64, error) {
	var bw float64
	err := d.do(func() error {
		a, err := d.pool.alloc(d, n, MemScratch)
		if err != nil {
			return err
		}
		defer d.pool.release(a)
		b, err := d.pool.alloc(d, n, MemScratch)
		if err != nil {
			return err
		}
		defer d.pool.release(b)
		if err := d.memset(a, 1); err != nil {
			return err
		}
		if _, err := d.timeIt(3, func() error { return d.copyDtoD(b, a, n) }); err != nil {
			return err
		}
		ms, err := d.timeIt(iters, func() error { return d.copyDtoD(b, a, n) })
		if err != nil {
			return err
		}
		bw = 2 * float64(n) / (ms / 1e3)
		return nil
	})
	return bw, err
}
