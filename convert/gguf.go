package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"lowbit/gguf"
	"lowbit/half"
	"lowbit/internal/atomicfile"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
	"lowbit/tokenizer"
	"lowbit/validate"
)

// This file exports a lowbit model directory as a GGUF v3 file that
// llama.cpp (and Ollama, LM Studio) load: every tensor in the ggml type that
// holds its values exactly, repacked rather than requantized (ggufTypes),
// the architecture's and the tokenizer's metadata as llama.cpp's converter
// writes them, and lowbit's provenance and validation under lowbit.* keys.

// ggufType is a lowbit format that a ggml type holds exactly, at one group
// size: the codes and scales repack into the type's blocks without
// changing a weight. Adding a format whose layout is a ggml type's is one
// entry of ggufTypes.
type ggufType struct {
	format quantize.Format
	// group is the group the format needs (the type's block of weights
	// sharing a scale); 0 for a format with one scale per tensor.
	group int
	typ   gguf.GGMLType
	// fileType is llama.cpp's general.file_type of a model mostly of it.
	fileType uint32
	// pack writes the rows of t in order (a row index per file row) as
	// blocks of typ; an error says why the values do not fit exactly.
	pack func(t *quantize.Tensor, order []int) ([]byte, error)
}

// ggufTypes lists the formats GGUF holds exactly.
func ggufTypes() []ggufType {
	return []ggufType{
		{format: quantize.Q8, group: 32, typ: gguf.Q8_0, fileType: 7, pack: packQ8_0},
		{format: quantize.Q4, group: 32, typ: gguf.Q4_1, fileType: 3, pack: packQ4_1},
		{format: quantize.Q1, group: 128, typ: gguf.Q1_0, fileType: 40, pack: packQ1_0},
		{format: quantize.TQ2, typ: gguf.TQ2_0, fileType: 37, pack: packTQ2_0},
	}
}

// ggufTypeOf is the entry of format f.
func ggufTypeOf(f quantize.Format) (ggufType, bool) {
	for _, t := range ggufTypes() {
		if t.format == f {
			return t, true
		}
	}
	return ggufType{}, false
}

// ggufClosest names, for a format without an exact ggml type, the type
// --requantize writes it as.
func ggufClosest(f quantize.Format) (ggufType, string) {
	if t, ok := ggufTypeOf(f); ok {
		return t, fmt.Sprintf("%s (groups of %d)", t.typ, max(t.group, int(t.typ.BlockSize())))
	}
	q4, _ := ggufTypeOf(quantize.Q4)
	return q4, "Q4_1 (Q2_K, nearer in size, is not one lowbit writes yet)"
}

// GGUFOptions tune ExportGGUF.
type GGUFOptions struct {
	// Out is the .gguf file to write.
	Out string
	// Force replaces an existing file at Out.
	Force bool
	// Requantize writes tensors no ggml type holds exactly (a group other
	// than the type's block, a tq2 scale that is not an f16) in the
	// closest type instead of refusing them.
	Requantize bool
	// Progress receives a progress bar (nil: none).
	Progress io.Writer
	// Version is lowbit's version, recorded under lowbit.version.
	Version string
	// Reference is the float original a requantized file is validated
	// against (empty: the manifest's source, as lowbit validate finds it);
	// CacheDir is the HF cache it is looked for in. NoValidate skips it.
	Reference, CacheDir string
	NoValidate          bool
}

// GGUFResult describes a written GGUF file.
type GGUFResult struct {
	Path string `json:"path"`
	// Arch is llama.cpp's name of the architecture.
	Arch    string `json:"architecture"`
	Tensors int    `json:"tensors"`
	Bytes   int64  `json:"bytes"`
	// Types counts the tensors of each ggml type.
	Types map[string]int `json:"types"`
	// Requantized lists the tensors written with other values than the
	// lowbit model's (only with Requantize): the file needs validating
	// again.
	Requantized []string `json:"requantized,omitempty"`
	// Notes say what the file leaves to llama.cpp's own conventions.
	Notes   []string `json:"notes,omitempty"`
	Seconds float64  `json:"seconds"`
	// Validation is the requantized file's check against the float
	// original (nil when nothing was requantized, or with NoValidate).
	Validation *validate.Report `json:"validation,omitempty"`
}

// ErrNoExactType is wrapped by ExportGGUF's error when a tensor's format
// has no ggml type that holds it exactly and Requantize is off.
var ErrNoExactType = errors.New("no GGUF type holds it exactly")

// ggufTensor is one tensor of the export: its directory entry and how its
// data is made.
type ggufTensor struct {
	info gguf.TensorInfo
	data func() ([]byte, error)
}

// ExportGGUF writes the lowbit model in dir as a GGUF v3 file. Every
// tensor keeps its values: q8 and q4 at group 32 become Q8_0 and Q4_1, q1
// at group 128 Q1_0, tq2 TQ2_0 (where its scale is an f16), floats stay
// F32, F16 or BF16; a quantized tensor whose rows are not whole blocks of
// its type is written as F16, or F32, holding its dequantized weights
// exactly, as llama.cpp's converter falls back to floats for such shapes.
// A tensor no type holds exactly is refused, naming the closest type,
// unless opts.Requantize. The file is written under a temporary name and
// renamed into place; an existing file is replaced only with opts.Force.
func ExportGGUF(ctx context.Context, dir string, opts GGUFOptions) (*GGUFResult, error) {
	start := time.Now()
	out := filepath.Clean(opts.Out)
	if !strings.HasSuffix(strings.ToLower(out), ".gguf") {
		return nil, fmt.Errorf("export: %s: a GGUF file's name ends in .gguf (llama.cpp and lowbit tell GGUF files by it)", out)
	}
	if st, err := os.Lstat(out); err == nil {
		if !opts.Force {
			return nil, fmt.Errorf("export: %s already exists (use --force to replace it)", out)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("export: %s is not a regular file: --force replaces only a file", out)
		}
	}
	d, err := manifest.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer d.Close()
	cfg, err := model.ParseConfig(d.Manifest.Architecture)
	if err != nil {
		return nil, fmt.Errorf("export: %s: manifest architecture: %w", dir, err)
	}
	layout, err := cfg.GGUF()
	if err != nil {
		return nil, fmt.Errorf("export: %s (%s): %w", dir, cfg.Arch, err)
	}
	tokKVs, tokNotes, err := tokenizer.GGUFMetadata(dir, cfg.VocabSize)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	res := &GGUFResult{Path: out, Arch: layout.Arch, Types: map[string]int{}, Notes: append(slices.Clone(layout.Notes), tokNotes...)}
	tensors, err := planGGUF(ctx, d, cfg, layout, opts.Requantize, res)
	if err != nil {
		return nil, fmt.Errorf("export: %s: %w", dir, err)
	}
	kvs, err := ggufGeneral(d.Manifest, layout, res, opts.Version)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	kvs = append(append(kvs, layout.Metadata...), tokKVs...)
	infos := make([]gguf.TensorInfo, len(tensors))
	var total int64
	for i, t := range tensors {
		infos[i] = t.info
		res.Types[t.info.Type.String()]++
		n, _ := t.info.Type.Bytes(t.info.Elements())
		total += n
	}
	bar := newBar(opts.Progress, total, fmt.Sprintf("export %s", filepath.Base(out)))
	err = atomicfile.Write(out, 0o644, func(w io.Writer) error {
		gw, err := gguf.NewWriter(w, kvs, infos)
		if err != nil {
			return err
		}
		for _, t := range tensors {
			if err := ctx.Err(); err != nil {
				return err
			}
			b, err := t.data()
			if err != nil {
				return fmt.Errorf("tensor %s: %w", t.info.Name, err)
			}
			if err := gw.WriteTensor(t.info.Name, b); err != nil {
				return err
			}
			bar.Add(len(b))
		}
		return gw.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	bar.Finish()
	if st, err := os.Stat(out); err == nil {
		res.Bytes = st.Size()
	}
	res.Tensors = len(tensors)
	if len(res.Requantized) > 0 && !opts.NoValidate {
		if res.Validation, err = validateGGUF(ctx, dir, out, opts); err != nil {
			return res, fmt.Errorf("export: validate %s: %w", out, err)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	if v := res.Validation; v != nil && v.Status != validate.Pass {
		return res, fmt.Errorf("export: %s: %w", out, ErrValidation)
	}
	return res, nil
}

// validateGGUF checks a requantized file against the float original, as
// lowbit validate checks a model.
func validateGGUF(ctx context.Context, dir, out string, opts GGUFOptions) (*validate.Report, error) {
	ref := opts.Reference
	if ref == "" {
		var err error
		if ref, err = validate.FindReference(dir, opts.CacheDir); err != nil {
			return nil, err
		}
	}
	if opts.Progress != nil {
		fmt.Fprintln(opts.Progress, "validating the requantized file against its source")
	}
	m, ref, err := validate.ModelGGUF(ctx, out, validate.DirOptions{Reference: ref, CacheDir: opts.CacheDir, MaxTokens: validationTokens})
	if err != nil {
		return nil, err
	}
	rep := &validate.Report{Model: m, ModelDir: out, Reference: ref}
	rep.Finish()
	return rep, nil
}

// planGGUF lists the file's tensors: the model's, in the order of
// Config.ExpectedTensors, then the layout's extra ones.
func planGGUF(ctx context.Context, d *manifest.Dir, cfg model.Config, layout *model.GGUFLayout, requantize bool, res *GGUFResult) ([]ggufTensor, error) {
	var out []ggufTensor
	var refused, keys []string
	floats := map[string][]string{} // tensors written as floats, by why
	for _, name := range cfg.ExpectedTensors() {
		t, ok := d.Manifest.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("tensor %s is missing from the manifest", name)
		}
		gname := layout.Names[name]
		f, err := quantize.ParseFormat(t.Format)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		shape := slices.Clone(t.Shape)
		dims := slices.Clone(shape)
		slices.Reverse(dims)
		info := gguf.TensorInfo{Name: gname, Dims: dims}
		var order []int
		if len(shape) == 2 {
			order = layout.RowOrder(name, int(shape[0]))
		}
		if !f.Quantized() {
			info.Type = map[quantize.Format]gguf.GGMLType{quantize.F32: gguf.F32, quantize.F16: gguf.F16, quantize.BF16: gguf.BF16}[f]
			plusOne := layout.NormPlusOne && cfg.TensorRole(name) == model.RoleNorm
			out = append(out, ggufTensor{info: info, data: func() ([]byte, error) { return floatData(d, name, info.Type, order, plusOne) }})
			continue
		}
		q, err := d.Weight(name)
		if err != nil {
			return nil, err
		}
		typ, exact, why := ggufFit(q)
		switch {
		case exact:
		case typ.format == "":
			// Rows that are not whole blocks: floats hold the weights.
			info.Type = gguf.F32
			if f16Exact(q) {
				info.Type = gguf.F16
			}
			key := fmt.Sprintf("rows of %d weights are not whole blocks of %s: written as %s holding the dequantized weights exactly", q.Cols, why, info.Type)
			if floats[key] == nil {
				keys = append(keys, key)
			}
			floats[key] = append(floats[key], name)
			out = append(out, ggufTensor{info: info, data: func() ([]byte, error) { return dequantizedData(q, info.Type, order) }})
			continue
		case !requantize:
			refused = append(refused, fmt.Sprintf("%s (%s: %s)", name, t.Format, why))
			continue
		default:
			res.Requantized = append(res.Requantized, name)
		}
		info.Type = typ.typ
		out = append(out, ggufTensor{info: info, data: func() ([]byte, error) {
			r, err := requantizeTo(ctx, q, typ, exact)
			if err != nil {
				return nil, err
			}
			return typ.pack(r, order)
		}})
	}
	for _, k := range keys {
		res.Notes = append(res.Notes, fmt.Sprintf("%s (%s)", listSome(floats[k]), k))
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("%w: %s; give --requantize to write them in the closest type and validate again", ErrNoExactType, listSome(refused))
	}
	for _, t := range layout.Extra {
		out = append(out, ggufTensor{info: gguf.TensorInfo{Name: t.Name, Dims: t.Dims, Type: t.Type}, data: func() ([]byte, error) { return t.Data, nil }})
	}
	return out, nil
}

// ggufFit says how a quantized tensor goes into GGUF: exactly in its
// type; or, exact false, in typ after requantizing (why says what does
// not fit and names typ); or, typ zero, in no block type at all because
// its rows are not whole blocks (why names the type).
func ggufFit(q *quantize.Tensor) (typ ggufType, exact bool, why string) {
	t, ok := ggufTypeOf(q.Format)
	if !ok {
		closest, name := ggufClosest(q.Format)
		if q.Cols%int(closest.typ.BlockSize()) != 0 {
			return ggufType{}, false, closest.typ.String()
		}
		return closest, false, fmt.Sprintf("no ggml type holds %s codes; the closest is %s", q.Format, name)
	}
	if block := int(t.typ.BlockSize()); q.Cols%block != 0 {
		return ggufType{}, false, fmt.Sprintf("%s of %d", t.typ, block)
	}
	if t.group > 0 && q.GroupSize != t.group {
		return t, false, fmt.Sprintf("%s holds groups of %d, this tensor has groups of %d; the closest is %s at group %d", t.typ, t.group, q.GroupSize, t.typ, t.group)
	}
	if q.Format == quantize.TQ2 {
		if s := half.FromFloat32(q.Scale); s.Float32() != q.Scale {
			return t, false, fmt.Sprintf("TQ2_0 holds an f16 scale, this tensor's %v is not one; the closest is TQ2_0 at %v", q.Scale, s.Float32())
		}
	}
	return t, true, ""
}

// requantizeTo is q in the format and group of typ: q itself when it fits
// exactly, else its dequantized weights quantized again (tq2 keeps its
// codes and rounds its scale to an f16).
func requantizeTo(ctx context.Context, q *quantize.Tensor, typ ggufType, exact bool) (*quantize.Tensor, error) {
	if exact {
		return q, nil
	}
	if q.Format == quantize.TQ2 && typ.format == quantize.TQ2 {
		r := *q
		r.Scale = half.FromFloat32(q.Scale).Float32()
		return &r, nil
	}
	return quantize.Quantize(ctx, typ.format, q.Dequantize(), q.Rows, q.Cols, quantize.Options{GroupSize: typ.group, Search: true})
}

// f16Exact says whether every dequantized weight of q is an f16.
func f16Exact(q *quantize.Tensor) bool {
	row := make([]float32, q.Cols)
	for r := range q.Rows {
		q.DequantizeRow(r, row)
		for _, v := range row {
			if half.FromFloat32(v).Float32() != v {
				return false
			}
		}
	}
	return true
}

// dequantizedData is q's weights as F32 or F16 (which f16Exact allowed), rows in order.
func dequantizedData(q *quantize.Tensor, typ gguf.GGMLType, order []int) ([]byte, error) {
	w := q.Dequantize()
	return floatBytes(w, q.Rows, q.Cols, typ, order)
}

// floatData is a float tensor of the directory in typ, rows in order, gains
// as 1 + w where plusOne.
func floatData(d *manifest.Dir, name string, typ gguf.GGMLType, order []int, plusOne bool) ([]byte, error) {
	w, shape, err := d.Float32(name)
	if err != nil {
		return nil, err
	}
	if plusOne {
		if typ != gguf.F32 {
			return nil, fmt.Errorf("gains of %s stored as 1 + w need F32", typ)
		}
		for i, v := range w {
			w[i] = 1 + v
		}
	}
	cols := int(shape[len(shape)-1])
	return floatBytes(w, len(w)/max(cols, 1), cols, typ, order)
}

// floatBytes encodes a [rows, cols] matrix as F32, F16 or BF16, rows in order.
func floatBytes(w []float32, rows, cols int, typ gguf.GGMLType, order []int) ([]byte, error) {
	if order != nil {
		p := make([]float32, 0, len(w))
		for _, r := range order {
			p = append(p, w[r*cols:(r+1)*cols]...)
		}
		w = p
	}
	dt := safetensors.DType(typ.String())
	return safetensors.FromFloat32(dt, w)
}

// rowsOf is the file's rows: order, or every row in turn.
func rowsOf(t *quantize.Tensor, order []int) []int {
	if order != nil {
		return order
	}
	rows := make([]int, t.Rows)
	for i := range rows {
		rows[i] = i
	}
	return rows
}

// packQ8_0 writes q8 at group 32 as Q8_0 blocks: the f16 scale, then the
// 32 int8 codes (w = d*q in both).
func packQ8_0(t *quantize.Tensor, order []int) ([]byte, error) {
	ng, rb := t.Groups(), t.RowBytes()
	out := make([]byte, 0, t.Rows*ng*34)
	for _, r := range rowsOf(t, order) {
		for g := range ng {
			out = binary.LittleEndian.AppendUint16(out, uint16(t.Scales[r*ng+g]))
			out = append(out, t.Data[r*rb+g*32:r*rb+g*32+32]...)
		}
	}
	return out, nil
}

// packQ4_1 writes q4 at group 32 as Q4_1 blocks: the f16 scale and
// minimum, then the 16 bytes of nibbles (byte j: weight j low, j+16 high,
// w = d*q + m in both).
func packQ4_1(t *quantize.Tensor, order []int) ([]byte, error) {
	ng, rb := t.Groups(), t.RowBytes()
	out := make([]byte, 0, t.Rows*ng*20)
	for _, r := range rowsOf(t, order) {
		for g := range ng {
			out = binary.LittleEndian.AppendUint16(out, uint16(t.Scales[r*ng+g]))
			out = binary.LittleEndian.AppendUint16(out, uint16(t.Mins[r*ng+g]))
			out = append(out, t.Data[r*rb+g*16:r*rb+g*16+16]...)
		}
	}
	return out, nil
}

// packQ1_0 writes q1 at group 128 as Q1_0 blocks: the f16 scale, then 16
// bytes of signs, bit i%8 of byte i/8 being weight i (1: +d), which are
// q1's four little-endian 32-bit words of a group.
func packQ1_0(t *quantize.Tensor, order []int) ([]byte, error) {
	ng, rb := t.Groups(), t.RowBytes()
	out := make([]byte, 0, t.Rows*ng*18)
	for _, r := range rowsOf(t, order) {
		for g := range ng {
			out = binary.LittleEndian.AppendUint16(out, uint16(t.Scales[r*ng+g]))
			out = append(out, t.Data[r*rb+g*16:r*rb+g*16+16]...)
		}
	}
	return out, nil
}

// packTQ2_0 writes tq2 as TQ2_0 blocks of 256 weights: 64 bytes of 2-bit
// codes t+1 (byte 32c+m holds, in bits 2l, weight 128c + 32l + m), then the
// tensor's scale as the block's f16 scale, which it must be exactly.
func packTQ2_0(t *quantize.Tensor, order []int) ([]byte, error) {
	d := half.FromFloat32(t.Scale)
	if d.Float32() != t.Scale || math.IsInf(float64(d.Float32()), 0) {
		return nil, fmt.Errorf("tq2 scale %v is not an f16", t.Scale)
	}
	nb := t.Cols / 256
	out := make([]byte, 0, t.Rows*nb*66)
	for _, r := range rowsOf(t, order) {
		codes := t.RowCodes(r)
		for b := range nb {
			var qs [64]byte
			for w := range 256 {
				c, l, m := w/128, w%128/32, w%32
				qs[32*c+m] |= byte(codes[256*b+w]+1) << (2 * l)
			}
			out = append(out, qs[:]...)
			out = binary.LittleEndian.AppendUint16(out, uint16(d))
		}
	}
	return out, nil
}

// ggufGeneral is the general.* keys and lowbit's own (the manifest's
// provenance: Manifest.GGUFMetadata).
func ggufGeneral(m *manifest.Manifest, layout *model.GGUFLayout, res *GGUFResult, version string) ([]gguf.KV, error) {
	k := exportKVs{}
	k.add("general.architecture", layout.Arch)
	k.add("general.type", "model")
	name := m.Source.RepoID
	if name == "" {
		name = filepath.Base(m.Source.Dir)
	}
	k.add("general.name", path.Base(name))
	if t, ok := ggufTypeOf(quantize.Format(m.Quantization.Format)); ok {
		k.add("general.file_type", t.fileType)
	} else if ft, ok := map[string]uint32{"f32": 0, "f16": 1, "bf16": 32}[m.Quantization.Format]; ok {
		k.add("general.file_type", ft)
	}
	k.add("general.quantization_version", uint32(2))
	k.add("general.quantized_by", "lowbit")
	if k.err != nil {
		return nil, k.err
	}
	own, err := m.GGUFMetadata(version, res.Requantized)
	if err != nil {
		return nil, err
	}
	return append(k.list, own...), nil
}

// exportKVs collects metadata, keeping the first error.
type exportKVs struct {
	list []gguf.KV
	err  error
}

func (k *exportKVs) add(key string, v any) {
	val, err := gguf.ValueOf(v)
	if err != nil {
		if k.err == nil {
			k.err = fmt.Errorf("gguf key %s: %w", key, err)
		}
		return
	}
	k.list = append(k.list, gguf.KV{Key: key, Value: val})
}

// ggufGroups are the groups GGUF's types hold: Q8_0 and Q4_1 blocks of
// 32, Q1_0 of 128.
func ggufGroup(f quantize.Format) int {
	if t, ok := ggufTypeOf(f); ok {
		return t.group
	}
	return 0
}

// runGGUF converts for llama.cpp: the model is quantized with the groups
// GGUF's types hold (the 8-bit tables in groups of 32 rather than lowbit's
// 128, q1 in groups of 128, tq2's scale an f16), written as a lowbit
// directory in a hidden temporary directory beside the GGUF file,
// validated there, exported (ExportGGUF, its validation figures under
// lowbit.validation) and removed. A GGUF file, one file, is what
// llama.cpp and Ollama take; lowbit run reads it too.
func runGGUF(ctx context.Context, opts Options) (*Result, error) {
	bits := opts.Bits
	if bits == "" {
		bits = "4"
	}
	linear, err := quantize.ParseFormat(bits)
	if err != nil {
		return nil, fmt.Errorf("--bits: %w", err)
	}
	var notes []string
	for _, f := range []struct {
		flag string
		v    string
	}{{"--bits", bits}, {"--embedding-bits", opts.EmbeddingBits}, {"--output-bits", opts.OutputBits}} {
		if f.v == "" {
			continue
		}
		ff, err := quantize.ParseFormat(f.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
		if _, ok := ggufTypeOf(ff); ff.Quantized() && !ok {
			_, closest := ggufClosest(ff)
			return nil, fmt.Errorf("%s %s: no GGUF type holds %s exactly (the closest is %s): convert to a lowbit directory and export it with --requantize, or choose 8, 4, 1 or ternary", f.flag, f.v, ff, closest)
		}
	}
	if g := ggufGroup(linear); g > 0 {
		switch opts.GroupSize {
		case 0:
			if g != linear.DefaultGroupSize() {
				opts.GroupSize = g
				notes = append(notes, fmt.Sprintf("%s weights in groups of %d, the block of GGUF's %s", linear, g, func() string { t, _ := ggufTypeOf(linear); return t.typ.String() }()))
			}
		case g:
		default:
			return nil, fmt.Errorf("--group-size %d: GGUF's type for %s holds groups of %d", opts.GroupSize, linear, g)
		}
	}
	if opts.TableGroupSize == 0 {
		opts.TableGroupSize = 32
		notes = append(notes, "embeddings and head in groups of 32, the block of GGUF's Q8_0 and Q4_1 (lowbit's own default for them is 128)")
	} else if opts.TableGroupSize != 32 {
		return nil, fmt.Errorf("--table-group-size %d: GGUF's Q8_0 and Q4_1 hold groups of 32", opts.TableGroupSize)
	}
	out := opts.Out
	if out == "" {
		name, err := sourceName(opts.Source)
		if err != nil {
			return nil, err
		}
		out = name + "-" + string(linear) + ".gguf"
	}
	out = filepath.Clean(out)
	if !strings.HasSuffix(strings.ToLower(out), ".gguf") {
		return nil, fmt.Errorf("--out %s: with --format gguf the output is a file whose name ends in .gguf", out)
	}
	if _, err := os.Lstat(out); err == nil && !opts.Force {
		return nil, fmt.Errorf("output %s already exists (use --force to replace it)", out)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".lowbit-")
	if err != nil {
		return nil, fmt.Errorf("create a temporary directory for the lowbit model: %w", err)
	}
	defer os.RemoveAll(tmp)
	inner := opts
	inner.GGUF, inner.Force, inner.NPZ, inner.forGGUF = false, false, false, true
	inner.Out = filepath.Join(tmp, "model")
	res, err := Run(ctx, inner)
	failed := errors.Is(err, ErrValidation)
	if err != nil && !failed {
		return nil, err
	}
	g, gerr := ExportGGUF(ctx, inner.Out, GGUFOptions{Out: out, Force: opts.Force, Progress: opts.Progress, Version: opts.Version})
	if gerr != nil {
		return nil, gerr
	}
	res.OutDir, res.GGUF = out, g
	res.Notes = append(res.Notes, notes...)
	if v := res.Validation; v != nil && v.ModelDir != "" {
		v.ModelDir = out // the lowbit model it checked holds the file's values
	}
	if failed {
		return res, fmt.Errorf("%s: %w (the file is kept; lowbit.validation says so)", out, ErrValidation)
	}
	return res, nil
}

// sourceName is the name a conversion of src is called by without fetching
// it: the alias, the repo's base name, or the directory's.
func sourceName(src string) (string, error) {
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		abs, err := filepath.Abs(src)
		if err != nil {
			return "", fmt.Errorf("source %s: %w", src, err)
		}
		return filepath.Base(abs), nil
	}
	if e, ok := Lookup(src); ok {
		return e.Alias, nil
	}
	return path.Base(src), nil
}

// GGUFDescription is what lowbit show says of a GGUF file.
type GGUFDescription struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Version uint32 `json:"gguf_version"`
	// Arch and Name are general.architecture and general.name.
	Arch string `json:"architecture"`
	Name string `json:"name,omitempty"`
	// Config is the configuration lowbit reads (nil with ConfigError when
	// lowbit cannot run the file).
	Config      *model.Config `json:"config,omitempty"`
	ConfigError string        `json:"config_error,omitempty"`
	Tensors     int           `json:"tensors"`
	// Types counts the tensors of each ggml type.
	Types         map[string]int `json:"types"`
	Parameters    int64          `json:"parameters"`
	BitsPerWeight float64        `json:"bits_per_weight"`
	// Tokenizer is tokenizer.ggml.model, with its token count.
	Tokenizer    string `json:"tokenizer,omitempty"`
	Tokens       int    `json:"tokens,omitempty"`
	ChatTemplate bool   `json:"chat_template"`
	Keys         int    `json:"metadata_keys"`
	// Lowbit is the provenance of a file lowbit exported.
	Lowbit *manifest.Provenance `json:"lowbit,omitempty"`
}

// DescribeGGUF reads a GGUF file's metadata and tensor directory (not its
// data): architecture, the configuration lowbit reads, the tensors' types
// and size, the tokenizer, and lowbit's provenance where it has one.
func DescribeGGUF(p string) (*GGUFDescription, error) {
	f, err := gguf.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &GGUFDescription{Path: p, Size: f.Size(), Version: f.Version(), Types: map[string]int{}, Keys: len(f.Keys())}
	if d.Arch, err = f.String("general.architecture"); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	d.Name, _ = f.String("general.name")
	if c, err := model.GGUFConfig(f); err != nil {
		d.ConfigError = err.Error()
	} else {
		d.Config = &c
	}
	var bits float64
	for _, t := range f.Tensors() {
		d.Tensors++
		d.Types[t.Type.String()]++
		d.Parameters += t.Elements()
		bits += float64(t.Size) * 8
	}
	if d.Parameters > 0 {
		d.BitsPerWeight = bits / float64(d.Parameters)
	}
	d.Tokenizer, _ = f.String("tokenizer.ggml.model")
	if v, ok := f.Value("tokenizer.ggml.tokens"); ok {
		d.Tokens = v.Len()
	}
	_, d.ChatTemplate = f.Value("tokenizer.chat_template")
	prov, ok, err := manifest.ReadProvenance(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if ok {
		d.Lowbit = prov
	}
	return d, nil
}
