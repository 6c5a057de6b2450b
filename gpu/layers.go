package gpu

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"lowbit/quantize"
)

// The layers of a captured decode step as one persistent kernel
// (kernels/layers.cu).
//
// While a decode step is captured as a CUDA graph, its shared-memory
// products and decode attention are not launched one by one: each is
// queued as an instruction, and the run of them between two other
// operations (the embedding before the first layer, the head after the
// last) becomes one launch of layers_<format>, whose blocks run every
// instruction in turn with a grid-wide barrier between them. The kernel
// boundaries a step would have (five a layer) become barriers, which cost
// a fraction of a launch's ramp and drain. The instructions run the same
// device code as the kernels they replace, so the results are the same
// bit for bit (TestLayersEqualKernels). Where an operation cannot join (a
// format or attention layout the kernel is not built for), the queue is
// launched before it and it runs as its own kernel.

// layersEnv set to "off" keeps every operation of a captured step its own
// kernel (to compare).
const layersEnv = "LOWBIT_LAYERS"

// layersThreads is the layers kernel's block size (16 warps).
const layersThreads = 512

// instr is one instruction of the layers kernel (Instr in
// kernels/layers.cu): 38 slots of 8 bytes; floats in the low half.
type instr struct {
	kind, hd                                             int64
	w, scales, mins, x, y, x2, nw                        uint64
	rows, nb, rowBytes, gb, ng, act, cols, accum, qx     int64
	tscale, eps, wAdd                                    uint64
	q, kcur, vcur, kc, vc, out, part, count, pos, ropeCS uint64
	scale                                                uint64
	heads, kvHeads, window, chunkMax, nblk, slices       int64
}

func f8(v float32) uint64 { return uint64(math.Float32bits(v)) }

func i8(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// layerOp is a queued operation: its instruction, and the launch of its
// own kernel for when it runs alone.
type layerOp struct {
	in     instr
	launch func() error
}

// layerQueue is the run of operations not yet launched: one weight format
// (attention takes any), and the dynamic shared memory the largest needs.
type layerQueue struct {
	format quantize.Format
	ops    []layerOp
	shared int
}

// layersFormat says whether the layers kernel is built for products of f.
func layersFormat(f quantize.Format) bool {
	switch f {
	case quantize.Q8, quantize.Q4, quantize.Q2, quantize.TQ2:
		return true
	}
	return false
}

// batchLayers makes the operations queued next (while a decode step is
// captured) join layers kernels, until endLayers; called before the
// capture begins (device thread).
func (d *Device) batchLayers() error {
	if os.Getenv(layersEnv) == "off" {
		return nil
	}
	if err := checkInstrLayout(); err != nil {
		return err
	}
	if d.bar.ptr == 0 {
		bar, err := d.pool.alloc(d, 8, MemScratch)
		if err != nil {
			return err
		}
		if err := d.memset(bar, 0); err != nil {
			d.pool.release(bar)
			return err
		}
		d.bar = bar
	}
	d.layers = &layerQueue{}
	return nil
}

// endLayers launches what is queued and stops queuing; it returns the
// programs made since batchLayers, which the caller frees (freePrograms)
// once the graph that reads them is gone (device thread).
func (d *Device) endLayers() ([]Buffer, error) {
	err := d.flushLayers()
	progs := d.progs
	d.layers, d.progs = nil, nil
	return progs, err
}

// freePrograms returns programs' device memory (device thread).
func (d *Device) freePrograms(progs []Buffer) {
	for _, p := range progs {
		d.pool.release(p)
	}
}

// queueLayer queues an operation when a step's layers are being batched
// and the kernel takes it (format f, "" for attention); ok is false when
// the caller should launch it itself (device thread).
func (d *Device) queueLayer(f quantize.Format, in instr, shared int, launch func() error) (ok bool, err error) {
	q := d.layers
	if q == nil {
		return false, nil
	}
	if f != "" && q.format != "" && f != q.format {
		if err := d.flushLayers(); err != nil {
			return true, err
		}
	}
	if f != "" {
		q.format = f
	}
	q.ops = append(q.ops, layerOp{in: in, launch: launch})
	q.shared = max(q.shared, shared)
	return true, nil
}

// flushLayers launches the queued operations: two or more as one layers
// kernel, one as its own kernel (device thread). Every other operation on
// the stream calls it first, so the order of the step is kept.
func (d *Device) flushLayers() error {
	q := d.layers
	if q == nil || len(q.ops) == 0 {
		return nil
	}
	ops, format, shared := q.ops, q.format, q.shared
	q.ops, q.format, q.shared = nil, "", 0
	if len(ops) == 1 {
		return ops[0].launch()
	}
	if format == "" {
		format = quantize.Q4 // attention alone: every layers kernel has it
	}
	name := "layers_" + string(format)
	if err := d.allowShared(name, shared); err != nil {
		return err
	}
	per, err := d.blocksPerSM(name, layersThreads, shared)
	if err != nil {
		return err
	}
	ins := make([]instr, len(ops))
	for i, o := range ops {
		ins[i] = o.in
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&ins[0])), len(ins)*int(unsafe.Sizeof(instr{})))
	prog, err := d.pool.alloc(d, int64(len(raw)), MemScratch)
	if err != nil {
		return err
	}
	// A plain copy, not on the stream being captured: the program is
	// constant for the graph's life.
	r := d.drv.call(fnMemcpyHtoD, uintptr(prog.ptr), uintptr(unsafe.Pointer(&raw[0])), uintptr(len(raw)))
	if err := d.drv.check(r, "cuMemcpyHtoD_v2 (layers program)"); err != nil {
		d.pool.release(prog)
		return err
	}
	d.progs = append(d.progs, prog)
	return d.launchPDL(name, grid1(per*d.sms), grid1(layersThreads), shared,
		argBuf(prog), argInt(len(ins)), argBuf(d.bar))
}

// productInstr is the instruction of m's shared-memory product with o.
func productInstr(m *Matrix, x, y Buffer, o matvecOpts) instr {
	return instr{kind: 0, w: m.data.ptr, scales: m.scalesArg(), mins: m.mins.ptr, x: x.ptr, y: y.ptr,
		x2: o.x2.ptr, nw: o.norm.ptr, rows: int64(m.Rows), nb: int64(m.blocks()), rowBytes: int64(m.rowBytes),
		gb: int64(m.groupBlocks()), ng: int64(m.groups()), act: int64(o.act), cols: int64(m.Cols),
		accum: i8(o.accum), qx: i8(o.int8), tscale: f8(m.scale), eps: f8(o.eps), wAdd: f8(o.wAdd)}
}

// attnInstr is the instruction of a's attention, or false where the
// layers kernel does not take its layout (one query head a block, head
// size 64 or 128).
func (a *attnDecode) instr(q, kcur, vcur, kc, vc, out Buffer, heads, kvHeads int, pos Buffer, scale float32, ropeCS Buffer, window int) (instr, bool) {
	if a.g2 != 1 || (a.hd != 64 && a.hd != 128) {
		return instr{}, false
	}
	return instr{kind: 1, hd: int64(a.hd), q: q.ptr, kcur: kcur.ptr, vcur: vcur.ptr, kc: kc.ptr, vc: vc.ptr,
		out: out.ptr, part: a.part.ptr, count: a.count.ptr, pos: pos.ptr, ropeCS: ropeCS.ptr, scale: f8(scale),
		heads: int64(heads), kvHeads: int64(kvHeads), window: int64(window), chunkMax: int64(a.chunk),
		nblk: int64(kvHeads * a.split), slices: int64(a.slices)}, true
}

// checkInstrLayout fails when instr's size is not the kernel's.
func checkInstrLayout() error {
	if n := unsafe.Sizeof(instr{}); n != 38*8 {
		return fmt.Errorf("gpu: layers instruction is %d bytes, the kernel's is %d", n, 38*8)
	}
	return nil
}
