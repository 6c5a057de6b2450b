package gpu

import (
	"fmt"
	"slices"

	"lowbit/half"
	"lowbit/quantize"
)

// Matrix is a weight matrix resident on the device, in one of the formats
// of package quantize (float ones included). A block format's (GGUF's
// layouts, quantize.Spec.BlockScales) is its blocks alone, scales inside:
// no scales or mins buffers, GroupSize its block.
type Matrix struct {
	Format       quantize.Format
	Rows, Cols   int
	GroupSize    int
	rowBytes     int
	data         Buffer
	scales, mins Buffer
	scale        float32 // tq2's per-tensor scale
	// rowScale holds a float32 scale per row for a tq2 matrix joined from
	// parts whose scales differ (Backend.Fuse); the kernels take it in
	// place of the scales.
	rowScale        Buffer
	packed, scaleSz int64
}

// Bytes is what one pass over the matrix reads: packed codes plus scales
// and minimums (the weight bytes of the roofline).
func (m *Matrix) Bytes() int64 { return m.packed + m.scaleSz }

// blocks is the number of 32-weight blocks per row (a block format's
// 32-weight units: its rows are whole blocks of 32 or 256 weights).
func (m *Matrix) blocks() int { return (m.Cols + 31) / 32 }

// groupBlocks is the number of 32-weight blocks sharing a scale (1 for
// formats without groups, which ignore it).
func (m *Matrix) groupBlocks() int { return max(m.GroupSize/32, 1) }

// groups is the number of scale groups per row (0 for a super-block
// format, whose one table of scales every row reads).
func (m *Matrix) groups() int {
	if m.Format.SuperBlock() {
		return 0
	}
	if m.GroupSize <= 0 {
		return 1
	}
	return (m.Cols + m.GroupSize - 1) / m.GroupSize
}

// HasKernels says whether the GPU runs weights of format f: floats,
// lowbit's group formats, GGUF's block formats and lowbit's super-block
// formats (blockKernels).
func HasKernels(f quantize.Format) bool {
	switch f {
	case quantize.F32, quantize.F16, quantize.Q8, quantize.Q4, quantize.Q2, quantize.Q1, quantize.TQ2:
		return true
	}
	return blockKernels(f)
}

// blockKernels says whether f runs on the block formats' kernels, which
// decode a row 32-weight unit by unit from its blocks (unit_load and sval
// in the kernels): GGUF's block formats, scales inside their blocks, and
// lowbit's super-block formats, whose sub-block scales come from a table
// of 16 floats uploaded as the matrix's scales.
func blockKernels(f quantize.Format) bool {
	return f.Spec().BlockScales || f.SuperBlock()
}

// Upload copies a quantized tensor to the device: its packed codes, and
// its scales and minimums where it has them apart (a block format's are
// in its blocks, copied as they are).
func (d *Device) Upload(t *quantize.Tensor) (*Matrix, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("gpu: upload: %w", err)
	}
	if !HasKernels(t.Format) {
		return nil, fmt.Errorf("gpu: %s [%d, %d]: no CUDA kernels for %s weights yet (run the model with --device cpu)", t.Format, t.Rows, t.Cols, t.Format)
	}
	m := &Matrix{Format: t.Format, Rows: t.Rows, Cols: t.Cols, GroupSize: t.GroupSize,
		rowBytes: t.RowBytes(), scale: t.Scale}
	err := d.do(func() error { return d.uploadTensor(m, t) })
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (d *Device) uploadTensor(m *Matrix, t *quantize.Tensor) error {
	var err error
	if m.data, err = d.uploadNew(t.Data, 0, MemWeights); err != nil {
		return fmt.Errorf("gpu: %s [%d, %d] codes: %w", t.Format, t.Rows, t.Cols, err)
	}
	m.packed = int64(len(t.Data))
	if t.Format.SuperBlock() {
		tbl := quantize.SuperBlockScales(t.Scale)
		if m.scales, err = d.uploadNew(bytesOf(tbl[:]), 0, MemWeights); err != nil {
			d.freeMatrix(m)
			return fmt.Errorf("gpu: %s [%d, %d] scale table: %w", t.Format, t.Rows, t.Cols, err)
		}
		m.scaleSz += int64(4 * len(tbl))
	}
	if len(t.Scales) > 0 {
		if m.scales, err = d.uploadNew(bytesOf(t.Scales), 0, MemWeights); err != nil {
			d.freeMatrix(m)
			return fmt.Errorf("gpu: %s [%d, %d] scales: %w", t.Format, t.Rows, t.Cols, err)
		}
		m.scaleSz += int64(2 * len(t.Scales))
	}
	if len(t.Mins) > 0 {
		if m.mins, err = d.uploadNew(bytesOf(t.Mins), 0, MemWeights); err != nil {
			d.freeMatrix(m)
			return fmt.Errorf("gpu: %s [%d, %d] mins: %w", t.Format, t.Rows, t.Cols, err)
		}
		m.scaleSz += int64(2 * len(t.Mins))
	}
	return nil
}

// UploadFloat copies a float matrix [rows, cols] to the device as f32 or
// f16 (format F32 or F16). Rows are padded with zeros to whole 32-weight
// blocks so the kernels read them like the packed formats.
func (d *Device) UploadFloat(format quantize.Format, w []float32, rows, cols int) (*Matrix, error) {
	if rows <= 0 || cols <= 0 || len(w) != rows*cols {
		return nil, fmt.Errorf("gpu: upload: %d values do not make a [%d, %d] matrix", len(w), rows, cols)
	}
	pc := (cols + 31) / 32 * 32
	var buf []byte
	switch format {
	case quantize.F32:
		p := make([]float32, rows*pc)
		for r := 0; r < rows; r++ {
			copy(p[r*pc:], w[r*cols:(r+1)*cols])
		}
		buf = bytesOf(p)
	case quantize.F16:
		p := make([]half.Float16, rows*pc)
		for r := 0; r < rows; r++ {
			for c, v := range w[r*cols : (r+1)*cols] {
				p[r*pc+c] = half.FromFloat32(v)
			}
		}
		buf = bytesOf(p)
	default:
		return nil, fmt.Errorf("gpu: upload: %q is not f32 or f16", format)
	}
	m := &Matrix{Format: format, Rows: rows, Cols: cols, rowBytes: len(buf) / rows, packed: int64(len(buf))}
	err := d.do(func() (err error) {
		m.data, err = d.uploadNew(buf, 0, MemWeights)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: %s [%d, %d]: %w", format, rows, cols, err)
	}
	return m, nil
}

// FreeMatrix returns a matrix's memory to the pool.
func (d *Device) FreeMatrix(m *Matrix) {
	d.do(func() error { d.freeMatrix(m); return nil })
}

func (d *Device) freeMatrix(m *Matrix) {
	for _, b := range []Buffer{m.data, m.scales, m.mins, m.rowScale} {
		if b.Ptr() != 0 {
			d.free(b)
		}
	}
	m.data, m.scales, m.mins, m.rowScale = Buffer{}, Buffer{}, Buffer{}, Buffer{}
}

// scalesArg is the kernels' scales argument: the per-row scales of a
// joined tq2 matrix (none for a whole one, which has its tensor scale),
// the fp16 group scales of the other formats.
func (m *Matrix) scalesArg() uint64 {
	if m.Format.Spec().TensorScale && !m.Format.SuperBlock() {
		return argBuf(m.rowScale)
	}
	return argBuf(m.scales)
}

// threadsFor picks the block size of the matvec kernels: enough threads to
// give each a 32-weight block of the row, 32, 64 or 128 (the sizes the
// kernels are built for; rows of 65 to 96 blocks take 128).
func threadsFor(nb int) int {
	w := min(max((nb+31)/32, 1), 4)
	if w == 3 {
		w = 4
	}
	return 32 * w
}

// chunkBlocks is the number of 32-weight blocks a lane of the shared-memory
// kernels reads at once (chunk_blocks in matvec.cu): two in q4's 32 bytes,
// in q2's and tq2's 16 and in q4k's 32 code bytes, four in q1's 16, one
// block of the others.
func chunkBlocks(f quantize.Format) int {
	switch f {
	case quantize.Q4, quantize.Q2, quantize.TQ2, quantize.Q4K:
		return 2
	case quantize.Q1:
		return 4
	}
	return 1
}

// matvec queues y = W x: x holds Cols floats padded with zeros to whole
// 32-weight blocks, y Rows floats (device thread). Rows that are 16-byte
// aligned and hold whole chunks take a shared-memory kernel (x staged in
// shared memory, a persistent grid as large as the GPU holds at once,
// 16-byte loads of weights a chunk ahead); others the plain one.
func (d *Device) matvec(m *Matrix, x, y Buffer) error {
	return d.matvecWith(m, x, y, matvecOpts{act: -1})
}

// matvecOpts are the shared-memory kernels' fused steps: the gated
// activation act(x) * x2 (act >= 0) or the RMSNorm (norm set) applied to x
// as it is staged, and the output added to y (accum) instead of stored.
// int8 (tq2 only) takes x as BitNet's int8 activations, after the gate
// and the norm, which may then both be set. gated takes m's rows as two
// halves, gate then up, and writes outAct(gate row i x) * (up row i x)
// into y[i], Rows/2 values: the MLP's activation folded into the gate/up
// product, so the down projection reads one vector (q4, q8 and tq2, on
// the kernels gatedKernel lists).
type matvecOpts struct {
	x2        Buffer
	act       int
	norm      Buffer
	eps, wAdd float32
	accum     bool
	int8      bool
	gated     bool
	outAct    GLU
}

// fused says whether o asks for more than the plain product.
func (o matvecOpts) fused() bool {
	return o.act >= 0 || o.norm.Ptr() != 0 || o.accum || o.int8 || o.gated
}

// matvecKind is a family of matrix-vector kernels of matvec.cu.
type matvecKind uint8

const (
	// kindPlain is matvec_<fmt>_<threads>: x read from global memory, a
	// block for every 4 rows; it takes any row.
	kindPlain matvecKind = iota + 1
	// kindShared is matvec_<fmt>_s<rows>w<warps>[k<split>][g]: x staged in
	// shared memory (with the fused steps), a persistent grid as large as
	// the GPU holds at once, 16-byte loads of weights a chunk ahead.
	kindShared
	// kindFlat is matvec_<fmt>_flat<chunks>[g] (tq2 only, matvec_flat in
	// matvec.cu): int8 x, rows short enough that every chunk of a warp's
	// rows is requested before the kernel waits for x.
	kindFlat
)

// matvecKernel is one matrix-vector kernel of matvec.cu, of any format
// (name adds the format). Its zero value is none: Device.matvecMode's
// "chosen by shape".
type matvecKernel struct {
	kind   matvecKind
	rows   int // rows a warp (shared and flat kernels)
	warps  int // warps a block (shared kernels; a flat kernel's are its launch bounds, Device.maxThreads)
	split  int // warps a row (shared kernels: 1, or 2 for long rows)
	chunks int // a flat kernel's row length, in 16-byte chunks (NCH; 0: the one m's rows take, flatKernelOf)
}

// The matvec kernels by name: matvecFlat stands for whichever flat kernel
// a matrix's row length has (kernelFor resolves it); the shared-memory
// ones are built for every format (MATVEC_ALL in matvec.cu) but
// matvecS2W16, built with the gated output only (matvecGated).
var (
	matvecPlain   = matvecKernel{kind: kindPlain}
	matvecFlat    = matvecKernel{kind: kindFlat}
	matvecS4W4    = matvecKernel{kind: kindShared, rows: 4, warps: 4, split: 1}
	matvecS2W4    = matvecKernel{kind: kindShared, rows: 2, warps: 4, split: 1}
	matvecS2W8    = matvecKernel{kind: kindShared, rows: 2, warps: 8, split: 1}
	matvecS1W8    = matvecKernel{kind: kindShared, rows: 1, warps: 8, split: 1}
	matvecS1W16   = matvecKernel{kind: kindShared, rows: 1, warps: 16, split: 1}
	matvecS1W32   = matvecKernel{kind: kindShared, rows: 1, warps: 32, split: 1}
	matvecS2W16   = matvecKernel{kind: kindShared, rows: 2, warps: 16, split: 1}
	matvecS1W16K2 = matvecKernel{kind: kindShared, rows: 1, warps: 16, split: 2}
	matvecS1W32K2 = matvecKernel{kind: kindShared, rows: 1, warps: 32, split: 2}
)

// matvecKernels lists the shared-memory kernels matvec.cu builds for every
// format (MATVEC_ALL; tests and benchmarks sweep them).
var matvecKernels = []matvecKernel{matvecS4W4, matvecS2W4, matvecS2W8, matvecS1W8, matvecS1W16, matvecS1W32, matvecS1W16K2, matvecS1W32K2}

// matvecGated lists, by format, the shared-memory kernels built with the
// gated output too (MATVECG in matvec.cu): those the table below picks for
// the formats' gate/up products.
var matvecGated = map[quantize.Format][]matvecKernel{
	quantize.Q8:  {matvecS4W4, matvecS1W16},
	quantize.Q4:  {matvecS4W4, matvecS1W16, matvecS2W16},
	quantize.TQ2: {matvecS4W4, matvecS1W16},
	quantize.Q4K: {matvecS4W4, matvecS1W16, matvecS2W16},
}

// sharedBlockFormat says whether block format f has the shared-memory
// kernels too (raw_blk in matvec.cu: q4k and q6k, llama.cpp's Q4_K_M), so
// its products take the fused steps; the other block formats have the
// plain kernel only.
func sharedBlockFormat(f quantize.Format) bool {
	return f == quantize.Q4K || f == quantize.Q6K
}

// name is k's kernel in matvec.cu for m's format (matvec_<fmt>_ and
// String, the plain kernel's block size threadsFor m's rows), with the
// gated output's suffix when gated.
func (k matvecKernel) name(m *Matrix, gated bool) string {
	if k.kind == kindPlain {
		return fmt.Sprintf("matvec_%s_%d", m.Format, threadsFor(m.blocks()))
	}
	name := fmt.Sprintf("matvec_%s_%s", m.Format, k)
	if gated {
		name += "g"
	}
	return name
}

// String names k as matvec.cu's kernel names end, without the format:
// plain, flat<chunks> (flat where not resolved to a row length), or
// s<rows>w<warps>[k<split>].
func (k matvecKernel) String() string {
	switch k.kind {
	case kindPlain:
		return "plain"
	case kindFlat:
		if k.chunks == 0 {
			return "flat"
		}
		return fmt.Sprintf("flat%d", k.chunks)
	case kindShared:
		s := fmt.Sprintf("s%dw%d", k.rows, k.warps)
		if k.split > 1 {
			s += fmt.Sprintf("k%d", k.split)
		}
		return s
	}
	return "none"
}

// shapeClass is a set of shape classes: what the choice of a kernel
// depends on in a matrix's shape. A shape may be in several (a head is
// tall too); shapeClasses gives a shape's.
type shapeClass uint8

const (
	// classLarge: rows and columns 4096 or more (Llama-2-7B's products).
	classLarge shapeClass = 1 << iota
	// classWide: rows more than twice as long as the matrix is tall (the
	// down projections).
	classWide
	// classHead: 65536 rows or more (the heads of large vocabularies).
	classHead
	// classLong: rows of 4096 weights or more.
	classLong
	// classTall: 8192 rows or more.
	classTall
	// classAny holds every shape: a format's default.
	classAny shapeClass = 0
)

// shapeClasses is the set of classes a [rows, cols] matrix is in.
func shapeClasses(rows, cols int) shapeClass {
	var c shapeClass
	if rows >= 4096 && cols >= 4096 {
		c |= classLarge
	}
	if cols > 2*rows {
		c |= classWide
	}
	if rows >= 65536 {
		c |= classHead
	}
	if cols >= 4096 {
		c |= classLong
	}
	if rows >= 8192 {
		c |= classTall
	}
	return c
}

// matvecTable chooses the kernel of a product by format and shape class:
// the first entry of the matrix's format (or of every format, format "")
// whose class holds its shape; a format's classAny entry is its default.
// gated, where set, takes the product with the gated output instead. The
// entries were chosen by sweeping BenchmarkMatVec and decode on the
// benchmark models' shapes (TinyLlama-1.1B, Llama-2-7B, BitNet-2B-4T);
// other shapes get a correct kernel, not necessarily the fastest.
// (kernelFor sends tq2 products with int8 x to the flat kernel where its
// row length has one, and a block format's to the plain kernel, whatever
// the table says.)
var matvecTable = []struct {
	format quantize.Format
	class  shapeClass
	kernel matvecKernel
	gated  matvecKernel
}{
	// A float row's 32-weight block already gives each thread 64 bytes or
	// more to load: staging x in shared memory buys nothing.
	{quantize.F32, classAny, matvecPlain, matvecKernel{}},
	{quantize.F16, classAny, matvecPlain, matvecKernel{}},
	// Long rows on many of them: one row keeps a warp's loads in flight,
	// and 32 warps, one block an SM, stage x once an SM. The gated output
	// pairs gate row i with up row i: two rows a warp keep a pair in one
	// warp, where one row a warp would need a block barrier a row group.
	{quantize.Q4, classLarge, matvecS1W32, matvecS2W16},
	{quantize.Q4K, classLarge, matvecS1W32, matvecS2W16},
	// Down projections: two warps a row, 32 warps a block, so a matrix of
	// few rows still gives the GPU enough warps.
	{quantize.Q4, classWide, matvecS1W32K2, matvecKernel{}},
	{quantize.Q8, classWide, matvecS1W32K2, matvecKernel{}},
	{quantize.TQ2, classWide, matvecS1W32K2, matvecKernel{}},
	{quantize.Q4K, classWide, matvecS1W32K2, matvecKernel{}},
	{quantize.Q6K, classWide, matvecS1W32K2, matvecKernel{}},
	// Rows long enough to keep one warp busy: one row a warp, 16 warps.
	{quantize.Q4, classLong, matvecS1W16, matvecKernel{}},
	{quantize.Q4K, classLong, matvecS1W16, matvecKernel{}},
	// A head's rows fill the GPU many times over: two rows a warp read
	// each staged x value once for both, and 8 warps a block keep several
	// blocks an SM.
	{quantize.Q8, classHead, matvecS2W8, matvecKernel{}},
	// q8's blocks are the largest quantized ones: one row a warp has
	// enough bytes in flight, and 16 warps a block give the most warps.
	{quantize.Q8, classAny, matvecS1W16, matvecKernel{}},
	// q6k (the heads and some down projections of Q4_K_M) as q8.
	{quantize.Q6K, classHead, matvecS2W8, matvecKernel{}},
	{quantize.Q6K, classAny, matvecS1W16, matvecKernel{}},
	// Ternary rows are few bytes: a tall matrix has warps enough with 4
	// rows a warp, each reading its x once for 4 rows; below 8192 rows, one
	// row a warp and 16 warps give more warps to hide latency.
	{quantize.TQ2, classTall, matvecS4W4, matvecKernel{}},
	{quantize.TQ2, classAny, matvecS1W16, matvecKernel{}},
	// The rest (q4, q4k, q2, q1): 4 rows a warp and 4 warps on tall matrices,
	// which have rows enough for every warp; on the others 2 rows a warp
	// and 8 warps a block, where fewer rows a warp give more warps to hide
	// latency.
	{"", classTall, matvecS4W4, matvecKernel{}},
	{"", classAny, matvecS2W8, matvecKernel{}},
}

// tableKernel is matvecTable's kernel for format f and a [rows, cols]
// matrix, with the gated output when gated.
func tableKernel(f quantize.Format, rows, cols int, gated bool) matvecKernel {
	c := shapeClasses(rows, cols)
	for _, e := range matvecTable {
		if (e.format == f || e.format == "") && c&e.class == e.class {
			if gated && e.gated != (matvecKernel{}) {
				return e.gated
			}
			return e.kernel
		}
	}
	return matvecPlain // unreachable: the table ends in every format's default
}

// flatKernels are the flat kernels matvec.cu builds (its MATVEC_FLAT
// lines; TestFlatKernels checks them against it): rows of chunks 16-byte
// chunks (64*chunks weights), rows a warp, and whether a gated twin is
// built (suffix g, taking half as many pairs a warp). Their warps a block
// are their launch bounds (Device.maxThreads).
var flatKernels = []struct {
	chunks, rows int
	gated        bool
}{
	{32, 4, true}, {40, 4, true}, {48, 4, true}, {64, 4, true},
	{108, 2, false}, // BitNet's down projection
}

// flatKernelOf is the flat kernel m's rows take and whether it has a gated
// twin; ok is false where none is built for their length.
func flatKernelOf(m *Matrix) (k matvecKernel, gated, ok bool) {
	if m.Format != quantize.TQ2 || m.blocks()%2 != 0 {
		return matvecKernel{}, false, false
	}
	for _, f := range flatKernels {
		if f.chunks == m.blocks()/2 {
			return matvecKernel{kind: kindFlat, rows: f.rows, chunks: f.chunks}, f.gated, true
		}
	}
	return matvecKernel{}, false, false
}

// gatedKernel says whether matvec.cu has kernel k with the gated output
// for m's format (matvecGated; a flat kernel's twin, flatKernels).
func gatedKernel(m *Matrix, k matvecKernel) bool {
	if k.kind == kindFlat {
		_, gated, ok := flatKernelOf(m)
		return ok && gated
	}
	return slices.Contains(matvecGated[m.Format], k)
}

// canFuse says whether m's product can take o's fused steps: it needs one
// of the shared-memory kernels, and both a gate and a norm only with int8
// x (device thread).
func (d *Device) canFuse(m *Matrix, o matvecOpts) bool {
	if o.int8 != m.Format.Spec().Int8Activations || (o.act >= 0 && o.norm.Ptr() != 0 && !o.int8) {
		return false
	}
	k := d.kernelFor(m, o)
	if o.gated && (d.exp.noGated || m.Rows%2 != 0 || o.accum || !gatedKernel(m, k)) {
		return false
	}
	return k.kind != kindPlain
}

// kernelFor is the matvec kernel m's product with o runs: the one
// matvecTable gives the shape (or Device.matvecMode; unless forced, tq2
// with int8 x takes the flat kernel where its row length has one), or the
// plain one where m's rows do not suit the shared-memory kernels: 16-byte
// aligned, whole chunks, x fitting in shared memory (q6k's rows need no
// alignment: raw_load reads its words where they lie). A block format but
// q4k and q6k (sharedBlockFormat) has the plain kernel only (matvec_blk in
// matvec.cu), so its products fuse nothing (device thread).
func (d *Device) kernelFor(m *Matrix, o matvecOpts) matvecKernel {
	if blockKernels(m.Format) && !sharedBlockFormat(m.Format) {
		return matvecPlain
	}
	k := d.matvecMode
	if k == (matvecKernel{}) {
		k = tableKernel(m.Format, m.Rows, m.Cols, o.gated)
		if _, _, ok := flatKernelOf(m); o.int8 && ok {
			k = matvecFlat
		}
	}
	if k.kind == kindFlat {
		flat, _, ok := flatKernelOf(m)
		if !o.int8 || !ok {
			return matvecPlain
		}
		k = flat
	}
	aligned := m.rowBytes%16 == 0 || m.Format == quantize.Q6K
	if k.kind != kindPlain && aligned && m.blocks()%chunkBlocks(m.Format) == 0 && stagedBytes(m, o) <= d.maxShared {
		return k
	}
	return matvecPlain
}

// stagedBytes is the shared memory x takes staged (stage_x in matvec.cu):
// int8 x a byte a value; q4's, q8's, q4k's and q6k's int16 x two bytes a
// value plus a scale and a sum a block; float x four bytes a value.
func stagedBytes(m *Matrix, o matvecOpts) int {
	switch {
	case o.int8:
		return m.blocks() * 32
	case m.Format == quantize.Q4 || m.Format == quantize.Q8 || sharedBlockFormat(m.Format):
		return m.blocks() * 72
	}
	return m.blocks() * 32 * 4
}

// matvecWith is matvec with the fused steps of o (device thread).
func (d *Device) matvecWith(m *Matrix, x, y Buffer, o matvecOpts) error {
	nb := m.blocks()
	args := []uint64{argBuf(m.data), m.scalesArg(), argBuf(m.mins), argF32(m.scale), argBuf(x), argBuf(y),
		argInt(m.Rows), argInt(nb), argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups())}
	fusedArgs := []uint64{argBuf(o.x2), argInt(o.act), argInt(m.Cols), argBuf(o.norm), argF32(o.eps), argF32(o.wAdd),
		argBool(o.accum), argBool(o.int8), argInt(int(o.outAct))}
	k := d.kernelFor(m, o)
	switch k.kind {
	case kindPlain:
		if o.fused() {
			return fmt.Errorf("gpu: %s %dx%d: no fused matvec kernel", m.Format, m.Rows, m.Cols)
		}
		return d.launchPDL(k.name(m, false), grid1((m.Rows+3)/4), grid1(threadsFor(nb)), 0, args...)
	case kindFlat:
		perWarp, outs := k.rows, m.Rows // rows a warp, or pairs
		if o.gated {
			outs, perWarp = m.Rows/2, perWarp/2
		}
		name, shared := k.name(m, o.gated), stagedBytes(m, o)
		if err := d.allowShared(name, shared); err != nil {
			return err
		}
		threads, err := d.maxThreads(name)
		if err != nil {
			return err
		}
		warps, flatWarps := (outs+perWarp-1)/perWarp, threads/32
		return d.launchPDL(name, grid1((warps+flatWarps-1)/flatWarps), grid1(threads), shared,
			argBuf(m.data), m.scalesArg(), argF32(m.scale), argBuf(x), argBuf(y), argInt(m.Rows), argInt(nb),
			argInt(m.rowBytes), argBuf(o.x2), argInt(o.act), argInt(m.Cols), argBuf(o.norm), argF32(o.eps),
			argF32(o.wAdd), argBool(o.accum), argInt(int(o.outAct)))
	default:
		if o.gated && (k.split > 1 || !gatedKernel(m, k)) {
			return fmt.Errorf("gpu: %s %dx%d: no gated-output kernel %s", m.Format, m.Rows, m.Cols, k)
		}
		name, shared := k.name(m, o.gated), stagedBytes(m, o)
		if err := d.allowShared(name, shared); err != nil {
			return err
		}
		perGroup := k.rows * k.warps / k.split // rows a block takes at once
		groups := (m.Rows + perGroup - 1) / perGroup
		grid := d.matvecGrid
		if grid == 0 {
			per, err := d.blocksPerSM(name, 32*k.warps, shared)
			if err != nil {
				return err
			}
			waves := (groups + per*d.sms - 1) / (per * d.sms)
			grid = (groups + waves - 1) / waves
		}
		args = append(args, fusedArgs...)
		return d.launchPDL(name, grid1(min(grid, groups)), grid1(32*k.warps), shared, args...)
	}
}

// quantizeI8 queues the int8 quantization of x[0..n) into q and its scale
// into scale[0] (device thread).
func (d *Device) quantizeI8(x Buffer, n int, q, scale Buffer) error {
	return d.quantizeI8N(x, n, 1, q, 0, scale)
}

// quantizeI8N quantizes tokens vectors of n (rows of x) in one launch:
// vector i into q + i*qStride and its scale into scale[i] (device thread).
func (d *Device) quantizeI8N(x Buffer, n, tokens int, q Buffer, qStride int, scale Buffer) error {
	return d.launchPDL("quantize_i8", grid1(tokens), grid1(1024), 0, argBuf(x), argInt(n), argBuf(q), argBuf(scale), argInt(qStride))
}

// matvecI8 queues y = W q*scale for tq2 (W2A8) and q8 (W8A8) (device thread).
func (d *Device) matvecI8(m *Matrix, q, scale, y Buffer) error {
	return d.matvecI8N(m, 1, q, scale, y)
}

// matvecI8N queues tokens products at once: token i reads q + i*blocks*32
// and scale[i] and writes y + i*Rows (device thread).
func (d *Device) matvecI8N(m *Matrix, tokens int, q, scale, y Buffer) error {
	if m.Format != quantize.TQ2 && m.Format != quantize.Q8 {
		return fmt.Errorf("gpu: int8 activations need tq2 or q8 weights, not %s", m.Format)
	}
	nt := threadsFor(m.blocks())
	name := fmt.Sprintf("matvec_%s_i8_%d", m.Format, nt)
	return d.launchPDL(name, grid2((m.Rows+3)/4, tokens), grid1(nt), 0,
		argBuf(m.data), m.scalesArg(), argF32(m.scale), argBuf(q), argBuf(scale), argBuf(y),
		argInt(m.Rows), argInt(m.blocks()), argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups()))
}

// binarize queues the sign bits and group means of x[0..n) (device thread).
func (d *Device) binarize(x Buffer, n, groupSize int, bits, beta Buffer) error {
	ng := (n + groupSize - 1) / groupSize
	return d.launchPDL("binarize", grid1(ng), grid1(32), 0, argBuf(x), argInt(n), argInt(groupSize), argBuf(bits), argBuf(beta))
}

// matvecBinary queues y = W x for q1 weights and binarized x (device thread).
func (d *Device) matvecBinary(m *Matrix, bits, beta, y Buffer) error {
	if m.Format != quantize.Q1 {
		return fmt.Errorf("gpu: binary activations need q1 weights, not %s", m.Format)
	}
	nt := threadsFor(m.blocks())
	return d.launchPDL(fmt.Sprintf("matvec_q1_bin_%d", nt), grid1((m.Rows+3)/4), grid1(nt), 0,
		argBuf(m.data), argBuf(m.scales), argBuf(bits), argBuf(beta), argBuf(y),
		argInt(m.Rows), argInt(m.Cols), argInt(m.blocks()), argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups()))
}

// matmul queues Y[n, Rows] = X[n, Cols] W^T (device thread): through
// cuBLAS's tensor cores when it is found and the product is large enough
// (blas.go), else the fp32 kernel of matmul.cu.
func (d *Device) matmul(m *Matrix, X, Y Buffer, n int) error {
	if m.rowScale.Ptr() != 0 {
		return fmt.Errorf("gpu: matmul: a joined tq2 matrix [%d, %d] takes the int8 product only", m.Rows, m.Cols)
	}
	if name, shared, ok := d.batchShared(m, n); ok {
		if err := d.allowShared(name, shared); err != nil {
			return err
		}
		per, err := d.blocksPerSM(name, 128, shared)
		if err != nil {
			return err
		}
		groups := (m.Rows + batchRowsS - 1) / batchRowsS
		return d.launchPDL(name, grid2(min(groups, per*d.sms), (n+batchVectors-1)/batchVectors), grid1(128), shared,
			argBuf(m.data), argBuf(m.scales), argBuf(m.mins), argBuf(X), argBuf(Y),
			argInt(m.Rows), argInt(m.blocks()), argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups()), argInt(n))
	}
	if name, ok := batchKernel(m, n); ok {
		return d.launchPDL(name, grid2((m.Rows+3)/4, (n+batchVectors-1)/batchVectors), grid1(128), 0,
			argBuf(m.data), argBuf(m.scales), argBuf(m.mins), argBuf(X), argBuf(Y),
			argInt(m.Rows), argInt(m.blocks()), argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups()), argInt(n))
	}
	if bl := d.blasFor(m, n); bl != nil {
		return d.matmulBlas(bl, m, X, Y, n)
	}
	return d.launch("matmul_"+string(m.Format), grid2((m.Rows+63)/64, (n+63)/64), grid1(256), 0,
		argBuf(m.data), argBuf(m.scales), argBuf(m.mins), argF32(m.scale), argBuf(X), argBuf(Y),
		argInt(m.Rows), argInt(m.Cols), argInt(n), argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups()))
}

// batchVectors is how many vectors a block of matvec_batch takes (NV in
// kernels/matvec.cu), and batchMaxTokens the most tokens a product goes
// to it with: a few sequences' decode tokens, for which each weight read
// once per batchVectors of them beats dequantizing for cuBLAS; from
// blasMinTokens on, cuBLAS's tensor cores win despite the dequantization
// (the batch kernels multiply on the ALUs).
const (
	batchVectors   = 8
	batchMaxTokens = blasMinTokens - 1
	// batchRowsS is how many rows a block of matvec_batchs takes at once
	// (its 4 warps of 4 rows).
	batchRowsS = 16
)

// batchShared is matvec_batchs's kernel for a product of m over n tokens
// and the shared memory its staged x takes: 2 to batchMaxTokens tokens of
// q4 or q8 rows the shared-memory kernels take (16-byte aligned, whole
// chunks), batchVectors of them staged as int16 (stagedBytes a vector,
// each rounded up to 16 bytes).
func (d *Device) batchShared(m *Matrix, n int) (string, int, bool) {
	if n < 2 || n > batchMaxTokens || m.Cols%32 != 0 || m.rowScale.Ptr() != 0 ||
		(m.Format != quantize.Q4 && m.Format != quantize.Q8) || m.rowBytes%16 != 0 || m.blocks()%chunkBlocks(m.Format) != 0 {
		return "", 0, false
	}
	shared := batchVectors * ((stagedBytes(m, matvecOpts{act: -1}) + 15) / 16 * 16)
	if shared > d.maxShared {
		return "", 0, false
	}
	return "matvec_batchs_" + string(m.Format), shared, true
}

// batchKernel is matvec_batch's kernel for a product of m over n tokens,
// where it takes it: 2 to batchMaxTokens tokens of q8, q4, q2 or q1 rows
// of whole 32-weight blocks, or of a block format (matvec_batch_blk).
func batchKernel(m *Matrix, n int) (string, bool) {
	if n < 2 || n > batchMaxTokens || m.Cols%32 != 0 || m.rowScale.Ptr() != 0 {
		return "", false
	}
	switch {
	case m.Format == quantize.Q8, m.Format == quantize.Q4, m.Format == quantize.Q2, m.Format == quantize.Q1,
		blockKernels(m.Format):
		return "matvec_batch_" + string(m.Format), true
	}
	return "", false
}

// Activation modes of a matrix-vector product.
type Activations int

// The activation modes: float activations for every format; int8 (absmax,
// per vector) for tq2 and q8; binary signs with per-group means for q1.
const (
	ActFloat Activations = iota
	ActInt8
	ActBinary
)

// MatVec uploads t, computes y = W x with float activations and frees t
// again: the one-call path `lowbit validate --kernels` checks against
// quantize's float64 reference (DotRef).
func (d *Device) MatVec(t *quantize.Tensor, x []float32) ([]float32, error) {
	m, err := d.Upload(t)
	if err != nil {
		return nil, err
	}
	defer d.FreeMatrix(m)
	return d.MatVecAct(m, x, ActFloat)
}

// MatMul uploads t, computes Y[n, Rows] = X[n, Cols] W^T and frees t again.
func (d *Device) MatMul(t *quantize.Tensor, x []float32, n int) ([]float32, error) {
	m, err := d.Upload(t)
	if err != nil {
		return nil, err
	}
	defer d.FreeMatrix(m)
	return d.MatMulMatrix(m, x, n)
}

// MatVecAct computes y = W x for a resident matrix with the given
// activation mode and copies y back; the references are quantize's DotRef
// (ActFloat), DotInt8Ref (ActInt8) and DotBinaryRef (ActBinary).
func (d *Device) MatVecAct(m *Matrix, x []float32, act Activations) ([]float32, error) {
	if len(x) != m.Cols {
		return nil, fmt.Errorf("gpu: matvec %s [%d, %d]: x has %d values", m.Format, m.Rows, m.Cols, len(x))
	}
	y := make([]float32, m.Rows)
	err := d.do(func() error {
		xb, err := d.uploadNew(bytesOf(x), int64(m.blocks()*32*4), MemScratch)
		if err != nil {
			return err
		}
		defer d.free(xb)
		yb, err := d.alloc(int64(4*m.Rows), MemScratch)
		if err != nil {
			return err
		}
		defer d.free(yb)
		if err := d.memset(yb, 0xff); err != nil { // NaN: unwritten outputs show
			return err
		}
		switch act {
		case ActFloat:
			err = d.matvec(m, xb, yb)
		case ActInt8:
			err = d.withInt8(m, xb, func(q, s Buffer) error { return d.matvecI8(m, q, s, yb) })
		case ActBinary:
			err = d.withBinary(m, xb, func(bits, beta Buffer) error { return d.matvecBinary(m, bits, beta, yb) })
		default:
			err = fmt.Errorf("gpu: unknown activation mode %d", act)
		}
		if err != nil {
			return err
		}
		return d.dtoh(bytesOf(y), yb, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: matvec %s [%d, %d]: %w", m.Format, m.Rows, m.Cols, err)
	}
	return y, nil
}

// withInt8 quantizes x to int8 in temporary buffers and runs fn on them.
func (d *Device) withInt8(m *Matrix, x Buffer, fn func(q, scale Buffer) error) error {
	q, err := d.alloc(int64(m.blocks()*32), MemScratch)
	if err != nil {
		return err
	}
	defer d.free(q)
	s, err := d.alloc(4, MemScratch)
	if err != nil {
		return err
	}
	defer d.free(s)
	if err := d.memset(q, 0); err != nil {
		return err
	}
	if err := d.quantizeI8(x, m.Cols, q, s); err != nil {
		return err
	}
	return fn(q, s)
}

// withBinary binarizes x in temporary buffers and runs fn on them.
func (d *Device) withBinary(m *Matrix, x Buffer, fn func(bits, beta Buffer) error) error {
	if m.Format != quantize.Q1 {
		return fmt.Errorf("gpu: binary activations need q1 weights, not %s", m.Format)
	}
	bits, err := d.alloc(int64(4*m.blocks()), MemScratch)
	if err != nil {
		return err
	}
	defer d.free(bits)
	beta, err := d.alloc(int64(4*m.groups()), MemScratch)
	if err != nil {
		return err
	}
	defer d.free(beta)
	if err := d.binarize(x, m.Cols, m.GroupSize, bits, beta); err != nil {
		return err
	}
	return fn(bits, beta)
}

// MatMulMatrix computes Y[n, Rows] = X[n, Cols] W^T for a resident matrix
// (the prefill product, float activations) and copies Y back.
func (d *Device) MatMulMatrix(m *Matrix, x []float32, n int) ([]float32, error) {
	if n <= 0 || len(x) != n*m.Cols {
		return nil, fmt.Errorf("gpu: matmul %s [%d, %d]: %d values are not %d rows of x", m.Format, m.Rows, m.Cols, len(x), n)
	}
	y := make([]float32, n*m.Rows)
	err := d.do(func() error {
		xb, err := d.uploadNew(bytesOf(x), 0, MemScratch)
		if err != nil {
			return err
		}
		defer d.free(xb)
		yb, err := d.alloc(int64(4*len(y)), MemScratch)
		if err != nil {
			return err
		}
		defer d.free(yb)
		if err := d.memset(yb, 0xff); err != nil {
			return err
		}
		if err := d.matmul(m, xb, yb, n); err != nil {
			return err
		}
		return d.dtoh(bytesOf(y), yb, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: matmul %s [%d, %d] x %d: %w", m.Format, m.Rows, m.Cols, n, err)
	}
	return y, nil
}
