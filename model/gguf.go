package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"lowbit/gguf"
	"lowbit/half"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// This file loads a GGUF file (llama.cpp's single-file format) as a Model,
// so that lowbit can run and measure the quants people already use. The
// configuration comes from the file's metadata as llama.cpp reads it
// (ggufarch.go names the families and their keys), the tensors are renamed
// to HF's names and brought back to HF's layout, and each ggml type becomes
// the lowbit format that holds the same values exactly: F32, F16 and BF16
// become float32; Q8_0, Q4_0 and Q4_1 are repacked, not requantized, as q8
// and q4 in groups of 32, and TQ2_0 as tq2 where its blocks share one
// scale; Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are lowbit's block
// formats of the same layouts (q5_0 ... q6k), their bytes copied as they
// are. Other ggml types are refused for now.

// ggufGroup is the block of ggml's Q8_0, Q4_0 and Q4_1: 32 weights share a
// scale (and a minimum), as in lowbit's q8 and q4 at group 32.
const ggufGroup = 32

// loadGGUF reads a GGUF file of an architecture ggufConfig knows.
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

// ggufRopeTensors are the tensors of rope factors, which ggufConfig reads
// into the configuration.
var ggufRopeTensors = []string{"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}

// fromGGUF builds the model a parsed GGUF file holds.
func fromGGUF(ctx context.Context, f *gguf.File) (*Model, error) {
	cfg, err := ggufConfig(f)
	if err != nil {
		return nil, err
	}
	fam, _ := ggufFamilyNamed(cfg.GGUFArch())
	names := ggufNames(cfg)
	for _, ti := range f.Tensors() {
		if _, ok := names[ti.Name]; !ok && !slices.Contains(ggufRopeTensors, ti.Name) {
			return nil, fmt.Errorf("gguf tensor %s is not a tensor of a %s model that lowbit reads", ti.Name, fam.name)
		}
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
		if cfg.TensorRole(name) == RoleNorm && w.Q != nil {
			return nil, fmt.Errorf("gguf tensor %s: a norm must be F32, F16 or BF16, is %s", gname, ti.Type)
		}
		switch {
		case !fam.permuteQK:
			// The other families rotate q and k in HF's layout (llama.cpp's
			// NEOX rope).
		case strings.HasSuffix(name, "self_attn.q_proj.weight"):
			w = w.gather(unpermuteRows(rows, cfg.NumHeads))
		case strings.HasSuffix(name, "self_attn.k_proj.weight"):
			w = w.gather(unpermuteRows(rows, cfg.NumKVHeads))
		}
		weights[name] = w
	}
	return New(cfg, weights)
}

// GGUFArch is llama.cpp's name of the configuration's architecture
// (general.architecture: llama for Mistral), or Arch where llama.cpp has
// no architecture that computes it alike.
func (c Config) GGUFArch() string {
	if f, err := ggufFamilyOf(c); err == nil {
		return f.name
	}
	return c.Arch
}

// GGUFConfig reads the configuration of a GGUF file's metadata as Load
// reads it, without reading the tensors' data.
func GGUFConfig(f *gguf.File) (Config, error) {
	c, err := ggufConfig(f)
	if err != nil {
		return Config{}, fmt.Errorf("model: %w", err)
	}
	return c, nil
}

// ggufConfig reads the configuration from the metadata of a GGUF file of
// one of the families ggufFamilies lists, with llama.cpp's defaults and
// the conventions its architectures fix (Gemma's attention scale and
// window pattern, SmolLM3's layers without rotation). Gemma's gains are
// stored as 1 + w, so the configuration read adds nothing to them. Errors
// name the key at fault.
func ggufConfig(f *gguf.File) (Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, err
	}
	fam, ok := ggufFamilyNamed(arch)
	if !ok {
		var known []string
		for _, g := range ggufFamilies() {
			known = append(known, g.name)
		}
		return Config{}, fmt.Errorf("gguf key general.architecture = %q: only %s are supported yet", arch, strings.Join(known, ", "))
	}
	c := Config{Arch: fam.arch, HFArchitecture: fam.hf, Activation: fam.act, QKVBias: fam.qkvBias, QKNorm: fam.qkNorm,
		SandwichNorms: fam.sandwich, EmbedScale: fam.normPlusOne}
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
	if n, err := ggufInt(f, arch+".attention.value_length", c.HeadDim); err != nil {
		return Config{}, err
	} else if n != c.HeadDim {
		return Config{}, fmt.Errorf("gguf key %s.attention.value_length = %d differs from the key length %d, which lowbit does not support", arch, n, c.HeadDim)
	}
	rot, err := ggufInt(f, arch+".rope.dimension_count", c.HeadDim)
	if err != nil {
		return Config{}, err
	}
	switch {
	case rot == c.HeadDim:
	case fam.name == "phi3" && rot < c.HeadDim:
		c.RotaryDim = rot // a partial rotation
	default:
		return Config{}, fmt.Errorf("gguf key %s.rope.dimension_count = %d differs from the head size %d, which lowbit does not support for %s", arch, rot, c.HeadDim, arch)
	}
	if c.RMSNormEps, err = ggufFloat(f, arch+".attention.layer_norm_rms_epsilon", -1); err != nil {
		return Config{}, err
	}
	if c.RopeTheta, err = ggufFloat(f, arch+".rope.freq_base", 10000); err != nil {
		return Config{}, err
	}
	if c.RopeScaling, err = ggufRopeScaling(f, arch, c); err != nil {
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
	c.TieEmbeddings = !hasHead || fam.tiedOnly
	if err := ggufFamilyConfig(f, fam, &c); err != nil {
		return Config{}, err
	}
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

// ggufFamilyConfig reads what a family has of its own, with llama.cpp's
// defaults: Gemma 2's soft-caps and alternating windows, Gemma 3's window
// pattern and local rotation base, Gemma's attention scale (fixed by the
// shape), SmolLM3's layers without rotation.
func ggufFamilyConfig(f *gguf.File, fam ggufFamily, c *Config) error {
	arch := fam.name
	var err error
	switch arch {
	case "gemma2", "gemma3":
		c.QueryPreAttnScalar = float64(c.HeadDim)
		if c.NumLayers == map[string]int{"gemma2": 46, "gemma3": 62}[arch] {
			c.QueryPreAttnScalar = float64(c.HiddenSize / c.NumHeads) // the 27B models
		}
		window, period := 4096, 2
		if arch == "gemma3" {
			window, period = 0, 6
		}
		if window, err = ggufInt(f, arch+".attention.sliding_window", window); err != nil {
			return err
		}
		if period, err = ggufInt(f, arch+".attention.sliding_window_pattern", period); err != nil {
			return err
		}
		if window > 0 && period != 1 {
			if period == 0 {
				return fmt.Errorf("gguf key %s.attention.sliding_window_pattern is 0", arch)
			}
			c.LayerWindows = make([]int, c.NumLayers)
			for l := range c.LayerWindows {
				if (l+1)%period != 0 {
					c.LayerWindows[l] = window
				}
			}
		}
		softCap := 30.0
		if arch == "gemma3" {
			softCap = 0
		}
		if c.FinalSoftCap, err = ggufFloat(f, arch+".final_logit_softcapping", softCap); err != nil {
			return err
		}
		if arch == "gemma2" {
			if c.AttnSoftCap, err = ggufFloat(f, arch+".attn_logit_softcapping", 50); err != nil {
				return err
			}
		} else if window > 0 {
			if c.LocalRopeTheta, err = ggufFloat(f, arch+".rope.freq_base_swa", 10000); err != nil {
				return err
			}
		}
	case "smollm3":
		for l := ggufNoRopeStep - 1; l < c.NumLayers; l += ggufNoRopeStep {
			c.NoRopeLayers = append(c.NoRopeLayers, l)
		}
	}
	return nil
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

// ggufRopeScaling reads the rope scaling as llama.cpp does:
// <arch>.rope.scaling.type (linear when only a factor is given), its
// factor and YaRN's parameters, and the tensors of factors: rope_freqs
// (each pair's frequency divided by its factor, as Llama 3.1's scaling is
// written) and Phi-3's rope_factors_short and _long (longrope).
func ggufRopeScaling(f *gguf.File, arch string, c Config) (*RopeScaling, error) {
	typ, err := f.String(arch + ".rope.scaling.type")
	if errors.Is(err, gguf.ErrNoKey) {
		typ = "linear"
	} else if err != nil {
		return nil, err
	}
	factor, err := ggufFloat(f, arch+".rope.scaling.factor", 0)
	if err != nil {
		return nil, err
	}
	orig, err := ggufInt(f, arch+".rope.scaling.original_context_length", c.MaxPositions)
	if err != nil {
		return nil, err
	}
	freqs, err := ggufFactors(f, "rope_freqs.weight", c)
	if err != nil {
		return nil, err
	}
	long, err := ggufFactors(f, "rope_factors_long.weight", c)
	if err != nil {
		return nil, err
	}
	short, err := ggufFactors(f, "rope_factors_short.weight", c)
	if err != nil {
		return nil, err
	}
	switch {
	case freqs != nil && (long != nil || short != nil):
		return nil, errors.New("gguf tensors rope_freqs.weight and rope_factors_*.weight are both present")
	case (long == nil) != (short == nil):
		return nil, errors.New("gguf tensors rope_factors_long.weight and rope_factors_short.weight come together")
	case long != nil:
		attn, err := ggufFloat(f, arch+".rope.scaling.attn_factor", 0)
		if err != nil {
			return nil, err
		}
		return &RopeScaling{Type: "longrope", Factor: float64(c.MaxPositions) / float64(orig), OriginalMaxPositionEmbeddings: orig,
			ShortFactor: short, LongFactor: long, AttentionFactor: attn}, nil
	case freqs != nil:
		if typ != "linear" || factor != 0 && factor != 1 {
			return nil, fmt.Errorf("gguf tensor rope_freqs.weight with %s rope scaling of factor %v is not supported", typ, factor)
		}
		return &RopeScaling{Type: "factors", Factor: 1, ShortFactor: freqs}, nil
	}
	switch typ {
	case "none":
		return nil, nil
	case "linear":
		if factor == 0 || factor == 1 {
			return nil, nil
		}
		return &RopeScaling{Type: "linear", Factor: factor}, nil
	case "yarn":
		if !(factor > 0) {
			return nil, fmt.Errorf("gguf key %s.rope.scaling.factor is %v: yarn scaling needs a positive factor", arch, factor)
		}
		s := &RopeScaling{Type: "yarn", Factor: factor, OriginalMaxPositionEmbeddings: orig}
		for _, k := range []struct {
			key string
			dst *float64
		}{{"yarn_beta_fast", &s.BetaFast}, {"yarn_beta_slow", &s.BetaSlow}, {"yarn_attn_factor", &s.AttentionFactor}} {
			if *k.dst, err = ggufFloat(f, arch+".rope.scaling."+k.key, 0); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	return nil, fmt.Errorf("gguf key %s.rope.scaling.type = %q: this rope scaling is not supported yet", arch, typ)
}

// ggufFactors reads a tensor of rope factors, one F32 per rotated pair
// (nil when the file has none).
func ggufFactors(f *gguf.File, name string, c Config) ([]float64, error) {
	ti, ok := f.Info(name)
	if !ok {
		return nil, nil
	}
	half := c.HeadDim / 2
	if c.RotaryDim > 0 {
		half = c.RotaryDim / 2
	}
	if ti.Type != gguf.F32 || len(ti.Dims) != 1 || ti.Dims[0] != int64(half) {
		return nil, fmt.Errorf("gguf tensor %s is %s %v, want F32 [%d] (a factor per rotated pair)", name, ti.Type, ti.Dims, half)
	}
	b, err := f.TensorData(name)
	if err != nil {
		return nil, err
	}
	out := make([]float64, half)
	for i := range out {
		x := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		if !(x > 0) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("gguf tensor %s: factor %v of pair %d is not a positive number", name, x, i)
		}
		out[i] = float64(x)
	}
	return out, nil
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
	case gguf.Q1_0:
		q, err := ggufQ1(b, rows, cols)
		if err != nil {
			return nil, err
		}
		return QuantWeight(q), nil
	case gguf.TQ2_0:
		q, err := ggufTQ2(b, rows, cols)
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
	return nil, fmt.Errorf("ggml type %s is not supported yet (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q1_0, TQ2_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are)", ti.Type)
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

// ggufBlockCount checks that b is rows of whole blocks of t and returns the
// block count.
func ggufBlockCount(t gguf.GGMLType, b []byte, rows, cols int) (int, error) {
	bs := int(t.BlockSize())
	if cols%bs != 0 {
		return 0, fmt.Errorf("rows of %d weights are not whole %s blocks of %d", cols, t, bs)
	}
	nb := rows * cols / bs
	if want := int64(nb) * t.TypeSize(); int64(len(b)) != want {
		return 0, fmt.Errorf("%d bytes of %s, want %d for [%d, %d]", len(b), t, want, rows, cols)
	}
	return nb, nil
}

// ggufQ1 repacks Q1_0 blocks (f16 d, 16 bytes of signs: bit i%8 of byte
// i/8 is weight i, 1 for +d) as q1 at group 128, whose four little-endian
// 32-bit words of signs are the same bytes.
func ggufQ1(b []byte, rows, cols int) (*quantize.Tensor, error) {
	nb, err := ggufBlockCount(gguf.Q1_0, b, rows, cols)
	if err != nil {
		return nil, err
	}
	q := &quantize.Tensor{Format: quantize.Q1, Rows: rows, Cols: cols, GroupSize: 128, Scales: make([]half.Float16, nb), Data: make([]byte, 0, nb*16)}
	for i := range nb {
		blk := b[i*18 : (i+1)*18]
		d := half.Float16(binary.LittleEndian.Uint16(blk))
		if !finite(d) {
			return nil, fmt.Errorf("block %d (row %d) has the scale %v", i, i*128/cols, d.Float32())
		}
		q.Scales[i] = d
		q.Data = append(q.Data, blk[2:]...)
	}
	return q, q.Validate()
}

// ggufTQ2 repacks TQ2_0 blocks (64 bytes of 2-bit codes t+1, byte 32c+m
// holding weight 128c + 32l + m in bits 2l, then an f16 scale) as tq2,
// whose one scale per tensor must then be every block's. tq2's layout
// (ARCHITECTURE.md): per 32 weights 8 bytes, byte j holding weights j,
// j+8, j+16, j+24 in bits 0-1 .. 6-7.
func ggufTQ2(b []byte, rows, cols int) (*quantize.Tensor, error) {
	nb, err := ggufBlockCount(gguf.TQ2_0, b, rows, cols)
	if err != nil {
		return nil, err
	}
	q := &quantize.Tensor{Format: quantize.TQ2, Rows: rows, Cols: cols, Data: make([]byte, rows*cols/4)}
	var d half.Float16
	for i := range nb {
		blk := b[i*66 : (i+1)*66]
		bd := half.Float16(binary.LittleEndian.Uint16(blk[64:]))
		if i == 0 {
			d = bd
		}
		if bd != d {
			return nil, fmt.Errorf("block %d (row %d) has the scale %v, block 0 %v: lowbit's tq2 has one scale per tensor", i, i*256/cols, bd.Float32(), d.Float32())
		}
		dst := q.Data[i*64 : (i+1)*64]
		for w := range 256 {
			c, l, m := w/128, w%128/32, w%32
			code := blk[32*c+m] >> (2 * l) & 3
			if code == 3 {
				return nil, fmt.Errorf("block %d (row %d) has the code 3, which is no ternary value", i, i*256/cols)
			}
			k, shift := w/32*8+w%8, 2*(w%32/8)
			dst[k] |= code << shift
		}
	}
	q.Scale = d.Float32()
	if !(q.Scale > 0) || !finite(d) {
		return nil, fmt.Errorf("the scale %v is not a positive number", q.Scale)
	}
	return q, q.Validate()
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
