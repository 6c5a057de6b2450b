package gpu

import (
	"fmt"

	"lowbit/half"
	"lowbit/quantize"
)

// Matrix is a weight matrix resident on the device, in one of the formats
// of package quantize (float ones included).
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

// blocks is the number of 32-weight blocks per row.
func (m *Matrix) blocks() int { return (m.Cols + 31) / 32 }

// groupBlocks is the number of 32-weight blocks sharing a scale (1 for
// formats without groups, which ignore it).
func (m *Matrix) groupBlocks() int { return max(m.GroupSize/32, 1) }

// groups is the number of scale groups per row.
func (m *Matrix) groups() int {
	if m.GroupSize <= 0 {
		return 1
	}
	return (m.Cols + m.GroupSize - 1) / m.GroupSize
}

// Upload copies a quantized tensor to the device.
func (d *Device) Upload(t *quantize.Tensor) (*Matrix, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("gpu: upload: %w", err)
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
	if m.Format.Spec().TensorScale {
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
// kernels reads at once (chunk_blocks in matvec.cu): two in q4's 32 bytes
// and in q2's and tq2's 16, four in q1's 16, one block of the others.
func chunkBlocks(f quantize.Format) int {
	switch f {
	case quantize.Q4, quantize.Q2, quantize.TQ2:
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

// gatedKernel says whether matvec.cu has a gated-output kernel for m's
// format in kernel mode (MATVECG; the flat kernels flatKernels marks).
func gatedKernel(m *Matrix, mode int) bool {
	switch m.Format {
	case quantize.Q4:
		return mode == matvecS4W4 || mode == matvecS1W16 || mode == matvecS2W16
	case quantize.Q8:
		return mode == matvecS4W4 || mode == matvecS1W16
	case quantize.TQ2:
		return mode == matvecS4W4 || mode == matvecS1W16 || mode == matvecFlat && flatKernels[flatChunks(m)].gated
	}
	return false
}

// flatKernel is one matvec_tq2_flat<nch> of matvec.cu (a MATVEC_FLAT
// line): rows a warp, and whether it has a gated twin (suffix g, taking
// half as many pairs a warp). Its warps a block are its launch bounds
// (Device.maxThreads).
type flatKernel struct {
	rows  int
	gated bool
}

// flatKernels are the flat kernels built, by NCH (rows of NCH 16-byte
// chunks, 64*NCH weights); TestFlatKernels checks them against matvec.cu.
var flatKernels = map[int]flatKernel{
	32: {4, true}, 40: {4, true}, 48: {4, true}, 64: {4, true},
	108: {2, false}, // BitNet's down projection
}

// flatChunks is NCH of the matvec_tq2_flat kernel m's rows take, or 0
// where none is built for their length.
func flatChunks(m *Matrix) int {
	if m.Format != quantize.TQ2 || m.blocks()%2 != 0 {
		return 0
	}
	if _, ok := flatKernels[m.blocks()/2]; ok {
		return m.blocks() / 2
	}
	return 0
}

// canFuse says whether m's product can take o's fused steps: it needs one
// of the shared-memory kernels, and both a gate and a norm only with int8
// x (device thread).
func (d *Device) canFuse(m *Matrix, o matvecOpts) bool {
	if o.int8 != m.Format.Spec().Int8Activations || (o.act >= 0 && o.norm.Ptr() != 0 && !o.int8) {
		return false
	}
	mode := d.kernelFor(m, o)
	if o.gated && (d.exp.noGated || m.Rows%2 != 0 || o.accum || !gatedKernel(m, mode)) {
		return false
	}
	return mode != matvecPlain
}

// kernelFor is the matvec kernel m's product with o runs: the one the
// shape asks for (matvecKernel, or Device.matvecMode; unless forced, tq2
// with int8 x on rows of 2048-4096 or 6912 weights takes the flat kernel, and a
// gated output two rows a warp where the shape asks for one row and 32
// warps), or the plain one where m's rows do not suit the shared-memory
// kernels: 16-byte aligned, whole chunks, x fitting in shared memory
// (device thread).
func (d *Device) kernelFor(m *Matrix, o matvecOpts) int {
	mode := d.matvecMode
	if mode == 0 {
		mode = matvecKernel(m.Format, m.Rows, m.Cols)
		if o.gated && mode == matvecS1W32 {
			mode = matvecS2W16 // a gated output's pairs within a warp (gatedKernel)
		}
		if o.int8 && flatChunks(m) > 0 {
			mode = matvecFlat
		}
	}
	if mode == matvecFlat && (!o.int8 || flatChunks(m) == 0) {
		return matvecPlain
	}
	if mode != matvecPlain && m.rowBytes%16 == 0 && m.blocks()%chunkBlocks(m.Format) == 0 && stagedBytes(m, o) <= d.maxShared {
		return mode
	}
	return matvecPlain
}

// stagedBytes is the shared memory x takes staged (stage_x in matvec.cu):
// int8 x a byte a value; q4's and q8's int16 x two bytes a value plus a scale and
// a sum a block; float x four bytes a value.
func stagedBytes(m *Matrix, o matvecOpts) int {
	switch {
	case o.int8:
		return m.blocks() * 32
	case m.Format == quantize.Q4 || m.Format == quantize.Q8:
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
	switch mode := d.kernelFor(m, o); mode {
	case matvecPlain:
		if o.fused() {
			return fmt.Errorf("gpu: %s %dx%d: no fused matvec kernel", m.Format, m.Rows, m.Cols)
		}
		nt := threadsFor(nb)
		return d.launchPDL(fmt.Sprintf("matvec_%s_%d", m.Format, nt), grid1((m.Rows+3)/4), grid1(nt), 0, args...)
	case matvecFlat:
		nch := flatChunks(m)
		perWarp := flatKernels[nch].rows // rows a warp, or pairs
		name, outs := fmt.Sprintf("matvec_tq2_flat%d", nch), m.Rows
		if o.gated {
			name, outs, perWarp = name+"g", m.Rows/2, perWarp/2
		}
		shared := stagedBytes(m, o)
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
		shared := stagedBytes(m, o)
		split, rows, warps := max(mode/10000, 1), mode/100%100, mode%100
		name := fmt.Sprintf("matvec_%s_s%dw%d", m.Format, rows, warps)
		if split > 1 {
			name += fmt.Sprintf("k%d", split)
		}
		if o.gated {
			if split > 1 || !gatedKernel(m, mode) {
				return fmt.Errorf("gpu: %s %dx%d: no gated-output kernel for mode %d", m.Format, m.Rows, m.Cols, mode)
			}
			name += "g"
		}
		if err := d.allowShared(name, shared); err != nil {
			return err
		}
		perGroup := rows * warps / split // rows a block takes at once
		groups := (m.Rows + perGroup - 1) / perGroup
		grid := d.matvecGrid
		if grid == 0 {
			per, err := d.blocksPerSM(name, 32*warps, shared)
			if err != nil {
				return err
			}
			waves := (groups + per*d.sms - 1) / (per * d.sms)
			grid = (groups + waves - 1) / waves
		}
		args = append(args, fusedArgs...)
		return d.launchPDL(name, grid1(min(grid, groups)), grid1(32*warps), shared, args...)
	}
}

// Matrix-vector kernels (Device.matvecMode, matvecKernel): the plain one,
// tq2's flat one (int8 x, short rows: every chunk of a warp's 4 rows
// requested before the wait; matvec_flat in matvec.cu), or a
// shared-memory one given as warps a row * 10000 (when more than one) +
// rows a warp * 100 + warps a block.
const (
	matvecPlain   = 1
	matvecFlat    = 2
	matvecS4W4    = 404
	matvecS2W4    = 204
	matvecS2W8    = 208
	matvecS1W8    = 108
	matvecS1W16   = 116
	matvecS1W32   = 132
	matvecS2W16   = 216 // gated output only (gatedKernel)
	matvecS1W16K2 = 20116
	matvecS1W32K2 = 20132
)

// matvecKernels lists the shared-memory kernels built in matvec.cu.
var matvecKernels = []int{matvecS4W4, matvecS2W4, matvecS2W8, matvecS1W8, matvecS1W16, matvecS1W32, matvecS1W16K2, matvecS1W32K2}

// matvecKernel picks the matvec kernel for a shape. The rules were chosen
// from BenchmarkMatVec sweeps and decode A/B runs on the shapes of the
// benchmark models (TinyLlama-1.1B, Llama-2-7B, BitNet-2B-4T), so some are
// special cases of those shapes; other shapes get a correct kernel, not a
// tuned one. In order:
//   - f32 and f16: the plain kernel, whose 32-weight blocks already give
//     each thread 64 bytes or more;
//   - q4 matrices of 4096 rows and columns or more (Llama-2-7B's): one row
//     a warp and 32 warps, one block an SM, which beat 16 warps and the
//     split-K kernel there;
//   - q8, q4 and tq2 rows more than twice as long as the matrix is tall
//     (the down projections): two warps a row and 32 warps a block, so a
//     matrix of few rows still gives the GPU enough warps;
//   - q8 heads of 65536 rows or more (BitNet-2B's 128256x2560): two rows a
//     warp and 8 warps, which streamed it fastest of the shapes tried;
//   - the other q8 shapes, q4 rows of 4096 weights or more and tq2 below
//     8192 rows: one row a warp and 16 warps a block;
//   - the rest: 4 rows a warp, 4 warps, on tall matrices (8192 rows or
//     more), and 2 rows a warp, 8 warps a block, on the others, where fewer
//     rows a warp give more warps to hide latency.
func matvecKernel(f quantize.Format, rows, cols int) int {
	wide := cols > 2*rows
	switch {
	case f == quantize.F32 || f == quantize.F16:
		return matvecPlain
	case f == quantize.Q4 && cols >= 4096 && rows >= 4096:
		return matvecS1W32
	case wide && (f == quantize.Q8 || f == quantize.Q4 || f == quantize.TQ2):
		return matvecS1W32K2
	case f == quantize.Q8 && rows >= 65536:
		return matvecS2W8
	case f == quantize.Q8, f == quantize.Q4 && cols >= 4096, f == quantize.TQ2 && rows < 8192:
		return matvecS1W16
	case rows >= 8192:
		return matvecS4W4
	}
	return matvecS2W8
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
	if bl := d.blasFor(m, n); bl != nil {
		return d.matmulBlas(bl, m, X, Y, n)
	}
	return d.launch("matmul_"+string(m.Format), grid2((m.Rows+63)/64, (n+63)/64), grid1(256), 0,
		argBuf(m.data), argBuf(m.scales), argBuf(m.mins), argF32(m.scale), argBuf(X), argBuf(Y),
		argInt(m.Rows), argInt(m.Cols), argInt(n), argInt(m.rowBytes), argInt(m.groupBlocks()), argInt(m.groups()))
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
