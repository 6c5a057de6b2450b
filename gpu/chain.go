package gpu

import (
	"unsafe"

	"lowbit/model"
)

// Greedy decode steps chained on the device (model.GreedyChainer).
//
// Between two greedy tokens the host used to wait for the step, copy the
// id back, and copy it in again as the next step's token: the GPU idled
// for that round trip (55-75 us of a ~730 us TinyLlama token). Chained,
// the argmax kernel writes the id as the next step's token and advances
// the position itself, the next step's graph is queued at once, and the
// host reads the id from pinned memory behind an event while that step
// already runs. The next call finds its step queued (Chained) when it
// continues with that id; any other call discards it: it only wrote the
// cache one position past the sequence, which the next real step there
// overwrites, and the logits, which a greedy caller does not read.

// chainedStep is the step ChainGreedy queued: key's, on token tok at pos.
type chainedStep struct {
	key      any
	tok, pos int
}

// ChainGreedy implements model.GreedyChainer: the argmax of src[0..n),
// the logits of key's decode step just queued; when key's step is a
// captured graph, the same step is queued once more on that id at the
// next position before the id comes back.
func (b *Backend) ChainGreedy(key any, src model.Buf, n int) (int, error) {
	s := b.steps[key]
	if s == nil || s.g == nil || b.n != 1 || b.noChain {
		return b.Argmax(src, n)
	}
	if b.err != nil {
		return 0, b.err
	}
	var id int32
	err := b.run(func() error {
		if err := b.d.argmaxChain(src.(gpuBuf).b, n, b.idx, b.tok, b.pos); err != nil {
			return err
		}
		if err := b.d.idToHost(b.idx); err != nil {
			return err
		}
		if err := b.d.launchGraph(s.g); err != nil {
			return err
		}
		var err error
		id, err = b.d.idFromHost()
		return err
	})
	if err != nil {
		return 0, err
	}
	b.first++
	b.chain = &chainedStep{key: key, tok: int(id), pos: b.first}
	return int(id), nil
}

// Chained implements model.GreedyChainer: whether key's step on tokens at
// pos is the one ChainGreedy queued (then it is running already, and its
// logits come with the next ChainGreedy or Argmax). Any answer ends the
// chain.
func (b *Backend) Chained(key any, tokens []int, pos int) bool {
	c := b.chain
	b.chain = nil
	return c != nil && c.key == key && len(tokens) == 1 && tokens[0] == c.tok && pos == c.pos && b.err == nil
}

// idToHost queues the copy of an int32 id into pinned host memory and
// marks it with an event (device thread).
func (d *Device) idToHost(src Buffer) error {
	c := d.drv
	if d.idHost == nil {
		var p *int32 // pinned memory outside Go's heap
		if err := c.check(c.call(fnMemAllocHost, uintptr(unsafe.Pointer(&p)), 4), "cuMemAllocHost_v2"); err != nil {
			return err
		}
		d.idHost = p
	}
	if d.idEv == 0 {
		// CU_EVENT_DISABLE_TIMING: a marker.
		if err := c.check(c.call(fnEventCreate, uintptr(unsafe.Pointer(&d.idEv)), 2), "cuEventCreate"); err != nil {
			return err
		}
	}
	d.queued = true
	r := c.call(fnMemcpyDtoHAsync, uintptr(unsafe.Pointer(d.idHost)), uintptr(src.ptr), 4, d.stream)
	if err := c.check(r, "cuMemcpyDtoHAsync_v2"); err != nil {
		return err
	}
	return c.check(c.call(fnEventRecord, d.idEv, d.stream), "cuEventRecord")
}

// idFromHost waits for the id idToHost queued and returns it; work queued
// after it may still run (device thread).
func (d *Device) idFromHost() (int32, error) {
	if err := d.drv.check(d.drv.call(fnEventSynchronize, d.idEv), "cuEventSynchronize"); err != nil {
		return 0, err
	}
	return *d.idHost, nil
}
