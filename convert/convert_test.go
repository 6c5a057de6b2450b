package convert

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
	"lowbit/validate"
)

// convertFixture writes a generated model and converts it.
func convertFixture(t *testing.T, spec fixture.Spec, opts Options) (*Result, string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := spec.Write(src); err != nil {
		t.Fatal(err)
	}
	opts.Source = src
	if opts.Out == "" {
		opts.Out = filepath.Join(t.TempDir(), "out")
	}
	res, err := Run(context.Background(), opts)
	if err != nil && !errors.Is(err, ErrValidation) { // random weights may fail the accuracy bars
		t.Fatalf("convert: %v", err)
	}
	return res, src
}

func TestConvertEveryBits(t *testing.T) {
	tests := []struct {
		bits   string
		format quantize.Format
		maxErr float64 // relative L2 error bound of linear weights (heavy-tailed fixture weights)
	}{
		{"8", quantize.Q8, 0.02},
		{"4", quantize.Q4, 0.15},
		{"2", quantize.Q2, 0.6},
		{"1", quantize.Q1, 0.9},
		{"ternary", quantize.TQ2, 0.9},
	}
	for _, tc := range tests {
		t.Run(tc.bits, func(t *testing.T) {
			res, src := convertFixture(t, fixture.Llama(), Options{Bits: tc.bits})
			m, err := manifest.Read(res.OutDir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Quantization.Format != string(tc.format) {
				t.Errorf("format %s, want %s", m.Quantization.Format, tc.format)
			}
			checkStored(t, res.OutDir, m)
			spec := fixture.Llama()
			for name, shape := range spec.Tensors() {
				e, ok := m.Tensor(name)
				if !ok {
					t.Fatalf("tensor %s missing from manifest", name)
				}
				switch {
				case len(shape) == 1:
					if e.Format != "f32" {
						t.Errorf("%s: norm stored as %s, want f32", name, e.Format)
					}
				case strings.Contains(name, "embed_tokens") || strings.Contains(name, "lm_head"):
					if e.Format != "q8" || e.GroupSize != 128 {
						t.Errorf("%s: stored as %s in groups of %d, want q8 in groups of 128", name, e.Format, e.GroupSize)
					}
				default:
					if e.Format != string(tc.format) {
						t.Errorf("%s: stored as %s, want %s", name, e.Format, tc.format)
					}
					if e.RelL2Error == nil || *e.RelL2Error > tc.maxErr || *e.RelL2Error <= 0 {
						t.Errorf("%s: rel error %v, want in (0, %v]", name, e.RelL2Error, tc.maxErr)
					}
					checkDequant(t, res.OutDir, m, e, spec.Weights(name, shape), *e.RelL2Error)
				}
			}
			for _, f := range []string{"config.json", "generation_config.json", manifest.FileName, "model.safetensors"} {
				if _, err := os.Stat(filepath.Join(res.OutDir, f)); err != nil {
					t.Errorf("output lacks %s: %v", f, err)
				}
			}
			if len(m.Source.Files) == 0 || m.Source.Dir == "" || !strings.HasSuffix(m.Source.Dir, filepath.Base(src)) {
				t.Errorf("source record %+v", m.Source)
			}
		})
	}
}

// TestConvertBlockFormats converts to each of GGUF's block formats: a
// model whose rows are whole 256-weight blocks stores its linear weights
// in the format, as one qweight part each; one whose rows are not falls
// back, tensor by tensor, saying so in the manifest and the notes.
func TestConvertBlockFormats(t *testing.T) {
	whole := fixture.Llama()
	whole.Hidden, whole.Intermediate, whole.HeadDim = 256, 512, 64
	for _, f := range []quantize.Format{quantize.Q5_0, quantize.Q5_1, quantize.Q2K, quantize.Q3K, quantize.Q4K, quantize.Q5K, quantize.Q6K} {
		t.Run(string(f), func(t *testing.T) {
			res, _ := convertFixture(t, whole, Options{Bits: strings.ToUpper(string(f)), NoValidate: true})
			m, err := manifest.Read(res.OutDir)
			if err != nil {
				t.Fatal(err)
			}
			checkStored(t, res.OutDir, m)
			if m.Quantization.Format != string(f) || len(res.Notes) != 0 {
				t.Errorf("format %s, notes %q", m.Quantization.Format, res.Notes)
			}
			for name, shape := range whole.Tensors() {
				e, _ := m.Tensor(name)
				if len(shape) != 2 || strings.Contains(name, "embed_tokens") || strings.Contains(name, "lm_head") {
					continue
				}
				if e.Format != string(f) || e.GroupSize != f.Spec().Block || len(e.Parts) != 1 || e.Parts[0].Role != manifest.RoleQWeight || e.FallbackFrom != "" {
					t.Errorf("%s: stored as %s in groups of %d, parts %+v, fallback from %q", name, e.Format, e.GroupSize, e.Parts, e.FallbackFrom)
				}
				checkDequant(t, res.OutDir, m, e, whole.Weights(name, shape), *e.RelL2Error)
			}
			if _, err := model.Load(context.Background(), res.OutDir, model.LoadOptions{}); err != nil {
				t.Fatal(err)
			}

			odd := fixture.Llama() // rows of 48 and 80: whole blocks of no block format
			res, _ = convertFixture(t, odd, Options{Bits: string(f), NoValidate: true})
			if m, err = manifest.Read(res.OutDir); err != nil {
				t.Fatal(err)
			}
			fb := f.Spec().Fallback
			for name, shape := range odd.Tensors() {
				e, _ := m.Tensor(name)
				if len(shape) != 2 || strings.Contains(name, "embed_tokens") || strings.Contains(name, "lm_head") {
					continue
				}
				if e.Format != string(fb) || e.FallbackFrom != string(f) {
					t.Errorf("%s: stored as %s, fallback from %q; want %s from %s", name, e.Format, e.FallbackFrom, fb, f)
				}
			}
			want := "not whole " + fmt.Sprint(f.Spec().Block) + "-weight blocks of " + string(f) + "; stored as " + string(fb)
			if len(res.Notes) != 2 || !strings.Contains(res.Notes[0], want) || !strings.Contains(res.Notes[1], want) ||
				!strings.Contains(res.Notes[1], " and 7 more: rows of 48 weights") {
				t.Errorf("notes %q, want two (rows of 80, rows of 48) saying %q", res.Notes, want)
			}
		})
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := whole.Write(src); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{Source: src, Out: filepath.Join(t.TempDir(), "out"), Bits: "q4k", GroupSize: 64})
	if err == nil || !strings.Contains(err.Error(), "--group-size 64: q4k has 256-weight blocks") {
		t.Errorf("q4k with --group-size 64: %v", err)
	}
}

// checkStored verifies every part's offsets and sha256 against the file.
func checkStored(t *testing.T, dir string, m *manifest.Manifest) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, e := range m.Tensors {
		for _, p := range e.Parts {
			data, err := st.Data(p.Tensor)
			if err != nil {
				t.Fatalf("%s: %v", p.Tensor, err)
			}
			if got := string(raw[p.Offsets[0]:p.Offsets[1]]); got != string(data) {
				t.Fatalf("%s: manifest offsets %v do not address its data", p.Tensor, p.Offsets)
			}
			if sum := sha256Hex(data); sum != p.SHA256 {
				t.Fatalf("%s: sha256 %s, manifest says %s", p.Tensor, sum, p.SHA256)
			}
		}
	}
}

// checkDequant rebuilds a quantized tensor from its stored parts and checks
// its error against the original weights is what the manifest says.
func checkDequant(t *testing.T, dir string, m *manifest.Manifest, e *manifest.Tensor, orig []float32, want float64) {
	t.Helper()
	d, err := manifest.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	q, err := d.Weight(e.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := quantize.RelL2(orig, q.Dequantize())
	if math.Abs(got-want) > 1e-6*math.Max(1, want) {
		t.Errorf("%s: dequantized error %v, manifest says %v", e.Name, got, want)
	}
}

// TestTableGroupSize: the embeddings' and head's group follows
// --table-group-size, else 128 at 8 bits, else the linear weights' group.
func TestTableGroupSize(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		embed, head int // groups in the manifest
		err         string
	}{
		{"8-bit tables", Options{Bits: "4", GroupSize: 64}, 128, 128, ""},
		{"given", Options{Bits: "4", TableGroupSize: 32}, 32, 32, ""},
		{"4-bit tables follow --group-size", Options{Bits: "2", GroupSize: 64, EmbeddingBits: "4"}, 64, 128, ""},
		{"4-bit tables of a ternary model", Options{Bits: "ternary", EmbeddingBits: "4", OutputBits: "4"}, 32, 32, ""},
		{"float head", Options{Bits: "4", OutputBits: "f16"}, 128, 0, ""},
		{"not a multiple of 32", Options{Bits: "4", TableGroupSize: 48}, 0, 0, "--table-group-size 48 must be a multiple of 32"},
		{"negative", Options{Bits: "4", TableGroupSize: -32}, 0, 0, "--table-group-size -32 must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			if err := fixture.Llama().Write(src); err != nil {
				t.Fatal(err)
			}
			opts := tc.opts
			opts.Source, opts.Out, opts.NoValidate = src, filepath.Join(t.TempDir(), "out"), true
			res, err := Run(context.Background(), opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m, err := manifest.Read(res.OutDir)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]int{"model.embed_tokens.weight": tc.embed, "lm_head.weight": tc.head} {
				if e, ok := m.Tensor(name); !ok || e.GroupSize != want {
					t.Errorf("%s: %+v, want group %d", name, e, want)
				}
			}
		})
	}
}

func TestConvertShardedBF16(t *testing.T) {
	spec := fixture.Llama()
	spec.Shards, spec.DType = 3, "BF16"
	res, _ := convertFixture(t, spec, Options{Bits: "4", NPZ: true})
	m, err := manifest.Read(res.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tensors) != len(spec.Tensors()) {
		t.Errorf("%d tensors, want %d", len(m.Tensors), len(spec.Tensors()))
	}
	if e, _ := m.Tensor("model.norm.weight"); e.SourceDType != "BF16" || e.Format != "f32" {
		t.Errorf("norm: %+v", e)
	}
	if _, err := os.Stat(filepath.Join(res.OutDir, "model.npz")); err != nil {
		t.Errorf("--format npz wrote no model.npz: %v", err)
	}
}

func TestConvertRefusesAndCleansUp(t *testing.T) {
	spec := fixture.Llama()
	src := filepath.Join(t.TempDir(), "src")
	if err := spec.Write(src); err != nil {
		t.Fatal(err)
	}
	outParent := t.TempDir()
	out := filepath.Join(outParent, "out")
	if _, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "4", NoValidate: true}); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "4", NoValidate: true})
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second convert without --force: %v", err)
	}
	if _, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "2", Force: true, NoValidate: true}); err != nil {
		t.Fatalf("--force: %v", err)
	}
	if m, err := manifest.Read(out); err != nil || m.Quantization.Format != "q2" {
		t.Fatalf("after --force: %v %v", m, err)
	}

	// A cancelled convert leaves nothing behind.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Run(ctx, Options{Source: src, Out: filepath.Join(outParent, "cancelled"), Bits: "4", NoValidate: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled convert: %v", err)
	}
	ents, _ := os.ReadDir(outParent)
	if len(ents) != 1 || ents[0].Name() != "out" {
		t.Fatalf("output parent holds %v, want only out", ents)
	}
}

func TestConvertBadInput(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(dir string) error
		want   string
	}{
		{"unknown architecture", func(dir string) error {
			return rewrite(filepath.Join(dir, "config.json"), `"LlamaForCausalLM"`, `"GPT2LMHeadModel"`)
		}, "LlamaForCausalLM"},
		{"missing field", func(dir string) error {
			return rewrite(filepath.Join(dir, "config.json"), `"hidden_size"`, `"hidden_sighs"`)
		}, "hidden_size"},
		{"missing config", func(dir string) error { return os.Remove(filepath.Join(dir, "config.json")) }, "config.json"},
		{"truncated weights", func(dir string) error {
			p := filepath.Join(dir, "model.safetensors")
			st, _ := os.Stat(p)
			return os.Truncate(p, st.Size()-10)
		}, "model.safetensors"},
		{"no weights", func(dir string) error { return os.Remove(filepath.Join(dir, "model.safetensors")) }, "safetensors"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			if err := fixture.Llama().Write(src); err != nil {
				t.Fatal(err)
			}
			if err := tc.break_(src); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "out")
			_, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "4"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			if _, serr := os.Stat(out); serr == nil {
				t.Fatal("a failed convert left an output directory")
			}
		})
	}
}

func TestConvertNonFinite(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	spec := fixture.Llama()
	if err := spec.Write(src); err != nil {
		t.Fatal(err)
	}
	poisonTensor(t, src, "model.layers.1.mlp.up_proj.weight")
	out := filepath.Join(t.TempDir(), "out")
	_, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "4"})
	if err == nil || !strings.Contains(err.Error(), "model.layers.1.mlp.up_proj.weight") || !strings.Contains(err.Error(), "allow-nonfinite") {
		t.Fatalf("err = %v", err)
	}
	// The source's NaN makes the float reference's figures NaN: the model
	// fails its validation, and the report says so in JSON all the same.
	if _, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "4", AllowNonFinite: true}); err != nil && !errors.Is(err, ErrValidation) {
		t.Fatalf("with --allow-nonfinite: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, validationFile)); err != nil {
		t.Errorf("no validation report: %v", err)
	}
}

// TestConvertStories converts the real stories260K model at every --bits.
// Its last stage validates: 8 and 4 bits keep this 260K-parameter model; 2, 1
// and ternary bits (without training for them) do not, and the convert says
// so while leaving the model and its report in place.
func TestConvertStories(t *testing.T) {
	src := testmodels.Path(t, "stories260K-hf")
	for _, c := range []struct {
		bits string
		pass bool
	}{{"8", true}, {"4", true}, {"2", false}, {"1", false}, {"ternary", false}} {
		bits := c.bits
		t.Run(bits, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			res, err := Run(context.Background(), Options{Source: src, Out: out, Bits: bits})
			if c.pass && err != nil || !c.pass && !errors.Is(err, ErrValidation) {
				t.Fatalf("err = %v", err)
			}
			v := res.Validation
			if v == nil || v.Model == nil || v.Kernels == nil || !v.Kernels.Passed() || (v.Status == validate.Pass) != c.pass {
				t.Fatalf("validation report %+v", v)
			}
			if _, err := os.Stat(filepath.Join(out, validationFile)); err != nil {
				t.Error(err)
			}
			m, err := manifest.Read(out)
			if err != nil {
				t.Fatal(err)
			}
			checkStored(t, out, m)
			if res.Summary.Parameters != 260032 {
				t.Errorf("parameters %d, want 260032", res.Summary.Parameters)
			}
			for _, f := range []string{"tokenizer.model", "tokenizer_config.json"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("tokenizer file %s not copied", f)
				}
			}
			t.Logf("bits %s: %.2f bits/weight, mean rel error %.4f, max %.4f (%s); KLD %.4f, top-1 %.1f%%", bits,
				res.Summary.BitsPerWeight, res.Summary.MeanRelL2Error, res.Summary.MaxRelL2Error, res.Summary.MaxErrorTensor,
				v.Model.KLDMean, 100*v.Model.Top1)
		})
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// rewrite replaces old with new in a file.
func rewrite(path, old, new string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644)
}

// poisonTensor sets one weight of a F32 tensor to NaN in place.
func poisonTensor(t *testing.T, dir, name string) {
	t.Helper()
	setWeight(t, dir, name, float32(math.NaN()))
}

// setWeight sets the eighth weight of a F32 tensor (row 0, column 7) in place.
func setWeight(t *testing.T, dir, name string, v float32) {
	t.Helper()
	p := filepath.Join(dir, "model.safetensors")
	st, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(name)
	off := st.DataOffset() + info.Begin + 4*7
	st.Close()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)), off); err != nil {
		t.Fatal(err)
	}
}

// TestConvertFamilies converts a small model of every architecture at q4,
// validates it against its float source and runs the result: each
// family's extra tensors (biases, q/k norms, sandwich norms, joined
// products) are planned, stored and read back.
func TestConvertFamilies(t *testing.T) {
	for _, spec := range fixture.Families() {
		t.Run(strings.TrimSuffix(spec.Arch, "ForCausalLM"), func(t *testing.T) {
			res, _ := convertFixture(t, spec, Options{Bits: "4"})
			mf, err := manifest.Read(res.OutDir)
			if err != nil {
				t.Fatal(err)
			}
			for name, shape := range spec.Tensors() {
				e, ok := mf.Tensor(name)
				if !ok {
					t.Fatalf("tensor %s missing from the manifest", name)
				}
				if len(shape) == 1 && e.Format != "f32" {
					t.Errorf("%s: a vector stored as %s, want f32", name, e.Format)
				}
			}
			if res.Validation == nil || res.Validation.Model == nil {
				t.Fatalf("no model validation: %+v", res.Validation)
			}
			m, err := model.Load(context.Background(), res.OutDir, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s, err := m.NewSession(model.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			st, err := model.Generate(context.Background(), s, []int{1, 5, 9}, model.GenerateOptions{MaxTokens: 8})
			if err != nil || st.GeneratedTokens == 0 {
				t.Fatalf("generate: %v (%d tokens)", err, st.GeneratedTokens)
			}
		})
	}
}

// TestConvertTiedStoredAsHead converts a tied model whose checkpoint holds
// the table only under lm_head.weight: it is stored as the embedding.
func TestConvertTiedStoredAsHead(t *testing.T) {
	spec := fixture.Llama()
	spec.Tied, spec.TiedAsHead = true, true
	res, _ := convertFixture(t, spec, Options{Bits: "8"})
	mf, err := manifest.Read(res.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mf.Tensor("model.embed_tokens.weight"); !ok {
		t.Fatal("the tied table is not stored as model.embed_tokens.weight")
	}
	if _, ok := mf.Tensor("lm_head.weight"); ok {
		t.Fatal("the tied table is stored twice")
	}
	if _, err := model.Load(context.Background(), res.OutDir, model.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
}
