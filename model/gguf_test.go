package model

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lowbit/gguf"
	"lowbit/half"
	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/quantize"
)

// ggufKV is one metadata entry for writeGGUF: a string, uint32, int32,
// float32 or bool value.
type ggufKV struct {
	key string
	val any
}

// ggufTensor is one tensor for writeGGUF, its data in ggml's layout.
type ggufTensor struct {
	name string
	dims []uint64
	typ  gguf.GGMLType
	data []byte
}

// writeGGUF writes a GGUF v3 file (alignment 32) in a test's directory and
// returns its path: just enough of a writer to build the files the loader
// must read or refuse.
func writeGGUF(t *testing.T, kvs []ggufKV, tensors []ggufTensor) string {
	t.Helper()
	b, err := ggufBytes(kvs, tensors)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// ggufBytes is the file writeGGUF writes.
func ggufBytes(kvs []ggufKV, tensors []ggufTensor) ([]byte, error) {
	var wkv []gguf.KV
	for _, kv := range kvs {
		v, err := gguf.ValueOf(kv.val)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", kv.key, err)
		}
		wkv = append(wkv, gguf.KV{Key: kv.key, Value: v})
	}
	var wt []gguf.TensorData
	for _, tn := range tensors {
		dims := make([]int64, len(tn.dims))
		for i, d := range tn.dims {
			dims[i] = int64(d)
		}
		wt = append(wt, gguf.TensorData{Name: tn.name, Dims: dims, Type: tn.typ, Data: tn.data})
	}
	return gguf.Marshal(wkv, wt)
}

// allLogits runs tokens through a fresh CPU session and returns the logits
// of every position.
func allLogits(t *testing.T, m *Model, tokens []int) []float32 {
	t.Helper()
	s, err := m.NewSession(SessionOptions{Backend: NewCPU(2)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.ForwardAll(context.Background(), tokens, false)
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits
}

// TestGGUFStories loads llama.cpp's F32 conversion of stories260K: the
// configuration and every weight (q and k brought back to HF's rotary
// layout) equal the HF directory's, and so do the logits.
func TestGGUFStories(t *testing.T) {
	ctx := context.Background()
	g, err := Load(ctx, testmodels.GGUF(t, "stories260K-f32.gguf"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hf, err := Load(ctx, filepath.Dir(testmodels.Path(t, "stories260K-hf/model.safetensors")), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", g.Config) != fmt.Sprintf("%+v", hf.Config) {
		t.Errorf("config\n%+v\nwant the HF directory's\n%+v", g.Config, hf.Config)
	}
	if len(g.Weights) != len(hf.Weights) {
		t.Errorf("%d weights, want %d", len(g.Weights), len(hf.Weights))
	}
	for name, w := range hf.Weights {
		gw := g.Weights[name]
		if gw == nil || gw.Q != nil || gw.Rows != w.Rows || gw.Cols != w.Cols || !slices.Equal(gw.F32, w.F32) {
			t.Errorf("weight %s differs from the HF directory's", name)
		}
	}
	tokens := []int{1, 403, 407, 261, 378, 430, 267, 302, 318, 275, 400, 261, 291, 389, 290, 353}
	got, want := allLogits(t, g, tokens), allLogits(t, hf, tokens)
	if e := relL2(got, want); !(e < 1e-6) {
		t.Errorf("logits differ from the HF directory's by %.3g (relative L2)", e)
	}
}

// TestGGUFK256 loads llama.cpp's F16 file of a random model with an untied
// head and runs it.
func TestGGUFK256(t *testing.T) {
	m, err := Load(context.Background(), testmodels.GGUF(t, "k256-f16.gguf"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.TieEmbeddings || c.HiddenSize != 512 || c.IntermediateSize != 1536 || c.NumKVHeads != 4 || c.VocabSize != 512 {
		t.Errorf("config %+v", c)
	}
	for _, v := range allLogits(t, m, []int{1, 2, 3, 4}) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %v", v)
		}
	}
}

// tinyGGUF describes a one-layer llama for the hand-built files: rows of 64
// and 96 weights, whole blocks of 32.
const (
	tinyHidden, tinyFFN, tinyHeads, tinyKV, tinyVocab = 64, 96, 4, 2, 40
	tinyHeadDim                                       = tinyHidden / tinyHeads
)

// tinyKVs is the metadata of the tiny llama.
func tinyKVs() []ggufKV { return tinyKVsSized(tinyHidden, tinyFFN) }

// tinyKVsSized is the metadata of a tiny llama of hidden size h (4 heads, 2
// of them for k and v) and feed-forward size ffn.
func tinyKVsSized(h, ffn int) []ggufKV {
	return []ggufKV{
		{"general.architecture", "llama"},
		{"llama.embedding_length", uint32(h)},
		{"llama.block_count", uint32(1)},
		{"llama.feed_forward_length", uint32(ffn)},
		{"llama.attention.head_count", uint32(tinyHeads)},
		{"llama.attention.head_count_kv", uint32(tinyKV)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.context_length", uint32(64)},
		{"llama.rope.dimension_count", uint32(h / tinyHeads)},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
	}
}

// tinyShapes lists the tiny llama's GGUF tensors and their ggml dims
// (untied: output.weight is there).
func tinyShapes() []ggufTensor { return tinyShapesSized(tinyHidden, tinyFFN) }

// tinyShapesSized is tinyShapes for the sizes of tinyKVsSized.
func tinyShapesSized(h, ffn int) []ggufTensor {
	hd, f := uint64(h), uint64(ffn)
	kv := uint64(tinyKV * h / tinyHeads)
	return []ggufTensor{
		{name: "token_embd.weight", dims: []uint64{hd, tinyVocab}},
		{name: "output_norm.weight", dims: []uint64{hd}},
		{name: "output.weight", dims: []uint64{hd, tinyVocab}},
		{name: "blk.0.attn_norm.weight", dims: []uint64{hd}},
		{name: "blk.0.attn_q.weight", dims: []uint64{hd, hd}},
		{name: "blk.0.attn_k.weight", dims: []uint64{hd, kv}},
		{name: "blk.0.attn_v.weight", dims: []uint64{hd, kv}},
		{name: "blk.0.attn_output.weight", dims: []uint64{hd, hd}},
		{name: "blk.0.ffn_norm.weight", dims: []uint64{hd}},
		{name: "blk.0.ffn_gate.weight", dims: []uint64{hd, f}},
		{name: "blk.0.ffn_up.weight", dims: []uint64{hd, f}},
		{name: "blk.0.ffn_down.weight", dims: []uint64{f, hd}},
	}
}

// blockHalves are the byte offsets of the fp16 fields (scales, minimums)
// in a block of each ggml block type, from ggml's layouts.
var blockHalves = map[gguf.GGMLType][]int{
	gguf.Q5_0: {0}, gguf.Q5_1: {0, 2}, gguf.Q2_K: {80, 82}, gguf.Q3_K: {108},
	gguf.Q4_K: {0, 2}, gguf.Q5_K: {0, 2}, gguf.Q6_K: {208},
}

// randomBlockBytes makes n blocks of a ggml block type from random bytes
// (every code and sub-block scale) with small random fp16 fields, and
// returns them with their weights as lowbit's reference decodes them
// (quantize's tests hold that decode to the layouts, and the llama.cpp
// test to llama.cpp's own).
func randomBlockBytes(t testing.TB, rng *rand.Rand, typ gguf.GGMLType, n int) ([]byte, []float32) {
	f, ok := ggufBlockFormat(typ)
	if !ok {
		t.Fatalf("%s is no block type", typ)
	}
	s := f.Spec()
	b := make([]byte, n*s.BlockBytes)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	for blk := range n {
		for _, off := range blockHalves[typ] {
			binary.LittleEndian.PutUint16(b[blk*s.BlockBytes+off:], uint16(half.FromFloat32(float32(rng.NormFloat64()*0.01))))
		}
	}
	q := &quantize.Tensor{Format: f, Rows: 1, Cols: n * s.Block, GroupSize: s.Block, Data: b}
	w := make([]float32, q.Cols)
	q.DequantizeRowRef(0, w)
	return b, w
}

// randomBlocks makes n blocks of a ggml type from random codes and scales
// (every code, Q8_0's -128 included) and returns them with the weights
// ggml's block formulas give them.
func randomBlocks(rng *rand.Rand, typ gguf.GGMLType, n int) ([]byte, []float32) {
	f16 := func() half.Float16 { return half.FromFloat32(float32(rng.NormFloat64() * 0.01)) }
	var b []byte
	var w []float32
	for range n {
		d := f16()
		b = binary.LittleEndian.AppendUint16(b, uint16(d))
		switch typ {
		case gguf.Q8_0:
			for range 32 {
				q := int8(rng.IntN(256) - 128)
				b = append(b, byte(q))
				w = append(w, float32(q)*d.Float32())
			}
		case gguf.Q4_0, gguf.Q4_1:
			var m half.Float16
			if typ == gguf.Q4_1 {
				m = f16()
				b = binary.LittleEndian.AppendUint16(b, uint16(m))
			}
			qs := make([]byte, 16)
			for j := range qs {
				qs[j] = byte(rng.IntN(256))
			}
			b = append(b, qs...)
			for j := range 32 {
				x := qs[j%16] & 15
				if j >= 16 {
					x = qs[j%16] >> 4
				}
				if typ == gguf.Q4_0 {
					w = append(w, float32(int(x)-8)*d.Float32())
				} else {
					w = append(w, float32(x)*d.Float32()+m.Float32())
				}
			}
		}
	}
	return b, w
}

// TestGGUFQuantTypes builds a tiny llama whose matrices are Q8_0, Q4_0 or
// Q4_1 blocks of random codes and scales, and checks that each loaded
// weight (repacked as q8 or q4) dequantizes to exactly the values of
// ggml's block formulas, q and k with their rows back in HF's order, and
// that the model computes what a float model of those values does.
//
// The block types (Q5_0 ... Q6_K) keep their bytes: the tiny llama is then
// one of 256 and 512 columns, whole K-quant super-blocks.
func TestGGUFQuantTypes(t *testing.T) {
	for _, typ := range []gguf.GGMLType{gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(typ), 1))
			bf, isBlock := ggufBlockFormat(typ)
			hidden, ffn := tinyHidden, tinyFFN
			if isBlock {
				hidden, ffn = 256, 512
			}
			tensors := tinyShapesSized(hidden, ffn)
			values := map[string][]float32{} // by GGUF name, in the file's row order
			for i := range tensors {
				tn := &tensors[i]
				n := 1
				for _, d := range tn.dims {
					n *= int(d)
				}
				if len(tn.dims) == 1 { // norms stay F32
					w := make([]float32, n)
					for j := range w {
						w[j] = 1 + float32(rng.NormFloat64()*0.1)
					}
					tn.typ, tn.data, values[tn.name] = gguf.F32, f32Bytes(w), w
					continue
				}
				tn.typ = typ
				if isBlock {
					tn.data, values[tn.name] = randomBlockBytes(t, rng, typ, n/int(typ.BlockSize()))
				} else {
					tn.data, values[tn.name] = randomBlocks(rng, typ, n/32)
				}
			}
			fileData := map[string][]byte{}
			for _, tn := range tensors {
				fileData[tn.name] = tn.data
			}
			m, err := Load(context.Background(), writeGGUF(t, tinyKVsSized(hidden, ffn), tensors), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			float := map[string]*Weight{}
			for gname, name := range ggufNames(m.Config) {
				w := m.Weights[name]
				want := values[gname]
				cols := w.Cols
				// Row r of the file is row src of HF (gguf's real_test.go
				// checks this against llama.cpp's converter).
				src := func(r int) int { return r }
				if heads := map[string]int{"blk.0.attn_q.weight": tinyHeads, "blk.0.attn_k.weight": tinyKV}[gname]; heads > 0 {
					d := w.Rows / heads
					src = func(r int) int { return r/d*d + r%2*d/2 + r%d/2 }
				}
				if len(want) != w.Rows*cols {
					t.Fatalf("%s: %d values for [%d, %d]", name, len(want), w.Rows, cols)
				}
				hfOrder := make([]float32, len(want))
				got := make([]float32, cols)
				for r := range w.Rows {
					copy(hfOrder[src(r)*cols:], want[r*cols:(r+1)*cols])
					w.Row(src(r), got)
					if !slices.Equal(got, want[r*cols:(r+1)*cols]) {
						t.Fatalf("%s row %d (file row %d) = %v, want %v", name, src(r), r, got, want[r*cols:(r+1)*cols])
					}
				}
				switch {
				case w.Q == nil:
				case isBlock:
					if w.Q.Format != bf {
						t.Errorf("%s is %s, want %s", name, w.Q.Format, bf)
					}
					// The file's bytes, row for row (q and k's rows moved whole).
					ti := fileData[gname]
					rb := w.Q.RowBytes()
					for r := range w.Rows {
						if !bytes.Equal(w.Q.Data[src(r)*rb:(src(r)+1)*rb], ti[r*rb:(r+1)*rb]) {
							t.Fatalf("%s row %d: bytes differ from the file's row %d", name, src(r), r)
						}
					}
				case w.Q.GroupSize != 32 || (typ == gguf.Q8_0) != (w.Q.Format == "q8"):
					t.Errorf("%s is %s in groups of %d", name, w.Q.Format, w.Q.GroupSize)
				}
				float[name] = FloatWeight(w.Rows, cols, hfOrder)
			}
			ref, err := New(m.Config, float)
			if err != nil {
				t.Fatal(err)
			}
			tokens := []int{1, 5, 9, 33, 2, 17, 39, 0}
			if e := relL2(allLogits(t, m, tokens), allLogits(t, ref, tokens)); !(e < 1e-5) {
				t.Errorf("logits differ from the float model's by %.3g (relative L2)", e)
			}
		})
	}
}

// TestGGUFRefused checks that files lowbit cannot read as a model are
// refused with an error naming the key, tensor or type at fault.
func TestGGUFRefused(t *testing.T) {
	f32 := func(tn ggufTensor) ggufTensor {
		n := 1
		for _, d := range tn.dims {
			n *= int(d)
		}
		tn.typ, tn.data = gguf.F32, make([]byte, 4*n)
		return tn
	}
	base := func() ([]ggufKV, []ggufTensor) {
		var ts []ggufTensor
		for _, tn := range tinyShapes() {
			ts = append(ts, f32(tn))
		}
		return tinyKVs(), ts
	}
	without := func(kvs []ggufKV, key string) []ggufKV {
		return slices.DeleteFunc(kvs, func(kv ggufKV) bool { return kv.key == key })
	}
	set := func(kvs []ggufKV, key string, v any) []ggufKV {
		return append(without(kvs, key), ggufKV{key, v})
	}
	for _, c := range []struct {
		name string
		edit func([]ggufKV, []ggufTensor) ([]ggufKV, []ggufTensor)
		want string
	}{
		{"no architecture", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return without(k, "general.architecture"), ts
		}, `"general.architecture"`},
		{"other architecture", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return set(k, "general.architecture", "mamba"), ts
		}, `general.architecture = "mamba"`},
		{"no block count", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return without(k, "llama.block_count"), ts
		}, `"llama.block_count"`},
		{"no epsilon", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return without(k, "llama.attention.layer_norm_rms_epsilon"), ts
		}, `"llama.attention.layer_norm_rms_epsilon"`},
		{"string head count", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return set(k, "llama.attention.head_count", "four"), ts
		}, `"llama.attention.head_count"`},
		{"negative context", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return set(k, "llama.context_length", int32(-1)), ts
		}, `"llama.context_length"`},
		{"partial rotary", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return set(k, "llama.rope.dimension_count", uint32(8)), ts
		}, "llama.rope.dimension_count = 8"},
		{"heads not dividing", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return set(k, "llama.attention.head_count_kv", uint32(3)), ts
		}, "num_key_value_heads 3"},
		{"yarn without a factor", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return set(k, "llama.rope.scaling.type", "yarn"), ts
		}, `llama.rope.scaling.factor`},
		{"unknown rope scaling", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return set(k, "llama.rope.scaling.type", "su"), ts
		}, `llama.rope.scaling.type = "su"`},
		{"no embedding", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return k, ts[1:]
		}, "token_embd.weight"},
		{"embedding of another width", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			ts[0] = f32(ggufTensor{name: "token_embd.weight", dims: []uint64{32, tinyVocab}})
			return k, ts
		}, "token_embd.weight has dims [32 40]"},
		{"missing tensor", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return k, slices.DeleteFunc(ts, func(tn ggufTensor) bool { return tn.name == "blk.0.ffn_up.weight" })
		}, "blk.0.ffn_up.weight (model.layers.0.mlp.up_proj.weight) is missing"},
		{"wrong dims", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			ts[4] = f32(ggufTensor{name: "blk.0.attn_q.weight", dims: []uint64{tinyHidden, 32}})
			return k, ts
		}, "blk.0.attn_q.weight: tensor model.layers.0.self_attn.q_proj.weight has shape [32 64]"},
		{"unknown tensor", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return k, append(ts, f32(ggufTensor{name: "blk.0.attn_q.bias", dims: []uint64{tinyHidden}}))
		}, "blk.0.attn_q.bias is not a tensor"},
		{"layer past the count", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return k, append(ts, f32(ggufTensor{name: "blk.1.attn_norm.weight", dims: []uint64{tinyHidden}}))
		}, "blk.1.attn_norm.weight is not a tensor"},
		{"zero rope frequency factors", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return k, append(ts, f32(ggufTensor{name: "rope_freqs.weight", dims: []uint64{tinyHeadDim / 2}}))
		}, "rope_freqs.weight: factor 0 of pair 0"},
		{"rope frequency factors of another length", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			return k, append(ts, f32(ggufTensor{name: "rope_freqs.weight", dims: []uint64{tinyHeadDim}}))
		}, "rope_freqs.weight is F32 [16], want F32 [8]"},
		{"IQ4_NL", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			ts[9] = ggufTensor{name: "blk.0.ffn_gate.weight", dims: []uint64{tinyHidden, tinyFFN}, typ: gguf.IQ4_NL, data: make([]byte, tinyHidden*tinyFFN/32*18)}
			return k, ts
		}, "blk.0.ffn_gate.weight: ggml type IQ4_NL is not supported yet"},
		{"Q6_K NaN scale", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			ts = nil
			for _, tn := range tinyShapesSized(256, 512) {
				ts = append(ts, f32(tn))
			}
			data := make([]byte, 256*tinyVocab/256*210)
			binary.LittleEndian.PutUint16(data[210*3+208:], 0x7e00)
			ts[2] = ggufTensor{name: "output.weight", dims: []uint64{256, tinyVocab}, typ: gguf.Q6_K, data: data}
			return tinyKVsSized(256, 512), ts
		}, "output.weight: q6k block 3 (row 3) has the f16 NaN at byte 208 of its 210"},
		{"quantized norm", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			ts[1] = ggufTensor{name: "output_norm.weight", dims: []uint64{tinyHidden}, typ: gguf.Q8_0, data: make([]byte, 2*34)}
			return k, ts
		}, "output_norm.weight: a norm must be F32, F16 or BF16, is Q8_0"},
		{"infinite scale", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			data := make([]byte, tinyHidden*tinyFFN/32*34)
			binary.LittleEndian.PutUint16(data[34*5:], 0x7c00)
			ts[10] = ggufTensor{name: "blk.0.ffn_up.weight", dims: []uint64{tinyHidden, tinyFFN}, typ: gguf.Q8_0, data: data}
			return k, ts
		}, "blk.0.ffn_up.weight: block 5 (row 2) has the scale +Inf"},
		{"Q4_0 minimum past f16", func(k []ggufKV, ts []ggufTensor) ([]ggufKV, []ggufTensor) {
			data := make([]byte, tinyHidden*tinyFFN/32*18)
			binary.LittleEndian.PutUint16(data[18*3:], uint16(half.FromFloat32(10000)))
			ts[10] = ggufTensor{name: "blk.0.ffn_up.weight", dims: []uint64{tinyHidden, tinyFFN}, typ: gguf.Q4_0, data: data}
			return k, ts
		}, "blk.0.ffn_up.weight: block 3 (row 1): the scale 10000 makes the minimum -80000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			kvs, ts := c.edit(base())
			_, err := Load(context.Background(), writeGGUF(t, kvs, ts), LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestGGUFUnpermuteRows checks the inverse permutation on one head of 8:
// HF's rows 0-3 rotate with 4-7, ggml's pairs (0,1), (2,3)... do.
func TestGGUFUnpermuteRows(t *testing.T) {
	if got, want := unpermuteRows(16, 2), []int{0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15}; !slices.Equal(got, want) {
		t.Errorf("unpermuteRows(16, 2) = %v, want %v", got, want)
	}
}

// ggufOf writes m as a GGUF file the way llama.cpp's converter does (F32,
// the rows of llama's q and k permuted to ggml's rotary layout) and
// returns its path. Weights in a block format are written as its ggml
// type, their bytes as they are.
func ggufOf(t *testing.T, m *Model) string {
	t.Helper()
	c := m.Config
	a := c.Arch
	kvs := []ggufKV{
		{"general.architecture", a},
		{a + ".embedding_length", uint32(c.HiddenSize)},
		{a + ".block_count", uint32(c.NumLayers)},
		{a + ".feed_forward_length", uint32(c.IntermediateSize)},
		{a + ".attention.head_count", uint32(c.NumHeads)},
		{a + ".attention.head_count_kv", uint32(c.NumKVHeads)},
		{a + ".attention.key_length", uint32(c.HeadDim)},
		{a + ".attention.layer_norm_rms_epsilon", float32(c.RMSNormEps)},
		{a + ".rope.freq_base", float32(c.RopeTheta)},
		{a + ".rope.dimension_count", uint32(c.HeadDim)},
		{a + ".context_length", uint32(c.MaxPositions)},
		{"tokenizer.ggml.bos_token_id", uint32(c.BOS)},
		{"tokenizer.ggml.eos_token_id", uint32(c.EOS[0])},
	}
	var tensors []ggufTensor
	for gname, name := range ggufNames(c) {
		w := m.Weights[name]
		heads := 0
		if a == "llama" && strings.HasSuffix(name, "q_proj.weight") {
			heads = c.NumHeads
		} else if a == "llama" && strings.HasSuffix(name, "k_proj.weight") {
			heads = c.NumKVHeads
		}
		src := func(r int) int { return r }
		if heads > 0 { // file row h*d + 2i + j is HF row h*d + j*d/2 + i
			d := w.Rows / heads
			src = func(r int) int { return r/d*d + r%2*d/2 + r%d/2 }
		}
		dims := []uint64{uint64(w.Cols), uint64(w.Rows)}
		if len(c.TensorShape(name)) == 1 {
			dims = dims[:1]
		}
		tn := ggufTensor{name: gname, dims: dims, typ: gguf.F32}
		if w.Q != nil {
			tn.typ = ggmlTypeOf(t, w.Q.Format)
			rb := w.Q.RowBytes()
			for r := range w.Rows {
				tn.data = append(tn.data, w.Q.Data[src(r)*rb:(src(r)+1)*rb]...)
			}
		} else {
			data := make([]float32, 0, len(w.F32))
			for r := range w.Rows {
				data = append(data, w.F32[src(r)*w.Cols:(src(r)+1)*w.Cols]...)
			}
			tn.data = f32Bytes(data)
		}
		tensors = append(tensors, tn)
	}
	slices.SortFunc(tensors, func(x, y ggufTensor) int { return strings.Compare(x.name, y.name) })
	return writeGGUF(t, kvs, tensors)
}

// ggmlTypeOf is the ggml type whose blocks are block format f's.
func ggmlTypeOf(t *testing.T, f quantize.Format) gguf.GGMLType {
	t.Helper()
	for typ := range gguf.GGMLType(64) {
		if bf, ok := ggufBlockFormat(typ); ok && bf == f {
			return typ
		}
	}
	t.Fatalf("%s is no ggml block type", f)
	return 0
}

// TestGGUFBlockRoundTrip quantizes a llama in each block format, writes it
// as GGUF, and loads it again: every weight keeps its bytes and the model
// its logits.
func TestGGUFBlockRoundTrip(t *testing.T) {
	ctx := context.Background()
	spec := fixture.Llama()
	spec.Hidden, spec.Intermediate, spec.HeadDim = 256, 512, 64
	dir := writeFixture(t, spec)
	tokens := []int{1, 7, 50, 3, 95, 12}
	for _, f := range []quantize.Format{quantize.Q5_0, quantize.Q5_1, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5K, quantize.Q6K} {
		m, err := Load(ctx, dir, LoadOptions{Quantize: f})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"model.embed_tokens.weight", "lm_head.weight"} { // q8 in lowbit, no ggml type
			w := m.Weights[name]
			m.Weights[name] = FloatWeight(w.Rows, w.Cols, w.Q.Dequantize())
		}
		g, err := Load(ctx, ggufOf(t, m), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range m.Weights {
			gw := g.Weights[name]
			if w.Q != nil && (gw.Q == nil || gw.Q.Format != f || !bytes.Equal(gw.Q.Data, w.Q.Data)) {
				t.Errorf("%s: %s weight %s differs after the round trip", f, w.Format(), name)
			}
		}
		if e := relL2(allLogits(t, g, tokens), allLogits(t, m, tokens)); e != 0 {
			t.Errorf("%s: logits differ after the round trip by %.3g (relative L2)", f, e)
		}
	}
}

// TestGGUFFixtures writes small llama and qwen2 models as GGUF and checks
// that they load with the configuration and logits of their HF
// directories (qwen2's without its sliding windows, which GGUF does not
// carry).
func TestGGUFFixtures(t *testing.T) {
	ctx := context.Background()
	qwen2 := fixture.Llama()
	qwen2.Arch = "Qwen2ForCausalLM"
	tied := fixture.Llama()
	tied.Tied = true
	for _, spec := range []fixture.Spec{fixture.Llama(), tied, qwen2} {
		t.Run(fmt.Sprintf("%s tied=%v", spec.Arch, spec.Tied), func(t *testing.T) {
			hf, err := Load(ctx, writeFixture(t, spec), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hf.Config.LayerWindows, hf.Config.SlidingWindow = nil, 0
			g, err := Load(ctx, ggufOf(t, hf), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", g.Config) != fmt.Sprintf("%+v", hf.Config) {
				t.Errorf("config\n%+v\nwant\n%+v", g.Config, hf.Config)
			}
			tokens := []int{1, 7, 50, 3, 95, 12, 40, 2, 66}
			if e := relL2(allLogits(t, g, tokens), allLogits(t, hf, tokens)); e != 0 {
				t.Errorf("logits differ from the HF directory's by %.3g (relative L2)", e)
			}
		})
	}
}

// FuzzGGUFModel feeds mutated GGUF files to the loader: whatever the
// reader accepts, building a model from it ends in a model or an error,
// never a panic.
func FuzzGGUFModel(f *testing.F) {
	for _, typ := range []gguf.GGMLType{gguf.F32, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		rng := rand.New(rand.NewPCG(uint64(typ), 2))
		// A K-quant's rows must be whole 256-weight super-blocks: only
		// ffn_down's are, with a feed-forward size of 256 (a small seed
		// keeps the fuzzer fast).
		hidden, ffn := tinyHidden, tinyFFN
		kquant := typ.BlockSize() == 256
		if kquant {
			ffn = 256
		}
		tensors := tinyShapesSized(hidden, ffn)
		for i := range tensors {
			tn := &tensors[i]
			n := 1
			for _, d := range tn.dims {
				n *= int(d)
			}
			if len(tn.dims) == 1 || typ == gguf.F32 || kquant && tn.name != "blk.0.ffn_down.weight" {
				tn.typ, tn.data = gguf.F32, f32Bytes(make([]float32, n))
				continue
			}
			tn.typ = typ
			if _, ok := ggufBlockFormat(typ); ok {
				tn.data, _ = randomBlockBytes(f, rng, typ, n/int(typ.BlockSize()))
			} else {
				tn.data, _ = randomBlocks(rng, typ, n/32)
			}
		}
		b, err := ggufBytes(tinyKVsSized(hidden, ffn), tensors)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range ggufFamilySeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		m, err := fromGGUF(context.Background(), file)
		if err == nil && m == nil {
			t.Fatal("no model and no error")
		}
	})
}

// TestGGUFTernaryAndSigns repacks TQ2_0 and Q1_0 blocks of random codes:
// each weight dequantizes to ggml's formula's value, and blocks lowbit's
// formats cannot hold (two scales in one TQ2_0 tensor, the code 3) are
// refused by name.
func TestGGUFTernaryAndSigns(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 3, 512
	d := half.FromFloat32(0.0375)
	var tq []byte
	want := make([]float32, 0, rows*cols)
	for range rows * cols / 256 {
		var qs [64]byte
		vals := make([]float32, 256)
		for w := range 256 {
			code := byte(rng.IntN(3))
			c, l, m := w/128, w%128/32, w%32
			qs[32*c+m] |= code << (2 * l)
			vals[w] = float32(int(code)-1) * d.Float32()
		}
		tq = append(append(tq, qs[:]...), byte(d), byte(d>>8))
		want = append(want, vals...)
	}
	q, err := ggufTQ2(tq, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Dequantize(); !slices.Equal(got, want) {
		t.Error("TQ2_0 weights differ from ggml's formula")
	}
	bad := slices.Clone(tq)
	bad[66+64] ^= 1 // block 1's scale
	if _, err := ggufTQ2(bad, rows, cols); err == nil || !strings.Contains(err.Error(), "one scale per tensor") {
		t.Errorf("two scales: %v", err)
	}
	bad = slices.Clone(tq)
	bad[5] |= 3
	if _, err := ggufTQ2(bad, rows, cols); err == nil || !strings.Contains(err.Error(), "code 3") {
		t.Errorf("code 3: %v", err)
	}
	var q1 []byte
	want = want[:0]
	for range rows * cols / 128 {
		s := half.FromFloat32(float32(rng.NormFloat64() * 0.01))
		q1 = binary.LittleEndian.AppendUint16(q1, uint16(s))
		for range 16 {
			b := byte(rng.IntN(256))
			q1 = append(q1, b)
			for i := range 8 {
				v := -s.Float32()
				if b>>i&1 == 1 {
					v = s.Float32()
				}
				want = append(want, v)
			}
		}
	}
	q, err = ggufQ1(q1, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Dequantize(); !slices.Equal(got, want) {
		t.Error("Q1_0 weights differ from ggml's formula")
	}
}
