package gpu

// experiments switch off, or retune, choices the backend makes by
// measurement, so that an A/B run on the GPU machine can compare them with
// what they replaced. The shipped binary reads none of them and runs with
// the zero value (experiments_off.go); a build with the lowbitexp tag (make
// devbin) reads them from LOWBIT_* environment variables
// (experiments_env.go). Some make the output wrong: they are for timing.
type experiments struct {
	// noAttnDecode keeps decode on the general attention kernel
	// (LOWBIT_ATTN_DECODE=off).
	noAttnDecode bool
	// attnSlice sets the positions a slice of decode attention takes
	// (LOWBIT_ATTN_SLICE; 0: attnSliceLen).
	attnSlice int
	// attnBlocks sets the most blocks a layer's kv heads spread their
	// query heads over in decode attention (LOWBIT_ATTN_BLOCKS; 0:
	// attnSplitBlocks).
	attnBlocks int
	// noPDL launches every kernel fully serialized (LOWBIT_PDL=off).
	noPDL bool
	// noGated keeps the gated MLP's activation out of the gate/up products
	// (LOWBIT_GATED=off).
	noGated bool
	// skip names decode kernels left out of a step (LOWBIT_SKIP, comma
	// separated: qkv, attn, o, gateup, down, head): the time a step loses
	// with one gone is what it costs in the pipeline. The outputs are wrong.
	skip map[string]bool
	// ptxDir names a directory whose PTX files replace the embedded ones
	// (LOWBIT_PTX_DIR: freshly built PTX on the GPU machine, before it is
	// committed).
	ptxDir string
}
