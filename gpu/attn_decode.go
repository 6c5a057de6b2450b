package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"math"

	"lowbit/model"
)

// attnSliceLen is the positions a block of decode attention takes at most
// before the sequence is split over more blocks (attnDecodeSlices).
const attnSliceLen = 256

// attnDecode is the split geometry of attn_decode for one cache and head
// layout: S slices, and its scratch (partials and the per-kv-head
// counters, a set for each of the cache's slots, as a batch of decode
// tokens runs in one launch), allocated once so captured graphs keep valid
// pointers.
type attnDecode struct {
	name        string
	threads     int // a block's: NW warps in kernels/attn_decode.cu, its launch bounds
	split       int // blocks a kv head's query heads are spread over
	slices      int
	sliceLen    int // positions a slice takes at most
	shared      int // bytes: each warp's weighted value sums
	part, count Buffer
}

// attnSplitBlocks is the most blocks attnDecodeSplit spreads a layer's
// kv heads' query heads over.
const attnSplitBlocks = 32

// Past attnLongFrom positions a token attends with a plan of its own
// (graphs of their own): where the kv heads share their keys among
// several query heads, few blocks take a kv head's heads together, over
// slices of attnLongSlice positions, so each key is read once for them,
// and the slices give the blocks; at short contexts spreading the heads
// over blocks keeps the GPU busier.
const (
	attnLongFrom   = 1024
	attnLongBlocks = 8
	attnLongSlice  = 128
)

// longAt says a token at position pos attends with the long plan.
func longAt(pos int) bool { return pos >= attnLongFrom }

// attnDecodeSplit is how many blocks the g query heads of a kv head are
// spread over: the largest divisor of g that keeps kvHeads*split within
// blocks (few kv heads, large groups: TinyLlama's 4 x 8 become 32 blocks).
func attnDecodeSplit(g, kvHeads, blocks int) int {
	split := 1
	for d := 2; d <= g; d++ {
		if g%d == 0 && kvHeads*d <= blocks {
			split = d
		}
	}
	return split
}

// attnDecodeSlices is how many slices a context of visible positions is
// split into: one per sliceLen positions, at most 32 (the kernel uses as
// many as the positions seen so far need). Up to sliceLen positions one
// block per kv head does the whole sequence without a combining pass (a
// block's 16 warps take 64 positions a round, each warp with a softmax
// of its own).
func attnDecodeSlices(visible, sliceLen int) int {
	return min(max((visible+sliceLen-1)/sliceLen, 1), 32)
}

// newAttnDecode plans attn_decode for heads/kvHeads heads of hd over a
// cache of positions stored as typ (window: the visible positions, 0 for
// all), or reports why the kernel does not take this layout (device
// thread).
func (d *Device) newAttnDecode(heads, kvHeads, hd, positions, window, slots int, typ model.KVType, long bool) (*attnDecode, error) {
	if kvHeads <= 0 || heads%kvHeads != 0 {
		return nil, fmt.Errorf("gpu: attention: %d heads are not a multiple of %d kv heads", heads, kvHeads)
	}
	if d.exp.noAttnDecode {
		return nil, errors.New("gpu: attention: attn_decode disabled by LOWBIT_ATTN_DECODE=off")
	}
	blocks, sliceLen := attnSplitBlocks, attnSliceLen
	if long && heads/kvHeads > 1 {
		blocks, sliceLen = attnLongBlocks, attnLongSlice
	}
	split := attnDecodeSplit(heads/kvHeads, kvHeads, cmp.Or(d.exp.attnBlocks, blocks))
	g := heads / kvHeads / split // query heads a block
	g2 := 1
	for g2 < g {
		g2 <<= 1
	}
	if (hd != 64 && hd != 128 && hd != 256) || hd*g2 > 2048 || g2 > 16 {
		return nil, fmt.Errorf("gpu: attention: no decode kernel for head size %d with %d query heads a kv head", hd, g)
	}
	visible := positions
	if window > 0 {
		visible = min(window, positions)
	}
	sliceLen = cmp.Or(d.exp.attnSlice, sliceLen)
	a := &attnDecode{name: fmt.Sprintf("attn_decode_%d_%d", hd, g2), split: split, sliceLen: sliceLen,
		slices: attnDecodeSlices(visible, sliceLen)}
	// Where a lane holds four of a head's dimensions (32/g2 lanes a head)
	// and the grid fits in one wave, the kernel whose warps take five
	// positions at once (kernels/attn_decode.cu says why).
	if hd*g2/32 == 4 && kvHeads*split*a.slices <= d.sms {
		a.name += "_un5"
	}
	a.name = kvRows{typ: typ}.kernel(a.name)
	var err error
	if a.threads, err = d.maxThreads(a.name); err != nil {
		return nil, err
	}
	a.shared = 4 * a.threads / 32 * g * hd
	if a.shared > d.maxShared {
		return nil, fmt.Errorf("gpu: attention: %d bytes of shared memory needed, the device has %d", a.shared, d.maxShared)
	}
	if err := d.allowShared(a.name, a.shared); err != nil {
		return nil, err
	}
	slots = max(slots, 1)
	if a.part, err = d.alloc(int64(4*heads*a.slices*(hd+2)*slots), MemScratch); err != nil {
		return nil, err
	}
	if a.count, err = d.alloc(int64(4*kvHeads*split*slots), MemScratch); err != nil {
		d.free(a.part)
		return nil, err
	}
	if err := d.memset(a.count, 0); err != nil {
		return nil, err
	}
	return a, nil
}

// launch queues attention of the step's token (position pos[0]) over the
// layer's caches, storing the step's k and v into them; ropeCS, when set
// (a ropeTable), rotates q and k first (device thread).
func (a *attnDecode) launch(d *Device, q, kcur, vcur Buffer, c kvRows, out Buffer, heads, kvHeads int, pos Buffer, scale, softcap float32, ropeCS Buffer, window int) error {
	return a.launchBatch(d, q, kcur, vcur, c, out, heads, kvHeads, pos, scale, softcap, ropeCS, window, 1, Buffer{}, 0)
}

// launchBatch is launch for z sequences' decode tokens at once: their
// rows of q, kcur, vcur and out consecutive, positions pos[0..z), cache
// slots slots[0..z), a slot's caches stride bytes past the previous
// one's (c: slot 0's) (device thread).
func (a *attnDecode) launchBatch(d *Device, q, kcur, vcur Buffer, c kvRows, out Buffer, heads, kvHeads int, pos Buffer, scale, softcap float32, ropeCS Buffer, window, z int, slots Buffer, stride int64) error {
	args := append(append([]uint64{argBuf(q), argBuf(kcur), argBuf(vcur)}, c.args()...), argBuf(out), argBuf(a.part), argBuf(a.count),
		argInt(heads), argInt(kvHeads), argBuf(pos), argF32(scale), argF32(softcap), argBuf(ropeCS), argInt(window), argInt(a.sliceLen),
		argBuf(slots), uint64(stride))
	return d.launchPDL(a.name, grid3(kvHeads*a.split, a.slices, z), grid1(a.threads), a.shared, args...)
}

// ropeTable is cos and sin of every position's rotary angles, [positions]
// [pairs] pairs, from a rotation (model.Attn.Rope: the pairs' inverse
// frequencies, then their factors), computed as the CPU backend computes
// them (the float32 angle p*f, its cosine and sine in float64, times the
// factor in float32), so the decode attention reads its rotation instead
// of evaluating it.
func ropeTable(rope []float32, positions int) []float32 {
	half := len(rope) / 2
	freq, factor := rope[:half], rope[half:]
	t := make([]float32, 0, 2*positions*half)
	for p := 0; p < positions; p++ {
		for j, f := range freq {
			a := float64(float32(p) * f)
			t = append(t, float32(math.Cos(a))*factor[j], float32(math.Sin(a))*factor[j])
		}
	}
	return t
}
