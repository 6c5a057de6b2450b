package gpu

import "strconv"

// attnPrefillQueries is the queries a block of attn_prefill takes (QT in
// kernels/attn_prefill.cu).
const attnPrefillQueries = 64

// hasAttnPrefill says whether attn_prefill is built for head size hd.
func hasAttnPrefill(hd int) bool { return hd == 64 || hd == 128 || hd == 256 }

// attnPrefill queues causal attention for n queries at once (a prompt),
// flash style, over the layer's cache c, which already holds the step's
// keys and values; window > 0 limits each query to its last window
// positions, softcap > 0 caps the scores (device thread).
func (d *Device) attnPrefill(q Buffer, c kvRows, out Buffer, n, heads, kvHeads, hd, maxSeq int, pos Buffer, scale, softcap float32, window int) error {
	args := append(append([]uint64{argBuf(q)}, c.args()...), argBuf(out), argInt(n),
		argInt(heads), argInt(kvHeads), argInt(maxSeq), argBuf(pos), argF32(scale), argF32(softcap), argInt(window))
	return d.launch(c.kernel("attn_prefill_"+strconv.Itoa(hd)), grid2(heads, (n+attnPrefillQueries-1)/attnPrefillQueries),
		grid1(4*attnPrefillQueries), 0, args...)
}
