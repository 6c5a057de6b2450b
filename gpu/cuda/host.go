package cuda

import "unsafe"

// HostMem is pinned host memory mapped into the device's address space: a
// kernel writes it through Dev and the host reads it at Host, with no copy
// on the stream, once an event says the writes are done.
type HostMem struct {
	host unsafe.Pointer
	dev  Buffer
}

// Host is the memory's host address (outside Go's heap); nil for the zero
// HostMem.
func (h HostMem) Host() unsafe.Pointer { return h.host }

// Dev is the memory's device address, for kernel arguments.
func (h HostMem) Dev() Buffer { return h.dev }

// AllocHostMapped allocates n bytes of pinned host memory and maps it for
// the device (device thread).
func (d *Device) AllocHostMapped(n int64) (HostMem, error) {
	c := d.drv
	var p unsafe.Pointer
	if err := c.check(c.call(fnMemAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(n)), "cuMemAllocHost_v2"); err != nil {
		return HostMem{}, err
	}
	var dp uint64
	if err := c.check(c.call(fnMemHostGetDevicePointer, uintptr(unsafe.Pointer(&dp)), uintptr(p), 0), "cuMemHostGetDevicePointer_v2"); err != nil {
		c.call(fnMemFreeHost, uintptr(p))
		return HostMem{}, err
	}
	return HostMem{host: p, dev: Buffer{ptr: dp, size: n}}, nil
}

// FreeHostMapped frees memory of AllocHostMapped; the zero HostMem is
// ignored (device thread).
func (d *Device) FreeHostMapped(h HostMem) {
	if h.host != nil {
		d.drv.call(fnMemFreeHost, uintptr(h.host))
	}
}

// Event marks a point in the stream's work: the host can wait for the work
// queued before it without waiting for what was queued after.
type Event struct {
	d  *Device
	ev uintptr
}

// Event creation flags (CUevent_flags): events that time (TimeIt) and
// events that only mark (NewEvent), which cost less.
const (
	eventDefault       = 0
	eventDisableTiming = 2
)

// newEvent creates an event with the given flags (device thread).
func (d *Device) newEvent(flags uintptr) (*Event, error) {
	e := &Event{d: d}
	if err := d.drv.check(d.drv.call(fnEventCreate, uintptr(unsafe.Pointer(&e.ev)), flags), "cuEventCreate"); err != nil {
		return nil, err
	}
	return e, nil
}

// NewEvent creates an event that marks, without timing (device thread).
func (d *Device) NewEvent() (*Event, error) { return d.newEvent(eventDisableTiming) }

// Record queues the event on the stream, behind the work queued so far
// (device thread).
func (e *Event) Record() error {
	e.d.queued = true
	return e.d.drv.check(e.d.drv.call(fnEventRecord, e.ev, e.d.stream), "cuEventRecord")
}

// Synchronize waits until the work queued before the last Record is done;
// work queued after it may still run (device thread).
func (e *Event) Synchronize() error {
	return e.d.drv.check(e.d.drv.call(fnEventSynchronize, e.ev), "cuEventSynchronize")
}

// Destroy frees the event (device thread).
func (e *Event) Destroy() { e.d.drv.call(fnEventDestroy, e.ev) }
