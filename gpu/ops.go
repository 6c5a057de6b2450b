package gpu

import (
	"fmt"

	"lowbit/model"
	"lowbit/quantize"
)

// GLU selects the activation of a gated feed-forward layer.
type GLU int

// The gated activations: SiLU (Llama, Mistral), tanh GELU (Gemma) and
// squared ReLU (BitNet).
const (
	SwiGLU GLU = iota
	GeGLU
	ReLU2GLU
)

// blocks256 is the grid of a one-thread-per-element kernel of 256 threads.
func blocks256(n int) dim3 { return grid1((n + 255) / 256) }

// normThreads is the block size of the norm kernels for rows of n: two
// float4s a thread (each thread loads all of its row's share at once),
// 32 to 1024 threads.
func normThreads(n int) int {
	return min(max((n+255)/256*32, 32), 1024)
}

// rmsnorm queues y = x / rms(x) * (w + wAdd) for rows rows of n (device thread).
func (d *Device) rmsnorm(x, w, y Buffer, rows, n int, eps, wAdd float32) error {
	return d.launchPDL("rmsnorm", grid1(rows), grid1(normThreads(n)), 0, argBuf(x), argBuf(w), argBuf(y), argInt(n), argF32(eps), argF32(wAdd))
}

// addRMSNorm queues x += r, then y = x / rms(x) * (w + wAdd), for rows rows
// of n (device thread).
func (d *Device) addRMSNorm(x, r, w, y Buffer, rows, n int, eps, wAdd float32) error {
	return d.launchPDL("add_rmsnorm", grid1(rows), grid1(normThreads(n)), 0, argBuf(x), argBuf(r), argBuf(w), argBuf(y), argInt(n), argF32(eps), argF32(wAdd))
}

// rope queues the rotation of n tokens' heads vectors of hd, token i by
// the position in pos[i].
func (d *Device) rope(v Buffer, n, heads, hd int, pos, invFreq Buffer) error {
	if hd%2 != 0 || hd > 2048 {
		return fmt.Errorf("gpu: rope: head size %d is odd or over 2048", hd)
	}
	return d.launch("rope", grid2(heads, n), grid1(hd/2), 0, argBuf(v), argInt(hd), argBuf(pos), argBuf(invFreq))
}

// kvRows is one layer's (and slot's) cache: keys and values [positions,
// kvDim] stored as typ, and a q8 cache's scales [positions, kv heads].
type kvRows struct {
	k, v, ks, vs Buffer
	typ          model.KVType
}

// kernel is the name of the kernel family base for the cache's type
// (kernels/kv.cuh): attention, attention_f16, attention_q8.
func (c kvRows) kernel(base string) string {
	switch c.typ {
	case model.KVF16:
		return base + "_f16"
	case model.KVQ8:
		return base + "_q8"
	}
	return base
}

// args are the kernels' cache arguments: keys, values and their scales.
func (c kvRows) args() []uint64 {
	return []uint64{argBuf(c.k), argBuf(c.v), argBuf(c.ks), argBuf(c.vs)}
}

// kvStore queues the store of n tokens' k and v into rows pos[i] of the
// caches, rounded as their type keeps them.
func (d *Device) kvStore(k, v Buffer, c kvRows, n, kvHeads, hd int, pos Buffer) error {
	args := append([]uint64{argBuf(k), argBuf(v)}, c.args()...)
	args = append(args, argInt(kvHeads), argInt(hd), argBuf(pos))
	return d.launch(c.kernel("kv_store"), grid2(kvHeads, n), grid1((hd+31)/32*32), 0, args...)
}

// attention queues softmax(q k^T * scale) v over cache rows 0..pos[i] for
// every query head of each of n tokens; maxSeq bounds pos and sizes the
// scores' shared memory. For one token, kcur and vcur (the step's k and v)
// may be given: the kernel stores them in the caches itself (no kv_store);
// zero Buffers mean kv_store ran before.
func (d *Device) attention(q Buffer, c kvRows, out Buffer, n, heads, kvHeads, hd, maxSeq int, pos Buffer, scale, softcap float32, window int, kcur, vcur Buffer) error {
	if n != 1 && kcur.Ptr() != 0 {
		return fmt.Errorf("gpu: attention: the kv store folds in for one token only, not %d", n)
	}
	if kvHeads <= 0 || heads%kvHeads != 0 {
		return fmt.Errorf("gpu: attention: %d heads are not a multiple of %d kv heads", heads, kvHeads)
	}
	shared := 4 * maxSeq
	const static = 4*1024 + 4*33 // the kernel's own shared arrays
	if shared+static > d.maxShared {
		return fmt.Errorf("gpu: attention: context of %d positions needs %d bytes of shared memory, the device has %d", maxSeq, shared, d.maxShared)
	}
	name := c.kernel("attention")
	if err := d.allowShared(name, shared); err != nil {
		return err
	}
	// The kernel takes any block of up to 1024 threads. Decode (one token)
	// has only heads blocks, so each takes 1024 threads to keep the GPU
	// busy; prefill (heads x n blocks) has blocks enough, and 256 threads
	// a block serve it better there.
	threads := 256
	if n == 1 {
		threads = 1024
	}
	args := append(append([]uint64{argBuf(q)}, c.args()...), argBuf(out),
		argInt(heads), argInt(kvHeads), argInt(hd), argBuf(pos), argF32(scale), argF32(softcap), argInt(window), argBuf(kcur), argBuf(vcur))
	return d.launch(name, grid2(heads, n), grid1(threads), shared, args...)
}

// glu queues out = act(g) * u.
func (d *Device) glu(g, u, out Buffer, n int, act GLU) error {
	return d.launch("glu", blocks256(n), grid1(256), 0, argBuf(g), argBuf(u), argBuf(out), argInt(n), argInt(int(act)))
}

// add queues x += y.
func (d *Device) add(x, y Buffer, n int) error {
	return d.launch("add", blocks256(n), grid1(256), 0, argBuf(x), argBuf(y), argInt(n))
}

// softCap queues x = limit * tanh(x / limit) over n values.
func (d *Device) softCap(x Buffer, n int, limit float32) error {
	return d.launch("softcap", blocks256(n), grid1(256), 0, argBuf(x), argInt(n), argF32(limit))
}

// addRows queues x[r, :] += b for each of the n/cols rows of x.
func (d *Device) addRows(x, b Buffer, n, cols int) error {
	return d.launch("add_rows", blocks256(n), grid1(256), 0, argBuf(x), argBuf(b), argInt(n), argInt(cols))
}

// embed queues the copy of embedding rows tok[0..n) of m (f32 or q8) into
// the rows of out, times scale.
func (d *Device) embed(m *Matrix, n int, tok, out Buffer, scale float32) error {
	switch m.Format {
	case quantize.F32:
		return d.launch("embed_f32", grid2((m.Cols+255)/256, n), grid1(256), 0, argBuf(m.data), argBuf(tok), argBuf(out), argInt(m.rowBytes/4), argInt(m.Cols), argF32(scale))
	case quantize.Q8:
		return d.launch("embed_q8", grid2((m.Cols+255)/256, n), grid1(256), 0, argBuf(m.data), argBuf(m.scales), argInt(m.rowBytes),
			argInt(m.GroupSize), argInt(m.groups()), argBuf(tok), argBuf(out), argInt(m.Cols), argF32(scale))
	}
	return fmt.Errorf("gpu: embedding in %s is not supported (f32 or q8)", m.Format)
}

// argmax queues out[0] = the index of the largest of x[0..n).
func (d *Device) argmax(x Buffer, n int, out Buffer) error {
	return d.argmaxChain(x, n, out, Buffer{}, Buffer{}, Buffer{})
}

// argmaxChain is argmax that, with tok set, also writes the index as the
// token of the next decode step and advances its position pos[0]; with
// host set (mapped host memory, Device.idDev), the index goes to its slot
// of the position's parity too (device thread).
func (d *Device) argmaxChain(x Buffer, n int, out, tok, pos, host Buffer) error {
	if err := d.argmaxScratch(); err != nil {
		return err
	}
	// two float4s a thread (256 threads a block, kernels/norm.cu)
	blocks := min(max((n/4+511)/512, 1), argmaxBlocks)
	count := d.argmaxPart.Slice(8*argmaxBlocks, 4)
	return d.launchPDL("argmax", grid1(blocks), grid1(256), 0, argBuf(x), argInt(n), argBuf(out), argBuf(tok), argBuf(pos), argBuf(host),
		argBuf(d.argmaxPart), argBuf(count))
}

// argmaxBlocks is the most blocks argmax spreads over.
const argmaxBlocks = 128

// argmaxScratch allocates, once, the argmax kernel's scratch: the blocks'
// bests (an int2 each), then the counter of finished blocks, zeroed here
// and by the kernel after each launch. Outside a graph capture: the
// chained step's capture makes sure of it first (device thread).
func (d *Device) argmaxScratch() error {
	if d.argmaxPart.Ptr() != 0 {
		return nil
	}
	b, err := d.alloc(8*argmaxBlocks+4, MemScratch)
	if err != nil {
		return err
	}
	if err := d.memset(b, 0); err != nil {
		d.free(b)
		return err
	}
	d.argmaxPart = b
	return nil
}
