package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	"lowbit/half"
	"lowbit/internal/testmodels"
	"lowbit/safetensors"
)

// checkMeta compares metadata with what it should hold.
func checkMeta(t *testing.T, f *File, strs map[string]string, uints map[string]uint64) {
	t.Helper()
	for k, want := range strs {
		if got, err := f.String(k); got != want || err != nil {
			t.Errorf("%s = %q, %v; want %q", k, got, err, want)
		}
	}
	for k, want := range uints {
		if got, err := f.Uint(k); got != want || err != nil {
			t.Errorf("%s = %d, %v; want %d", k, got, err, want)
		}
	}
}

// checkLayout checks that the tensors fill the data section in order, as
// llama.cpp writes them, up to the end of the file.
func checkLayout(t *testing.T, f *File) {
	t.Helper()
	var end int64
	for _, ti := range f.Tensors() {
		if ti.Offset != (end+f.Alignment()-1)/f.Alignment()*f.Alignment() {
			t.Errorf("%s at %d, want it after the previous tensor, which ends at %d", ti.Name, ti.Offset, end)
		}
		end = ti.Offset + ti.Size
	}
	if f.DataOffset()+end != f.Size() {
		t.Errorf("tensors end at byte %d of a %d-byte file", f.DataOffset()+end, f.Size())
	}
}

func TestRealStories(t *testing.T) {
	f, err := Open(testmodels.GGUF(t, "stories260K-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version() != 3 || f.Alignment() != 32 {
		t.Errorf("version %d, alignment %d", f.Version(), f.Alignment())
	}
	checkMeta(t, f,
		map[string]string{"general.architecture": "llama", "tokenizer.ggml.model": "llama"},
		map[string]uint64{
			"llama.block_count": 5, "llama.embedding_length": 64, "llama.feed_forward_length": 172,
			"llama.attention.head_count": 8, "llama.attention.head_count_kv": 4, "llama.context_length": 512,
			"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
		})
	if eps, err := f.Float("llama.attention.layer_norm_rms_epsilon"); err != nil || math.Abs(eps-1e-5) > 1e-12 {
		t.Errorf("rms epsilon = %v, %v", eps, err)
	}
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil || len(tokens) != 512 || tokens[0] != "<unk>" || tokens[1] != "<s>" || tokens[3] != "<0x00>" {
		t.Errorf("tokens: %d, %v", len(tokens), err)
	}
	if types, err := f.Ints("tokenizer.ggml.token_type"); err != nil || len(types) != 512 || types[0] != 2 || types[1] != 3 || types[3] != 6 {
		t.Errorf("token types: %v", err)
	}
	if scores, err := f.Float32s("tokenizer.ggml.scores"); err != nil || len(scores) != 512 {
		t.Errorf("scores: %d, %v", len(scores), err)
	}
	if n := len(f.Tensors()); n != 47 { // 9 per block, the embedding and the final norm (the head is tied)
		t.Errorf("%d tensors, want 47", n)
	}
	checkLayout(t, f)

	st, err := safetensors.Open(filepath.Join(testmodels.Dir(t), "stories260K-hf", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// GGUF names tensors its own way and keeps ggml's dims (the reverse of
	// the safetensors shape); the bytes of a tensor the converter does not
	// change are the same.
	same := map[string]string{"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
	for i := range 5 {
		hf := fmt.Sprintf("model.layers.%d.", i)
		blk := fmt.Sprintf("blk.%d.", i)
		same[blk+"ffn_down.weight"] = hf + "mlp.down_proj.weight"
		same[blk+"ffn_gate.weight"] = hf + "mlp.gate_proj.weight"
		same[blk+"ffn_up.weight"] = hf + "mlp.up_proj.weight"
		same[blk+"attn_v.weight"] = hf + "self_attn.v_proj.weight"
		same[blk+"attn_output.weight"] = hf + "self_attn.o_proj.weight"
		same[blk+"attn_norm.weight"] = hf + "input_layernorm.weight"
		same[blk+"ffn_norm.weight"] = hf + "post_attention_layernorm.weight"
	}
	for g, h := range same {
		gi, _ := f.Info(g)
		hi, _ := st.Info(h)
		if gi.Type != F32 || !reflect.DeepEqual(gi.Shape(), hi.Shape) {
			t.Errorf("%s: %s %v; %s: %s %v", g, gi.Type, gi.Shape(), h, hi.DType, hi.Shape)
			continue
		}
		gb, err := f.TensorData(g)
		if err != nil {
			t.Fatal(err)
		}
		hb, _ := st.Data(h)
		if !bytes.Equal(gb, hb) {
			t.Errorf("%s differs from %s", g, h)
		}
	}

	// The converter permutes the rows of q and k for llama, from the
	// half-split rotary layout of HF to ggml's interleaved pairs: row
	// h*d + 2i + j of GGUF is row h*d + j*d/2 + i of HF, d the head size.
	for _, c := range []struct {
		gguf, hf string
		heads    int
	}{
		{"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 8},
		{"blk.4.attn_k.weight", "model.layers.4.self_attn.k_proj.weight", 4},
	} {
		gi, _ := f.Info(c.gguf)
		gb, _ := f.TensorData(c.gguf)
		hb, _ := st.Data(c.hf)
		if bytes.Equal(gb, hb) {
			t.Errorf("%s equals %s unpermuted", c.gguf, c.hf)
		}
		rowBytes := int(gi.Dims[0]) * 4
		rows := int(gi.Dims[1])
		d := rows / c.heads
		for r := range rows {
			h, i, j := r/d, (r%d)/2, r%2
			src := h*d + j*d/2 + i
			if !bytes.Equal(gb[r*rowBytes:(r+1)*rowBytes], hb[src*rowBytes:(src+1)*rowBytes]) {
				t.Errorf("%s row %d is not %s row %d", c.gguf, r, c.hf, src)
				break
			}
		}
	}
}

func TestRealK256(t *testing.T) {
	f, err := Open(testmodels.GGUF(t, "k256-f16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkMeta(t, f,
		map[string]string{"general.architecture": "llama"},
		map[string]uint64{
			"llama.block_count": 2, "llama.embedding_length": 512, "llama.feed_forward_length": 1536,
			"llama.attention.head_count": 8, "llama.attention.head_count_kv": 4, "general.file_type": 1,
		})
	if n := len(f.Tensors()); n != 21 { // 9 per block, the embedding, the final norm and the head
		t.Errorf("%d tensors, want 21", n)
	}
	checkLayout(t, f)
	// Matrices are F16, norms stay F32.
	for name, want := range map[string]struct {
		typ  GGMLType
		dims []int64
	}{
		"output.weight":          {F16, []int64{512, 512}},
		"token_embd.weight":      {F16, []int64{512, 512}},
		"blk.1.ffn_down.weight":  {F16, []int64{1536, 512}},
		"blk.0.attn_k.weight":    {F16, []int64{512, 256}},
		"blk.0.attn_norm.weight": {F32, []int64{512}},
	} {
		ti, ok := f.Info(name)
		if !ok || ti.Type != want.typ || !reflect.DeepEqual(ti.Dims, want.dims) {
			t.Errorf("%s = %+v, want %s %v", name, ti, want.typ, want.dims)
		}
	}
	// The weights are Student-t(5) x 0.02, whose standard deviation is
	// 0.02 x sqrt(5/3) = 0.0258: decoded as F16 they must show it.
	b, err := f.TensorData("blk.1.ffn_down.weight")
	if err != nil {
		t.Fatal(err)
	}
	var sum, sq float64
	n := len(b) / 2
	for i := range n {
		x := float64(half.Float16(binary.LittleEndian.Uint16(b[2*i:])).Float32())
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("weight %d is %v", i, x)
		}
		sum += x
		sq += x * x
	}
	mean := sum / float64(n)
	std := math.Sqrt(sq/float64(n) - mean*mean)
	t.Logf("ffn_down: mean %.5f, std %.5f", mean, std)
	if math.Abs(mean) > 1e-3 || math.Abs(std-0.0258) > 0.002 {
		t.Errorf("ffn_down: mean %.5f, std %.5f; want about 0 and 0.0258", mean, std)
	}
}
