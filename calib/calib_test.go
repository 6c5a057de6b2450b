package calib

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/tokenizer"
)

var ctx = context.Background()

// load writes spec as a model directory and loads it with its tokenizer.
func load(t *testing.T, spec fixture.Spec) (*model.Model, tokenizer.Tokenizer) {
	t.Helper()
	dir := t.TempDir()
	if err := spec.Write(dir); err != nil {
		t.Fatal(err)
	}
	return loadDir(t, dir)
}

func loadDir(t *testing.T, dir string) (*model.Model, tokenizer.Tokenizer) {
	t.Helper()
	m, err := model.Load(ctx, dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// TestFirstSiteExact: layer 0's q, k and v read the embeddings of the text's
// tokens through the input norm; their statistics are those rows' column
// mean squares, computed here directly.
func TestFirstSiteExact(t *testing.T) {
	m, tok := load(t, fixture.Llama())
	const text = "the cat sat on the mat and then it ran to the door"
	st, err := Collect(ctx, m, tok, Options{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.Encode(text, false)
	if tokenizer.AddBOS(tok) {
		ids = append([]int{tok.BOS()}, ids...)
	}
	if st.Tokens != len(ids) {
		t.Errorf("Tokens %d, want %d", st.Tokens, len(ids))
	}
	c := m.Config
	emb, gain := m.Weights["model.embed_tokens.weight"], m.Weights["model.layers.0.input_layernorm.weight"].F32
	want := make([]float64, c.HiddenSize)
	row := make([]float32, c.HiddenSize)
	for _, id := range ids {
		emb.Row(id, row)
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(len(row))+c.RMSNormEps)
		for j, v := range row {
			x := float64(gain[j]) * float64(v) * inv
			want[j] += x * x / float64(len(ids))
		}
	}
	for _, name := range []string{"q_proj", "k_proj", "v_proj"} {
		got := st.MeanSq["model.layers.0.self_attn."+name+".weight"]
		if len(got) != c.HiddenSize {
			t.Fatalf("%s: %d columns, want %d", name, len(got), c.HiddenSize)
		}
		for j := range want {
			if math.Abs(float64(got[j])-want[j]) > 1e-5*want[j]+1e-9 {
				t.Fatalf("%s column %d: %v, want %v", name, j, got[j], want[j])
			}
		}
	}
}

// TestEveryFamily: every linear weight of every architecture gets finite,
// non-negative statistics with one value per input column, weights that
// read one input share them, and recording changes no logit.
func TestEveryFamily(t *testing.T) {
	for _, spec := range fixture.Families() {
		t.Run(spec.Arch, func(t *testing.T) {
			m, tok := load(t, spec)
			st, err := Collect(ctx, m, tok, Options{Text: strings.Repeat("the cat sat on the mat. ", 20), Window: 40, Hessians: true})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for name, w := range m.Weights {
				if m.Config.TensorRole(name) != model.RoleLinear {
					continue
				}
				n++
				ms := st.MeanSq[name]
				if len(ms) != w.Cols {
					t.Fatalf("%s: %d statistics for %d columns", name, len(ms), w.Cols)
				}
				var sum float64
				for _, v := range ms {
					if !(v >= 0) || math.IsInf(float64(v), 0) {
						t.Fatalf("%s: statistic %v", name, v)
					}
					sum += float64(v)
				}
				if sum == 0 {
					t.Fatalf("%s: all statistics are 0", name)
				}
				// The Hessian's diagonal is the mean square input; it is symmetric.
				h := st.Hessian[name]
				if len(h) != w.Cols*w.Cols {
					t.Fatalf("%s: a Hessian of %d values for %d columns", name, len(h), w.Cols)
				}
				for i := 0; i < w.Cols; i++ {
					if d := h[i*w.Cols+i]; math.Abs(float64(d-ms[i])) > 1e-4*float64(ms[i])+1e-9 {
						t.Fatalf("%s: Hessian diagonal %d is %v, mean square %v", name, i, d, ms[i])
					}
					for j := 0; j < i; j++ {
						if h[i*w.Cols+j] != h[j*w.Cols+i] {
							t.Fatalf("%s: Hessian not symmetric at %d, %d", name, i, j)
						}
					}
				}
				if u, err := st.Compensation(name); err != nil || len(u) != len(h) {
					t.Fatalf("%s: compensation factor of %d values: %v", name, len(u), err)
				}
				if g := st.Gain[name]; !(g > 0 && g <= 1) {
					t.Fatalf("%s: gain %v, want in (0, 1]: a block's share of the stream its reader sees", name, g)
				}
				imp := st.Importance(name)
				for c, v := range imp {
					if !(v > 0) {
						t.Fatalf("%s: importance of column %d is %v, want > 0 (the floor)", name, c, v)
					}
				}
			}
			if n == 0 || len(st.MeanSq) != n {
				t.Fatalf("%d statistics for %d linear weights", len(st.MeanSq), n)
			}
			if spec.Arch == "LlamaForCausalLM" {
				q, k := st.MeanSq["model.layers.1.self_attn.q_proj.weight"], st.MeanSq["model.layers.1.self_attn.k_proj.weight"]
				g, u := st.MeanSq["model.layers.1.mlp.gate_proj.weight"], st.MeanSq["model.layers.1.mlp.up_proj.weight"]
				if &q[0] == &k[0] || q[0] != k[0] || g[0] != u[0] {
					t.Errorf("weights of one input differ: q %v k %v, gate %v up %v", q[0], k[0], g[0], u[0])
				}
			}
			// The recorder passes every operation on unchanged.
			ids, _ := tok.Encode("the cat sat", true)
			plain, err := m.NewSession(model.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := m.NewSession(model.SessionOptions{Backend: newRecorder(model.NewCPU(0))})
			if err != nil {
				t.Fatal(err)
			}
			a, err := plain.Forward(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			b, err := rec.Forward(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("logit %d: %v with the recorder, %v without", i, b[i], a[i])
				}
			}
		})
	}
}

// TestDefaultTokens: small models read more of the text, a billion
// weights and more the least.
func TestDefaultTokens(t *testing.T) {
	for _, tc := range []struct {
		params int64
		want   int
	}{{0, 4096}, {260_000, 4096}, {100 << 20, 1310}, {1100_000_000, 128}, {7e9, 128}} {
		if got := DefaultTokens(tc.params); got != tc.want {
			t.Errorf("DefaultTokens(%d) = %d, want %d", tc.params, got, tc.want)
		}
	}
}

// TestHessianLimit: Hessians that would not fit are an error, not an
// allocation.
func TestHessianLimit(t *testing.T) {
	m, tok := load(t, fixture.Llama())
	rec := newRecorder(model.NewCPU(0))
	rec.hessians, rec.hessianLimit = true, 50_000
	sess, err := m.NewSession(model.SessionOptions{Backend: rec, Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.Encode("the cat sat", true)
	if _, err := sess.Forward(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if rec.err == nil || !strings.Contains(rec.err.Error(), "too large for error compensation") || rec.hessianBytes <= rec.hessianLimit {
		t.Errorf("err %v after %d bytes", rec.err, rec.hessianBytes)
	}
}

// TestBadText: an empty text or one outside the vocabulary is an error.
func TestBadText(t *testing.T) {
	m, tok := load(t, fixture.Llama())
	if _, err := Collect(ctx, m, tok, Options{Text: "  \n "}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("blank text: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Collect(ctx, m, tok, Options{}); err == nil {
		t.Error("a cancelled context calibrated anyway")
	}
}

// TestDefaultTextOnStories: the built-in text calibrates the real
// stories260K model: every linear weight gets statistics, from the
// default number of tokens.
func TestDefaultTextOnStories(t *testing.T) {
	dir := filepath.Join(testmodels.Dir(t), "stories260K-hf")
	m, tok := loadDir(t, dir)
	st, err := Collect(ctx, m, tok, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.MeanSq) != 35 {
		t.Errorf("%d weights measured, want stories260K's 35", len(st.MeanSq))
	}
	// A model this small reads the whole text, BOS opening each window of
	// DefaultWindow-1 text tokens.
	ids, _ := tok.Encode(DefaultText, false)
	if want := len(ids) + (len(ids)+DefaultWindow-2)/(DefaultWindow-1); len(ids) > maxDefaultTokens || st.Tokens != want {
		t.Errorf("%d tokens of a text of %d, want %d", st.Tokens, len(ids), want)
	}
	if st.TextSHA256 != TextHash(DefaultText) {
		t.Error("the text hash is not the built-in text's")
	}
}
