package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
	"lowbit/validate"
)

// bitnetPacked is testdata/parity/bitnet_packed.json, written by
// bitnet_gen.py with transformers 5.17: a ternary matrix, pack_weights of
// it, unpack_weights of that, and BitLinear's output for two inputs.
type bitnetPacked struct {
	Rows, Cols  int
	Ternary     []int8
	Packed      []byte
	Unpacked    []int8
	WeightScale float32 `json:"weight_scale"`
	X, Y        []float32
}

func readBitnetPacked(t *testing.T) bitnetPacked {
	t.Helper()
	b, err := os.ReadFile("../testdata/parity/bitnet_packed.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		bitnetPacked
		Packed []int `json:"packed"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	r := rec.bitnetPacked
	for _, v := range rec.Packed {
		r.Packed = append(r.Packed, byte(v))
	}
	return r
}

func TestBitNetPackedMatchesTransformers(t *testing.T) {
	ref := readBitnetPacked(t)
	if len(ref.Packed) != ref.Rows/4*ref.Cols || len(ref.Ternary) != ref.Rows*ref.Cols {
		t.Fatalf("testdata: %d packed bytes, %d values for [%d, %d]", len(ref.Packed), len(ref.Ternary), ref.Rows, ref.Cols)
	}
	// Our writer of the layout gives transformers' bytes.
	packed, err := packBitNet(ref.Ternary, ref.Rows, ref.Cols)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(packed, ref.Packed) {
		t.Fatalf("packBitNet differs from transformers' pack_weights:\n got %v\nwant %v", packed[:16], ref.Packed[:16])
	}
	// Unpacking gives transformers' unpack_weights, at scale 1/weight_scale.
	q, err := unpackBitNet(context.Background(), "w", ref.Packed, ref.Rows/4, ref.Cols, ref.WeightScale, "bitlinear")
	if err != nil {
		t.Fatal(err)
	}
	if q.Format != quantize.TQ2 || q.Rows != ref.Rows || q.Cols != ref.Cols || q.Scale != 1/ref.WeightScale {
		t.Fatalf("tensor %s [%d, %d] scale %v", q.Format, q.Rows, q.Cols, q.Scale)
	}
	row := make([]float32, q.Cols)
	for r := 0; r < q.Rows; r++ {
		q.DequantizeRow(r, row)
		for c, v := range row {
			if want := float32(ref.Unpacked[r*q.Cols+c]) * q.Scale; v != want {
				t.Fatalf("[%d, %d] = %v, transformers %v", r, c, v, want)
			}
		}
	}
	// BitLinear's forward (int8 activations, divided by weight_scale) equals
	// lowbit's W2A8 matvec on the unpacked tensor.
	for i := 0; i < len(ref.X)/ref.Cols; i++ {
		y := make([]float32, q.Rows)
		quantize.MatVec(context.Background(), q, ref.X[i*ref.Cols:(i+1)*ref.Cols], y, 1)
		want := ref.Y[i*ref.Rows : (i+1)*ref.Rows]
		if e := quantize.RelL2(want, y); !(e <= 1e-6) {
			t.Errorf("input %d: rel L2 %.3g against BitLinear\n got %v\nwant %v", i, e, y[:4], want[:4])
		}
	}
}

func TestBitNetPackRoundTripAndScales(t *testing.T) {
	rows, cols := 12, 37
	tern := make([]int8, rows*cols)
	for i := range tern {
		tern[i] = int8(i*7%3) - 1
	}
	p, err := packBitNet(tern, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		class string
		ws    float32
		want  float32
	}{{"bitlinear", 4, 0.25}, {"", 2, 0.5}, {"autobitlinear", 0.03, 0.03}} {
		q, err := unpackBitNet(context.Background(), "w", p, rows/4, cols, tc.ws, tc.class)
		if err != nil {
			t.Fatal(err)
		}
		if q.Scale != tc.want {
			t.Errorf("%q weight_scale %v: scale %v, want %v", tc.class, tc.ws, q.Scale, tc.want)
		}
		row := make([]float32, cols)
		for r := 0; r < rows; r++ {
			q.DequantizeRow(r, row)
			for c, v := range row {
				if v != float32(tern[r*cols+c])*tc.want {
					t.Fatalf("%q: [%d, %d] = %v, want %v", tc.class, r, c, v, float32(tern[r*cols+c])*tc.want)
				}
			}
		}
	}
}

func TestBitNetPackedBadInput(t *testing.T) {
	good, _ := packBitNet(make([]int8, 8*4), 8, 4)
	bad := append([]byte(nil), good...)
	bad[5] |= 3 << 4
	for _, tc := range []struct {
		name   string
		data   []byte
		pr, c  int
		ws     float32
		class  string
		substr string
	}{
		{"short", good[:7], 2, 4, 1, "bitlinear", "do not make"},
		{"code 3", bad, 2, 4, 1, "bitlinear", "code 3"},
		{"zero scale", good, 2, 4, 0, "bitlinear", "not a positive finite"},
		{"negative scale", good, 2, 4, -1, "bitlinear", "not a positive finite"},
		{"class", good, 2, 4, 1, "fancy", "linear_class"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unpackBitNet(context.Background(), "model.layers.0.mlp.up_proj.weight", tc.data, tc.pr, tc.c, tc.ws, tc.class)
			if err == nil || !strings.Contains(err.Error(), tc.substr) || !strings.Contains(err.Error(), "up_proj") {
				t.Errorf("error %v, want one naming the tensor and %q", err, tc.substr)
			}
		})
	}
	if _, err := packBitNet([]int8{2, 0, 0, 0}, 4, 1); err == nil {
		t.Error("packing a 2 succeeded")
	}
	if _, err := packBitNet(make([]int8, 6), 6, 1); err == nil {
		t.Error("packing 6 rows succeeded")
	}
}

// writePackedBitNet writes src (a float BitNet checkpoint written by the
// fixture) again as microsoft/bitnet-b1.58-2B-4T packs it: every linear
// ternarized as transformers' WeightQuant does (per-tensor s = 1/mean|W|,
// round(W*s) clipped to [-1, 1]), packed by packBitNet, with a float32
// "<name>_scale" = s, as BitLinear reads it; quantization_config added.
func writePackedBitNet(t *testing.T, spec fixture.Spec, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := spec.Config()
	cfg["quantization_config"] = map[string]any{"quant_method": "bitnet", "linear_class": "bitlinear", "quantization_mode": "offline"}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "tokenizer.json"), fixture.TokenizerJSON(spec.Vocab), 0o644); err != nil {
		t.Fatal(err)
	}
	mc, err := model.ParseHFConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	var specs []safetensors.Spec
	for name, shape := range spec.Tensors() {
		w := spec.Weights(name, shape)
		if mc.TensorRole(name) != model.RoleLinear {
			raw, _ := safetensors.FromFloat32("F32", w)
			specs = append(specs, safetensors.Spec{Name: name, DType: "F32", Shape: shape})
			data[name] = raw
			continue
		}
		s := float32(1) / max(float32(quantize.AbsMean(w)), 1e-5)
		tern := make([]int8, len(w))
		for i, v := range w {
			tern[i] = int8(max(min(math.RoundToEven(float64(v*s)), 1), -1))
		}
		p, err := packBitNet(tern, int(shape[0]), int(shape[1]))
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, safetensors.Spec{Name: name, DType: "U8", Shape: []int64{shape[0] / 4, shape[1]}},
			safetensors.Spec{Name: name + "_scale", DType: "F32", Shape: []int64{1}})
		data[name] = p
		data[name+"_scale"], _ = safetensors.FromFloat32("F32", []float32{s})
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	w, err := safetensors.Create(filepath.Join(dst, "model.safetensors"), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		if err := w.Write(sp.Name, data[sp.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestConvertPackedBitNet converts the same BitNet model from its float
// master weights and from its packed checkpoint and finds the same lowbit
// model: every ternary code equal, scales within an ulp (1/(1/S) in
// float32), float tensors equal, and the same logits.
func TestConvertPackedBitNet(t *testing.T) {
	spec := fixture.Spec{Arch: "BitNetForCausalLM", Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 80, Tied: true, Seed: 3}
	fromFloat, _ := convertFixture(t, spec, Options{Bits: "ternary", NoValidate: true})
	packedDir := filepath.Join(t.TempDir(), "packed")
	writePackedBitNet(t, spec, packedDir)
	out := filepath.Join(t.TempDir(), "out")
	res, err := Run(context.Background(), Options{Source: packedDir, Out: out, Bits: "ternary", NoValidate: true})
	if err != nil {
		t.Fatalf("convert packed: %v", err)
	}
	ctx := context.Background()
	a, err := model.Load(ctx, fromFloat.OutDir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := model.Load(ctx, res.OutDir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	linears := 0
	for name, wa := range a.Weights {
		wb := b.Weights[name]
		if wb == nil {
			t.Fatalf("%s missing from the packed conversion", name)
		}
		if wa.Q == nil {
			if !slices.Equal(wa.F32, wb.F32) {
				t.Errorf("%s: float tensors differ", name)
			}
			continue
		}
		if wa.Q.Format != quantize.TQ2 {
			continue // embedding/head at 8 bits, compared through the logits
		}
		linears++
		if wb.Q == nil || wb.Q.Format != quantize.TQ2 || !bytes.Equal(wa.Q.Data, wb.Q.Data) {
			t.Errorf("%s: ternary codes differ", name)
			continue
		}
		if d := math.Abs(float64(wa.Q.Scale - wb.Q.Scale)); d > float64(math.Nextafter32(wa.Q.Scale, 1)-wa.Q.Scale) {
			t.Errorf("%s: scale %v from bf16 master, %v from packed", name, wa.Q.Scale, wb.Q.Scale)
		}
	}
	if linears != 7*spec.Layers {
		t.Errorf("compared %d ternary linears, want %d", linears, 7*spec.Layers)
	}
	la, lb := logitsOf(t, a), logitsOf(t, b)
	if e := quantize.RelL2(la, lb); !(e <= 1e-5) {
		t.Errorf("logits differ: rel L2 %.3g", e)
	}
	// The default validation runs the kernels and, with no float source to
	// compare with, says that it did not check the model, in its report and
	// in the manifest, instead of failing on the packed shapes.
	vres, err := Run(context.Background(), Options{Source: packedDir, Out: filepath.Join(t.TempDir(), "validated"), Bits: "ternary"})
	if err != nil {
		t.Fatalf("convert packed with validation: %v", err)
	}
	if v := vres.Validation; v == nil || v.Kernels == nil || v.Model != nil || len(v.NotChecked) != 1 {
		t.Errorf("validation of a packed source: %+v", vres.Validation)
	}
	if v := vres.Manifest.Validation; v == nil || v.Status != validate.Pass || len(v.NotChecked) != 1 || v.KLDMean != nil {
		t.Errorf("manifest validation of a packed source: %+v", v)
	}
	// A packed checkpoint asked for another format is refused, by name.
	_, err = Run(context.Background(), Options{Source: packedDir, Out: filepath.Join(t.TempDir(), "q4"), Bits: "4", NoValidate: true})
	if err == nil || !strings.Contains(err.Error(), "--bits ternary") {
		t.Errorf("packed checkpoint at 4 bits: %v", err)
	}
}

func logitsOf(t *testing.T, m *model.Model) []float32 {
	t.Helper()
	s, err := m.NewSession(model.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.ForwardAll(context.Background(), []int{1, 5, 9, 20, 33, 7}, false)
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits
}

// TestConvertBitNetKeepsBF16Embedding: `--bits ternary --embedding-bits bf16
// --output-bits bf16` keeps the (tied) embedding and head in bf16 beside tq2
// linears, and the model loads and runs.
func TestConvertBitNetKeepsBF16Embedding(t *testing.T) {
	spec := fixture.Spec{Arch: "BitNetForCausalLM", Hidden: 64, Intermediate: 96, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 80, Tied: true, Seed: 5}
	res, _ := convertFixture(t, spec, Options{Bits: "ternary", EmbeddingBits: "bf16", OutputBits: "bf16", NoValidate: true})
	formats := map[string]string{}
	for _, e := range res.Manifest.Tensors {
		formats[e.Name] = e.Format
	}
	if formats["model.embed_tokens.weight"] != "bf16" || formats["model.layers.0.mlp.down_proj.weight"] != "tq2" {
		t.Fatalf("formats %v", formats)
	}
	m, err := model.Load(context.Background(), res.OutDir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := logitsOf(t, m); len(l) != 6*spec.Vocab {
		t.Fatalf("%d logits", len(l))
	}
}
