package gpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"lowbit/model"
)

// topKPool is how many candidates the topk kernel can sort (NT*LT in
// kernels/sample.cu).
const topKPool = 4096

// topK queues the k largest of x[0..n) (value, then index order) and the
// softmax denominator at temp into out: k float32 values, k int32
// indices, an int32 exactness flag and 4 bytes of padding, a float64 sum
// (computed only with sum: a pass of double exponentials over x) (device
// thread).
func (d *Device) topK(x Buffer, n, k int, temp float32, out Buffer, sum bool) error {
	if k <= 0 || k > topKPool || k > n {
		return fmt.Errorf("gpu: top-k: k %d of %d values (at most %d)", k, n, topKPool)
	}
	if !(temp > 0) {
		return fmt.Errorf("gpu: top-k: temperature %v must be positive", temp)
	}
	return d.launchPDL("topk", grid1(1), grid1(1024), 8*topKPool, argBuf(x), argInt(n), argInt(k), argF32(temp),
		argBuf(out), out.Ptr()+uint64(4*k), out.Ptr()+uint64(8*k), out.Ptr()+uint64(8*k+8), argBool(sum))
}

// topKOf is the k most likely tokens of src[0..n) and the softmax
// denominator, found on the device; one copy of 8k+16 bytes comes back.
func (b *Backend) topKOf(src Buffer, n, k int, temp float32) (*model.Candidates, error) {
	if b.err != nil {
		return nil, b.err
	}
	k = min(k, n, topKPool)
	raw := make([]byte, 8*k+16)
	err := b.run(func() error {
		if b.topk.Size() < int64(len(raw)) {
			if b.topk.Size() > 0 {
				b.d.free(b.topk)
			}
			var err error
			if b.topk, err = b.d.alloc(int64(len(raw)), MemScratch); err != nil {
				b.topk = Buffer{}
				return err
			}
		}
		if err := b.d.topK(src, n, k, temp, b.topk, true); err != nil {
			return err
		}
		return b.d.dtoh(raw, b.topk, 0)
	})
	if err != nil {
		return nil, err
	}
	c := &model.Candidates{IDs: make([]int, k), Logits: make([]float32, k)}
	le := binary.LittleEndian
	c.Exact = le.Uint32(raw[8*k:]) == 1
	for i := 0; i < k; i++ {
		c.Logits[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		c.IDs[i] = int(int32(le.Uint32(raw[4*(k+i):])))
		if c.IDs[i] < 0 || c.IDs[i] >= n {
			c.Exact = false // fewer than k logits that are not NaN
		}
	}
	c.SumExp = math.Float64frombits(le.Uint64(raw[8*k+8:]))
	return c, nil
}
