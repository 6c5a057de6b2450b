package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"lowbit/half"
	"lowbit/quantize"
)

// randomQuantized builds a quantized [rows, cols] weight with random codes
// and small random scales: the same bytes and work as a converted weight,
// made in a fraction of the time of quantizing random floats.
//
// A block format's blocks carry their scales: eight rows of random weights
// are quantized and their bytes repeated down the matrix.
func randomQuantized(r *rand.Rand, f quantize.Format, rows, cols int) *Weight {
	if f.Spec().BlockScales {
		n := min(rows, 8)
		w := make([]float32, n*cols)
		for i := range w {
			w[i] = float32(r.NormFloat64() * 0.02)
		}
		q, err := quantize.Quantize(context.Background(), f, w, n, cols, quantize.Options{})
		if err != nil {
			panic(err)
		}
		rb := q.RowBytes()
		data := make([]byte, rows*rb)
		for i := range rows {
			copy(data[i*rb:], q.Data[i%n*rb:(i%n+1)*rb])
		}
		q.Rows, q.Data = rows, data
		return QuantWeight(q)
	}
	t := &quantize.Tensor{Format: f, Rows: rows, Cols: cols, GroupSize: f.DefaultGroupSize()}
	t.Data = make([]byte, rows*t.RowBytes())
	for i := range t.Data {
		t.Data[i] = byte(r.Uint32())
	}
	if f == quantize.TQ2 {
		t.Scale = 0.01
		return QuantWeight(t)
	}
	t.Scales = make([]half.Float16, rows*t.Groups())
	for i := range t.Scales {
		t.Scales[i] = half.FromFloat32(0.001 + 0.002*r.Float32())
	}
	if f == quantize.Q4 || f == quantize.Q2 {
		t.Mins = make([]half.Float16, len(t.Scales))
		for i := range t.Mins {
			t.Mins[i] = half.FromFloat32(-0.01 * r.Float32())
		}
	}
	return QuantWeight(t)
}

// tinyLlamaShaped is TinyLlama-1.1B's configuration (22 layers, vocab 32000).
func tinyLlamaShaped(tb testing.TB) Config {
	c, err := ParseHFConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":22,"num_attention_heads":32,"num_key_value_heads":4,"vocab_size":32000,"max_position_embeddings":2048,"rms_norm_eps":1e-05,"rope_theta":10000.0,"hidden_act":"silu","tie_word_embeddings":false}`))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// randomModel fills a configuration with random weights: linear weights in
// format f, embedding and head in q8, norms near 1.
func randomModel(tb testing.TB, c Config, f quantize.Format) *Model {
	r := rand.New(rand.NewPCG(1, 2))
	w := map[string]*Weight{}
	for _, name := range c.ExpectedTensors() {
		s := c.TensorShape(name)
		switch c.TensorRole(name) {
		case RoleNorm:
			g := make([]float32, s[0])
			for i := range g {
				g[i] = 1 + 0.1*r.Float32()
			}
			w[name] = FloatWeight(1, len(g), g)
		case RoleLinear:
			w[name] = randomQuantized(r, f, int(s[0]), int(s[1]))
		default:
			w[name] = randomQuantized(r, quantize.Q8, int(s[0]), int(s[1]))
		}
	}
	m, err := New(c, w)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkDecode measures decode tokens/s of a TinyLlama-1.1B-shaped model
// (one op = one token at position ~16, after a 16-token prefill).
func BenchmarkDecode(b *testing.B) {
	for _, f := range []quantize.Format{quantize.Q4, quantize.Q8, quantize.Q2, quantize.TQ2, quantize.Q4K, quantize.Q6K} {
		b.Run("tinyllama-"+string(f), func(b *testing.B) {
			m := randomModel(b, tinyLlamaShaped(b), f)
			s, err := m.NewSession(SessionOptions{Context: 512})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			prompt := make([]int, 16)
			for i := range prompt {
				prompt[i] = 100 + i
			}
			if _, err := s.Forward(ctx, prompt); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(m.WeightBytes())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if s.Pos() >= s.Context()-1 {
					s.Reset()
				}
				if _, err := s.Forward(ctx, []int{200 + i%1000}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(m.WeightBytes())/1e6, "MB-weights")
		})
	}
}

// BenchmarkPrefill measures prompt tokens/s of the same model (64 tokens a batch).
func BenchmarkPrefill(b *testing.B) {
	for _, f := range []quantize.Format{quantize.Q4, quantize.Q8} {
		b.Run(fmt.Sprintf("tinyllama-%s-64", f), func(b *testing.B) {
			m := randomModel(b, tinyLlamaShaped(b), f)
			s, err := m.NewSession(SessionOptions{Context: 512})
			if err != nil {
				b.Fatal(err)
			}
			prompt := make([]int, 64)
			for i := range prompt {
				prompt[i] = 100 + i
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s.Reset()
				if _, err := s.Forward(context.Background(), prompt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
