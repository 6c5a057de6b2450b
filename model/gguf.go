package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"lowbit/gguf"
	"lowbit/half"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// This file loads a GGUF file (llama.cpp's single-file format) as a Model,
// so that lowbit can run and measure the quants people already use. The
// configuration comes from the file's metadata, the tensors are renamed to
// HF's names and brought back to HF's layout, and each ggml type becomes
// the lowbit format that holds the same values exactly: F32, F16 and BF16
// become float32; Q8_0, Q4_0 and Q4_1 are repacked, not requantized, as q8
// and q4 in groups of 32; Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are
// lowbit's block formats of the same layouts (q5_0 ... q6k), their bytes
// copied as they are. Other ggml types are refused for now.

// ggufGroup is the block of ggml's Q8_0, Q4_0 and Q4_1: 32 weights share a
// scale (and a minimum), as in lowbit's q8 and q4 at group 32.
const ggufGroup = 32

// loadGGUF reads a GGUF file of an architecture ggufConfig knows (llama,
// qwen2).
func loadGGUF(ctx context.Context, path string, opts LoadOptions) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer f.Close()
	m, err := fromGGUF(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	if opts.Quantize != "" && opts.Quantize != quantize.F32 {
		// Only the float tensors of the file are quantized; those it
		// stores quantized keep their format.
		if err := m.Quantize(ctx, opts.Quantize, quantize.Options{GroupSize: opts.GroupSize}, opts.Workers); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// fromGGUF builds the model a parsed GGUF file holds.
func fromGGUF(ctx context.Context, f *gguf.File) (*Model, error) {
	cfg, err := ggufConfig(f)
	if err != nil {
		return nil, err
	}
	names := ggufNames(cfg)
	for _, ti := range f.Tensors() {
		if _, ok := names[ti.Name]; ok {
			continue
		}
		if ti.Name == "rope_freqs.weight" {
			return nil, fmt.Errorf("gguf tensor %s (rotary frequency factors, llama3 rope scaling) is not supported yet", ti.Name)
		}
		return nil, fmt.Errorf("gguf tensor %s is not a tensor of a %s model that lowbit reads", ti.Name, cfg.Arch)
	}
	weights := map[string]*Weight{}
	for gname, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ti, ok := f.Info(gname)
		if !ok {
			return nil, fmt.Errorf("gguf tensor %s (%s) is missing", gname, name)
		}
		rows, cols, err := matrixShape(cfg, name, ti.Shape())
		if err != nil {
			return nil, fmt.Errorf("gguf tensor %s: %w", gname, err)
		}
		b, err := f.TensorData(gname)
		if err != nil {
			return nil, err
		}
		w, err := ggufWeight(ti, b, rows, cols)
		if err != nil {
			return nil, fmt.Errorf("gguf tensor %s: %w", gname, err)
		}
		switch {
		case cfg.Arch != "llama":
			// Only llama's q and k are permuted: llama.cpp rotates
			// qwen2's in HF's layout (its NEOX rope).
		case strings.HasSuffix(name, "self_attn.q_proj.weight"):
			w = w.gather(unpermuteRows(rows, cfg.NumHeads))
		case strings.HasSuffix(name, "self_attn.k_proj.weight"):
			w = w.gather(unpermuteRows(rows, cfg.NumKVHeads))
		}
		weights[name] = w
	}
	return New(cfg, weights)
}

// ggufConfig reads the configuration from the metadata of a llama or qwen2
// GGUF file. Errors name the key at fault.
func ggufConfig(f *gguf.File) (Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, err
	}
	var c Config
	switch arch {
	case "llama":
		c = Config{Arch: "llama", HFArchitecture: "LlamaForCausalLM", Activation: "silu"}
	case "qwen2":
		// llama.cpp's qwen2 has no sliding window: neither has the file.
		c = Config{Arch: "qwen2", HFArchitecture: "Qwen2ForCausalLM", Activation: "silu", QKVBias: true}
	default:
		return Config{}, fmt.Errorf("gguf key general.architecture = %q: only llama and qwen2 are supported yet", arch)
	}
	for _, k := range []struct {
		key string
		dst *int
	}{
		{"embedding_length", &c.HiddenSize},
		{"block_count", &c.NumLayers},
		{"feed_forward_length", &c.IntermediateSize},
		{"attention.head_count", &c.NumHeads},
		{"context_length", &c.MaxPositions},
	} {
		if *k.dst, err = ggufInt(f, arch+"."+k.key, -1); err != nil {
			return Config{}, err
		}
	}
	if c.NumKVHeads, err = ggufInt(f, arch+".attention.head_count_kv", c.NumHeads); err != nil {
		return Config{}, err
	}
	if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.HeadDim, err = ggufInt(f, arch+".attention.key_length", c.HeadDim); err != nil {
		return Config{}, err
	}
	for _, k := range []string{".attention.value_length", ".rope.dimension_count"} {
		n, err := ggufInt(f, arch+k, c.HeadDim)
		if err != nil {
			return Config{}, err
		}
		if n != c.HeadDim {
			return Config{}, fmt.Errorf("gguf key %s%s = %d differs from the head size %d, which lowbit does not support for %s", arch, k, n, c.HeadDim, arch)
		}
	}
	if c.RMSNormEps, err = ggufFloat(f, arch+".attention.layer_norm_rms_epsilon", -1); err != nil {
		return Config{}, err
	}
	if c.RopeTheta, err = ggufFloat(f, arch+".rope.freq_base", 10000); err != nil {
		return Config{}, err
	}
	if c.RopeScaling, err = ggufRopeScaling(f, arch); err != nil {
		return Config{}, err
	}
	emb, ok := f.Info("token_embd.weight")
	if !ok {
		return Config{}, errors.New("gguf tensor token_embd.weight (the embedding, whose rows give the vocabulary size) is missing")
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != int64(c.HiddenSize) || emb.Dims[1] <= 0 || emb.Dims[1] > maxVocabSize {
		return Config{}, fmt.Errorf("gguf tensor token_embd.weight has dims %v, want [%d, vocabulary size of at most %d]", emb.Dims, c.HiddenSize, maxVocabSize)
	}
	c.VocabSize = int(emb.Dims[1])
	_, hasHead := f.Info("output.weight")
	c.TieEmbeddings = !hasHead
	if c.BOS, err = ggufInt(f, "tokenizer.ggml.bos_token_id", 1); err != nil {
		return Config{}, err
	}
	eos, err := ggufInt(f, "tokenizer.ggml.eos_token_id", -1)
	if err != nil && !errors.Is(err, gguf.ErrNoKey) {
		return Config{}, err
	}
	if eos >= 0 {
		c.EOS = []int{eos}
	}
	if err := c.Check(); err != nil {
		return Config{}, fmt.Errorf("gguf metadata: %w", err)
	}
	return c, nil
}

// ggufInt reads a non-negative integer key that fits an int. A missing key
// takes def, or is an error where def is negative.
func ggufInt(f *gguf.File, key string, def int) (int, error) {
	n, err := f.Uint(key)
	if errors.Is(err, gguf.ErrNoKey) && def >= 0 {
		return def, nil
	}
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("gguf key %s = %d is too large", key, n)
	}
	return int(n), nil
}

// ggufFloat reads a float key. A float32 is read as the shortest decimal
// that rounds to it (1e-05 rather than 9.99999974738e-06), as config.json
// would have written it, so that a model reads the same from either. A
// missing key takes def, or is an error where def is negative.
func ggufFloat(f *gguf.File, key string, def float64) (float64, error) {
	x, err := f.Float(key)
	if errors.Is(err, gguf.ErrNoKey) && def >= 0 {
		return def, nil
	}
	if err != nil {
		return 0, err
	}
	if v, _ := f.Value(key); v.Type() == gguf.TypeFloat32 {
		x, _ = strconv.ParseFloat(strconv.FormatFloat(x, 'g', -1, 32), 64)
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("gguf key %s = %v is not a finite number", key, x)
	}
	return x, nil
}

// ggufRopeScaling reads <arch>.rope.scaling.type: none, or linear with its
// factor; the others are refused until they are read in full.
func ggufRopeScaling(f *gguf.File, arch string) (*RopeScaling, error) {
	key := arch + ".rope.scaling.type"
	typ, err := f.String(key)
	if errors.Is(err, gguf.ErrNoKey) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	switch typ {
	case "none":
		return nil, nil
	case "linear":
		factor, err := ggufFloat(f, arch+".rope.scaling.factor", -1)
		if err != nil {
			return nil, err
		}
		return &RopeScaling{Type: "linear", Factor: factor}, nil
	}
	return nil, fmt.Errorf("gguf key %s = %q: this rope scaling is not supported yet", key, typ)
}

// ggufNames maps the GGUF tensor names of a configuration to HF's.
func ggufNames(c Config) map[string]string {
	names := map[string]string{
		"token_embd.weight":  "model.embed_tokens.weight",
		"output_norm.weight": "model.norm.weight",
	}
	if !c.TieEmbeddings {
		names["output.weight"] = "lm_head.weight"
	}
	parts := []struct{ gguf, hf string }{
		{"attn_norm", "input_layernorm"},
		{"attn_q", "self_attn.q_proj"},
		{"attn_k", "self_attn.k_proj"},
		{"attn_v", "self_attn.v_proj"},
		{"attn_output", "self_attn.o_proj"},
		{"ffn_norm", "post_attention_layernorm"},
		{"ffn_gate", "mlp.gate_proj"},
		{"ffn_up", "mlp.up_proj"},
		{"ffn_down", "mlp.down_proj"},
	}
	for l := range c.NumLayers {
		for _, p := range parts {
			names[fmt.Sprintf("blk.%d.%s.weight", l, p.gguf)] = fmt.Sprintf("model.layers.%d.%s.weight", l, p.hf)
		}
		if c.QKVBias {
			for _, p := range parts[1:4] {
				names[fmt.Sprintf("blk.%d.%s.bias", l, p.gguf)] = fmt.Sprintf("model.layers.%d.%s.bias", l, p.hf)
			}
		}
	}
	return names
}

// unpermuteRows undoes the permutation llama.cpp's converter applies to the
// rows of q and k of a llama model (LlamaModel.permute), which turns HF's
// rotary layout, each head's first half rotating with its second half,
// into ggml's, adjacent pairs rotating together: row h*d + 2i + j of the
// file is row h*d + j*d/2 + i of HF, d the head size. The result lists,
// for each HF row, the file's row that holds it (for Weight.gather, which
// moves whole rows, so a quantized row keeps its blocks and stays exact).
func unpermuteRows(rows, heads int) []int {
	d := rows / heads
	idx := make([]int, rows)
	for h := range heads {
		for j := range 2 {
			for i := range d / 2 {
				idx[h*d+j*d/2+i] = h*d + 2*i + j
			}
		}
	}
	return idx
}

// ggufWeight converts a tensor's data (ggml's layout: rows of cols
// weights, each row whole blocks) to a Weight of the same values.
func ggufWeight(ti gguf.TensorInfo, b []byte, rows, cols int) (*Weight, error) {
	switch ti.Type {
	case gguf.F32, gguf.F16, gguf.BF16:
		w := make([]float32, rows*cols)
		if err := safetensors.ToFloat32(safetensors.DType(ti.Type.String()), b, w); err != nil {
			return nil, err
		}
		return FloatWeight(rows, cols, w), nil
	case gguf.Q8_0, gguf.Q4_0, gguf.Q4_1:
		q, err := ggufQuant(ti.Type, b, rows, cols)
		if err != nil {
			return nil, err
		}
		return QuantWeight(q), nil
	}
	if f, ok := ggufBlockFormat(ti.Type); ok {
		q, err := ggufBlocks(f, ti.Type, b, rows, cols)
		if err != nil {
			return nil, err
		}
		return QuantWeight(q), nil
	}
	return nil, fmt.Errorf("ggml type %s is not supported yet (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are)", ti.Type)
}

// ggufBlockFormat is the lowbit block format whose bytes are the ggml
// type's blocks.
func ggufBlockFormat(t gguf.GGMLType) (quantize.Format, bool) {
	switch t {
	case gguf.Q5_0:
		return quantize.Q5_0, true
	case gguf.Q5_1:
		return quantize.Q5_1, true
	case gguf.Q2_K:
		return quantize.Q2K, true
	case gguf.Q3_K:
		return quantize.Q3K, true
	case gguf.Q4_K:
		return quantize.Q4K, true
	case gguf.Q5_K:
		return quantize.Q5K, true
	case gguf.Q6_K:
		return quantize.Q6K, true
	}
	return "", false
}

// ggufBlocks takes the blocks of a ggml block type as the lowbit format f
// of the same layout: the bytes are kept as they are (b is the loader's
// own copy), after checking that the rows are whole blocks, that the sizes
// agree, and that no block's fp16 scale or minimum is infinite or NaN.
func ggufBlocks(f quantize.Format, t gguf.GGMLType, b []byte, rows, cols int) (*quantize.Tensor, error) {
	s := f.Spec()
	if int64(s.Block) != t.BlockSize() || int64(s.BlockBytes) != t.TypeSize() {
		return nil, fmt.Errorf("%s blocks are %d bytes of %d weights, lowbit's %s %d of %d", t, t.TypeSize(), t.BlockSize(), f, s.BlockBytes, s.Block)
	}
	if cols%s.Block != 0 {
		return nil, fmt.Errorf("rows of %d weights are not whole %s blocks of %d", cols, t, s.Block)
	}
	if want := int64(rows) * int64(cols/s.Block) * int64(s.BlockBytes); int64(len(b)) != want {
		return nil, fmt.Errorf("%d bytes of %s, want %d for [%d, %d]", len(b), t, want, rows, cols)
	}
	q := &quantize.Tensor{Format: f, Rows: rows, Cols: cols, GroupSize: s.Block, Data: b}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := q.CheckBlocks(); err != nil {
		return nil, err
	}
	return q, nil
}

// ggufQuant repacks Q8_0, Q4_0 or Q4_1 blocks as lowbit's q8 or q4 at
// group 32, keeping every weight's value:
//   - Q8_0 (f16 d, 32 int8 q; w = d*q) is q8: the codes are q8's bytes.
//   - Q4_1 (f16 d, f16 m, 16 bytes of nibbles; w = d*q + m) is q4: byte j
//     holds weight j low and weight j+16 high in both.
//   - Q4_0 (f16 d, 16 bytes of nibbles; w = d*(q-8)) is q4 with the minimum
//     m = -8d, exact in f16 (a power-of-two multiple) unless it overflows,
//     which is refused; d*q - 8d and d*(q-8) are then both exact in float32.
//
// A scale or minimum that is not finite is refused: no lowbit format holds
// it, and no quantizer writes it.
func ggufQuant(t gguf.GGMLType, b []byte, rows, cols int) (*quantize.Tensor, error) {
	if cols%ggufGroup != 0 {
		return nil, fmt.Errorf("rows of %d weights are not whole %s blocks of %d", cols, t, ggufGroup)
	}
	nb := rows * cols / ggufGroup
	if want := int64(nb) * t.TypeSize(); int64(len(b)) != want {
		return nil, fmt.Errorf("%d bytes of %s, want %d for [%d, %d]", len(b), t, want, rows, cols)
	}
	q := &quantize.Tensor{Rows: rows, Cols: cols, GroupSize: ggufGroup, Scales: make([]half.Float16, nb)}
	if t == gguf.Q8_0 {
		q.Format, q.Data = quantize.Q8, make([]byte, 0, rows*cols)
	} else {
		q.Format, q.Data, q.Mins = quantize.Q4, make([]byte, 0, rows*cols/2), make([]half.Float16, nb)
	}
	size := int(t.TypeSize())
	for i := range nb {
		blk := b[i*size : (i+1)*size]
		d := half.Float16(uint16(blk[0]) | uint16(blk[1])<<8)
		if !finite(d) {
			return nil, fmt.Errorf("block %d (row %d) has the scale %v", i, i*ggufGroup/cols, d.Float32())
		}
		q.Scales[i] = d
		switch t {
		case gguf.Q8_0:
			q.Data = append(q.Data, blk[2:]...)
		case gguf.Q4_1:
			m := half.Float16(uint16(blk[2]) | uint16(blk[3])<<8)
			if !finite(m) {
				return nil, fmt.Errorf("block %d (row %d) has the minimum %v", i, i*ggufGroup/cols, m.Float32())
			}
			q.Mins[i] = m
			q.Data = append(q.Data, blk[4:]...)
		case gguf.Q4_0:
			m := -8 * d.Float32()
			h := half.FromFloat32(m)
			if h.Float32() != m {
				return nil, fmt.Errorf("block %d (row %d): the scale %v makes the minimum %v, past f16's range", i, i*ggufGroup/cols, d.Float32(), m)
			}
			q.Mins[i] = h
			q.Data = append(q.Data, blk[2:]...)
		}
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return q, nil
}

// finite says whether an f16 is neither infinite nor NaN.
func finite(h half.Float16) bool { return h&0x7c00 != 0x7c00 }
