package cuda

import (
	"fmt"
	"unsafe"
)

// Buffer is a span of device memory: its address and length, passed by
// value like a slice header. The zero Buffer is empty.
type Buffer struct {
	ptr  uint64
	size int64
}

// Size is the buffer's usable length in bytes.
func (b Buffer) Size() int64 { return b.size }

// Ptr is the device address (a CUdeviceptr), for kernel arguments; 0 for
// the zero Buffer.
func (b Buffer) Ptr() uint64 { return b.ptr }

// Slice returns the part [off, off+n) of b, a view that shares its memory
// (and is not freed on its own). It does not check the bounds: views past
// the end of b are the caller's mistake.
func (b Buffer) Slice(off, n int64) Buffer { return Buffer{ptr: b.ptr + uint64(off), size: n} }

// MemKind says what an allocation holds, so MemStats can say where the
// device's memory went.
type MemKind int

// The kinds of device memory.
const (
	MemScratch MemKind = iota // activations, temporaries
	MemWeights                // packed weights, scales, norms
	MemKV                     // the KV cache
	numKinds
)

// MemStats is device memory in use by kind, plus freed blocks the pool
// keeps for reuse.
type MemStats struct {
	Weights, KV, Scratch, Cached int64
}

// pool is a caching allocator: freed blocks are kept in free lists by size
// class and handed out again, so a warm loop allocates nothing (which a
// captured graph needs). All of it runs on the device thread.
type pool struct {
	free   map[int64][]uint64
	live   map[uint64]liveBlock
	inUse  [numKinds]int64
	cached int64
}

// liveBlock is an allocated block's size class and kind.
type liveBlock struct {
	class int64
	kind  MemKind
}

// sizeClass rounds a request up: 512 bytes for small ones, then 1/8 of the
// next power of two (at most 12.5% waste), so similar sizes share blocks.
func sizeClass(n int64) int64 {
	if n <= 4096 {
		return (max(n, 1) + 511) &^ 511
	}
	p := int64(1)
	for p < n {
		p <<= 1
	}
	step := p / 8
	return (n + step - 1) / step * step
}

// alloc hands out a cached block of n's size class, or a new one from the
// driver; on out-of-memory it gives the cache back and tries once more.
func (p *pool) alloc(d *Device, n int64, kind MemKind) (Buffer, error) {
	if n <= 0 {
		return Buffer{}, fmt.Errorf("cuda: allocation of %d bytes", n)
	}
	if p.free == nil {
		p.free, p.live = map[int64][]uint64{}, map[uint64]liveBlock{}
	}
	class := sizeClass(n)
	if l := p.free[class]; len(l) > 0 {
		ptr := l[len(l)-1]
		p.free[class] = l[:len(l)-1]
		p.cached -= class
		p.live[ptr] = liveBlock{class, kind}
		p.inUse[kind] += class
		return Buffer{ptr: ptr, size: n}, nil
	}
	var ptr uint64
	r := d.drv.call(fnMemAlloc, uintptr(unsafe.Pointer(&ptr)), uintptr(class))
	if r == cuOutOfMemory && p.cached > 0 {
		p.trim(d)
		r = d.drv.call(fnMemAlloc, uintptr(unsafe.Pointer(&ptr)), uintptr(class))
	}
	if r != cuSuccess {
		err := d.drv.check(r, "cuMemAlloc_v2")
		return Buffer{}, fmt.Errorf("cuda: allocating %.1f MiB on %s (in use: weights %.1f MiB, KV cache %.1f MiB, scratch %.1f MiB): %w",
			float64(class)/(1<<20), d.name, mib(p.inUse[MemWeights]), mib(p.inUse[MemKV]), mib(p.inUse[MemScratch]), err)
	}
	p.live[ptr] = liveBlock{class, kind}
	p.inUse[kind] += class
	return Buffer{ptr: ptr, size: n}, nil
}

// mib is n bytes in MiB, for messages.
func mib(n int64) float64 { return float64(n) / (1 << 20) }

// release returns b to its free list.
func (p *pool) release(b Buffer) {
	lb, ok := p.live[b.ptr]
	if !ok {
		return
	}
	delete(p.live, b.ptr)
	p.inUse[lb.kind] -= lb.class
	p.free[lb.class] = append(p.free[lb.class], b.ptr)
	p.cached += lb.class
}

// trim gives every cached block back to the driver.
func (p *pool) trim(d *Device) {
	for class, l := range p.free {
		for _, ptr := range l {
			d.drv.call(fnMemFree, uintptr(ptr))
		}
		delete(p.free, class)
	}
	p.cached = 0
}

// freeAll frees every block, live or cached.
func (p *pool) freeAll(d *Device) {
	p.trim(d)
	for ptr := range p.live {
		d.drv.call(fnMemFree, uintptr(ptr))
	}
	p.live = nil
	p.inUse = [numKinds]int64{}
}

// Alloc reserves n bytes of device memory of the given kind from the
// device's pool.
func (d *Device) Alloc(n int64, kind MemKind) (Buffer, error) {
	var b Buffer
	err := d.Do(func() (err error) {
		b, err = d.MemAlloc(n, kind)
		return err
	})
	return b, err
}

// Free returns b to the device's pool.
func (d *Device) Free(b Buffer) {
	d.Do(func() error {
		d.MemFree(b)
		return nil
	})
}

// MemAlloc is Alloc on the device thread (device thread).
func (d *Device) MemAlloc(n int64, kind MemKind) (Buffer, error) { return d.pool.alloc(d, n, kind) }

// MemFree is Free on the device thread: b's block goes back to the pool
// for reuse; a buffer the pool did not hand out (a Slice, the zero Buffer)
// is ignored (device thread).
func (d *Device) MemFree(b Buffer) { d.pool.release(b) }

// MemStats reports the device memory the pool holds, by kind.
func (d *Device) MemStats() MemStats {
	var s MemStats
	d.Do(func() error {
		s = MemStats{Weights: d.pool.inUse[MemWeights], KV: d.pool.inUse[MemKV],
			Scratch: d.pool.inUse[MemScratch], Cached: d.pool.cached}
		return nil
	})
	return s
}

// HtoD copies len(src) bytes to dst at byte offset off. It waits for the
// stream first, so no queued kernel still reads dst (device thread).
func (d *Device) HtoD(dst Buffer, off int64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if off < 0 || off+int64(len(src)) > dst.size {
		return fmt.Errorf("cuda: copy of %d bytes at offset %d into a %d-byte buffer", len(src), off, dst.size)
	}
	if err := d.settle(); err != nil {
		return err
	}
	return d.drv.check(d.drv.call(fnMemcpyHtoD, uintptr(dst.ptr)+uintptr(off), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))), "cuMemcpyHtoD_v2")
}

// DtoH copies len(dst) bytes from src at offset off, after the stream's
// queued work is done (device thread).
func (d *Device) DtoH(dst []byte, src Buffer, off int64) error {
	if len(dst) == 0 {
		return nil
	}
	if off < 0 || off+int64(len(dst)) > src.size {
		return fmt.Errorf("cuda: copy of %d bytes at offset %d out of a %d-byte buffer", len(dst), off, src.size)
	}
	if err := d.settle(); err != nil {
		return err
	}
	return d.drv.check(d.drv.call(fnMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src.ptr)+uintptr(off), uintptr(len(dst))), "cuMemcpyDtoH_v2")
}

// CopyToDevice copies src into dst from its start.
func (d *Device) CopyToDevice(dst Buffer, src []byte) error {
	return d.Do(func() error { return d.HtoD(dst, 0, src) })
}

// CopyFromDevice copies len(dst) bytes from the start of src.
func (d *Device) CopyFromDevice(dst []byte, src Buffer) error {
	return d.Do(func() error { return d.DtoH(dst, src, 0) })
}

// UploadNew allocates a buffer of kind for src (padded with zeros to pad
// bytes when pad > len(src), for kernels that read whole blocks) and
// copies src into it (device thread).
func (d *Device) UploadNew(src []byte, pad int64, kind MemKind) (Buffer, error) {
	n := max(int64(len(src)), pad)
	b, err := d.pool.alloc(d, n, kind)
	if err != nil {
		return Buffer{}, err
	}
	if n > int64(len(src)) {
		if err := d.Memset(b, 0); err != nil {
			d.pool.release(b)
			return Buffer{}, err
		}
	}
	if err := d.HtoD(b, 0, src); err != nil {
		d.pool.release(b)
		return Buffer{}, err
	}
	return b, nil
}

// Memset queues filling b with byte v on the stream (device thread).
func (d *Device) Memset(b Buffer, v byte) error {
	d.queued = true
	return d.drv.check(d.drv.call(fnMemsetD8Async, uintptr(b.ptr), uintptr(v), uintptr(b.size), d.stream), "cuMemsetD8Async")
}

// settle waits for the stream's queued work, if any was queued since it
// was last synchronized (device thread).
func (d *Device) settle() error {
	if !d.queued {
		return nil
	}
	return d.StreamSync()
}

// CopyDtoD queues a device-to-device copy of n bytes from src to dst
// (device thread).
func (d *Device) CopyDtoD(dst, src Buffer, n int64) error {
	d.queued = true
	return d.drv.check(d.drv.call(fnMemcpyDtoDAsync, uintptr(dst.ptr), uintptr(src.ptr), uintptr(n), d.stream), "cuMemcpyDtoDAsync_v2")
}
