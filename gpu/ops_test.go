package gpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"lowbit/model"
	"lowbit/quantize"
)

// up copies host values to a new scratch buffer, padded with zeros to pad
// values.
func up[T float32 | int32](t *testing.T, d *Device, v []T, pad int) Buffer {
	t.Helper()
	var b Buffer
	err := d.do(func() (err error) {
		b, err = d.uploadNew(bytesOf(v), int64(4*max(pad, len(v))), MemScratch)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	return b
}

// down copies n values back after the queued work is done.
func down[T float32 | int32](t *testing.T, d *Device, b Buffer, n int) []T {
	t.Helper()
	out := make([]T, n)
	if err := d.do(func() error { return d.dtoh(bytesOf(out), b, 0) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// run runs fn on the device thread and waits for its work. fn must not
// call Device methods that go through do (up, down, Alloc...): the device
// thread would wait on itself.
func run(t *testing.T, d *Device, fn func() error) {
	t.Helper()
	if err := d.do(func() error {
		if err := fn(); err != nil {
			return err
		}
		return d.sync()
	}); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, what string, ref []float64, got []float32, tol float64) {
	t.Helper()
	if e := relL2(ref, got); e > tol {
		t.Errorf("%s: relative L2 %.3g over %.g", what, e, tol)
	}
}

func TestOps(t *testing.T) {
	d := openOrSkip(t)
	r := rand.New(rand.NewPCG(11, 12))

	t.Run("rmsnorm", func(t *testing.T) {
		rows, n := 3, 2048
		x, w := gaussian(r, rows*n), gaussian(r, n)
		y := up(t, d, make([]float32, rows*n), 0)
		for _, wAdd := range []float32{0, 1} {
			xb, wb := up(t, d, x, 0), up(t, d, w, 0)
			run(t, d, func() error { return d.rmsnorm(xb, wb, y, rows, n, 1e-5, wAdd) })
			ref := make([]float64, rows*n)
			for i := 0; i < rows; i++ {
				var ss float64
				for _, v := range x[i*n : (i+1)*n] {
					ss += float64(v) * float64(v)
				}
				s := 1 / math.Sqrt(ss/float64(n)+1e-5)
				for j := 0; j < n; j++ {
					ref[i*n+j] = float64(x[i*n+j]) * s * (float64(w[j]) + float64(wAdd))
				}
			}
			check(t, "rmsnorm", ref, down[float32](t, d, y, rows*n), 1e-6)
		}
	})

	t.Run("rope", func(t *testing.T) {
		heads, hd, pos := 4, 64, int32(37)
		v := gaussian(r, heads*hd)
		// The table: each pair's frequency, then its factor (the last
		// pairs do not rotate, as under a partial rotation).
		table := make([]float32, hd)
		for i := range hd / 2 {
			table[i] = float32(math.Pow(10000, -2*float64(i)/float64(hd)))
			table[hd/2+i] = 1.25
			if i >= hd/2-4 {
				table[i], table[hd/2+i] = 0, 1
			}
		}
		vb := up(t, d, v, 0)
		pb, ib := up(t, d, []int32{pos}, 0), up(t, d, table, 0)
		run(t, d, func() error { return d.rope(vb, 1, heads, hd, pb, ib) })
		ref := make([]float64, heads*hd)
		for h := 0; h < heads; h++ {
			for i := 0; i < hd/2; i++ {
				a, b := float64(v[h*hd+i]), float64(v[h*hd+i+hd/2])
				ang, f := float64(pos)*float64(table[i]), float64(table[hd/2+i])
				ref[h*hd+i] = f * (a*math.Cos(ang) - b*math.Sin(ang))
				ref[h*hd+i+hd/2] = f * (b*math.Cos(ang) + a*math.Sin(ang))
			}
		}
		check(t, "rope", ref, down[float32](t, d, vb, heads*hd), 1e-5)
	})

	for _, typ := range []model.KVType{model.KVF32, model.KVF16, model.KVQ8} {
		t.Run("attention/"+typ.String(), func(t *testing.T) {
			heads, kvHeads, hd, maxSeq := 8, 2, 64, 300
			kvdim := kvHeads * hd
			rows := newKVRows(t, d, typ, maxSeq, kvHeads, hd)
			K, V := gaussian(r, maxSeq*kvdim), gaussian(r, maxSeq*kvdim)
			posb := up(t, d, []int32{0}, 0)
			n := 257
			for p := 0; p < n; p++ { // fill the cache the way decode does
				pb := up(t, d, []int32{int32(p)}, 0)
				kb, vb := up(t, d, K[p*kvdim:(p+1)*kvdim], 0), up(t, d, V[p*kvdim:(p+1)*kvdim], 0)
				run(t, d, func() error { return d.kvStore(kb, vb, rows, 1, kvHeads, hd, pb) })
			}
			run(t, d, func() error { return d.htod(posb, 0, bytesOf([]int32{int32(n - 1)})) })
			q := gaussian(r, heads*hd)
			out := up(t, d, make([]float32, heads*hd), 0)
			scale := float32(1 / math.Sqrt(float64(hd)))
			qb := up(t, d, q, 0)
			run(t, d, func() error {
				return d.attention(qb, rows, out, 1, heads, kvHeads, hd, maxSeq, posb, scale, 0, 0, Buffer{}, Buffer{})
			})
			K, V = kvRounded(typ, K, hd), kvRounded(typ, V, hd)
			ref := make([]float64, heads*hd)
			for h := 0; h < heads; h++ {
				attendRef(ref[h*hd:(h+1)*hd], q[h*hd:], K, V, kvdim, (h/(heads/kvHeads))*hd, 0, n-1, scale)
			}
			check(t, "attention", ref, down[float32](t, d, out, heads*hd), 1e-5)
		})
	}

	t.Run("glu", func(t *testing.T) {
		n := 5000
		g, u := gaussian(r, n), gaussian(r, n)
		out := up(t, d, make([]float32, n), 0)
		for act := SwiGLU; act <= ReLU2GLU; act++ {
			gb, ub := up(t, d, g, 0), up(t, d, u, 0)
			run(t, d, func() error { return d.glu(gb, ub, out, n, act) })
			ref := make([]float64, n)
			for i := range ref {
				x := float64(g[i])
				var a float64
				switch act {
				case SwiGLU:
					a = x / (1 + math.Exp(-x))
				case GeGLU:
					a = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
				case ReLU2GLU:
					a = math.Max(x, 0) * math.Max(x, 0)
				}
				ref[i] = a * float64(u[i])
			}
			check(t, "glu", ref, down[float32](t, d, out, n), 1e-6)
		}
	})

	t.Run("add", func(t *testing.T) {
		n := 3000
		x, y := gaussian(r, n), gaussian(r, n)
		xb := up(t, d, x, 0)
		yb := up(t, d, y, 0)
		run(t, d, func() error { return d.add(xb, yb, n) })
		ref := make([]float64, n)
		for i := range ref {
			ref[i] = float64(x[i] + y[i])
		}
		check(t, "add", ref, down[float32](t, d, xb, n), 0)
	})

	t.Run("embed", func(t *testing.T) {
		vocab, dim := 100, 200
		w := gaussian(r, vocab*dim)
		tok := up(t, d, []int32{42}, 0)
		out := up(t, d, make([]float32, dim), 0)
		mf, err := d.UploadFloat(quantize.F32, w, vocab, dim)
		if err != nil {
			t.Fatal(err)
		}
		defer d.FreeMatrix(mf)
		run(t, d, func() error { return d.embed(mf, 1, tok, out, 1) })
		check(t, "embed f32", f64(w[42*dim:43*dim]), down[float32](t, d, out, dim), 0)
		// Gemma's scale, rounded as the CPU rounds it (one float32 product).
		run(t, d, func() error { return d.embed(mf, 1, tok, out, 3.5) })
		scaled := make([]float64, dim)
		for i, v := range w[42*dim : 43*dim] {
			scaled[i] = float64(v * 3.5)
		}
		check(t, "embed f32 scaled", scaled, down[float32](t, d, out, dim), 0)
		qt, err := quantize.Quantize(context.Background(), quantize.Q8, w, vocab, dim, quantize.Options{})
		if err != nil {
			t.Fatal(err)
		}
		mq, err := d.Upload(qt)
		if err != nil {
			t.Fatal(err)
		}
		defer d.FreeMatrix(mq)
		run(t, d, func() error { return d.embed(mq, 1, tok, out, 1) })
		row := make([]float32, dim)
		qt.DequantizeRow(42, row)
		check(t, "embed q8", f64(row), down[float32](t, d, out, dim), 0)
	})

	t.Run("argmax", func(t *testing.T) {
		for _, n := range []int{1, 31, 32000, 128256} {
			x := gaussian(r, n)
			want := r.IntN(n)
			x[want] = 10
			if n > 2 {
				x[n-1] = 10 // a tie: the first index (want) wins
				if i := r.IntN(n); i != want && i != n-1 {
					x[i] = float32(math.NaN()) // NaNs never win
				}
			}
			ob := up(t, d, []int32{-1}, 0)
			xb := up(t, d, x, 0)
			run(t, d, func() error { return d.argmax(xb, n, ob) })
			if got := down[int32](t, d, ob, 1)[0]; int(got) != want {
				t.Errorf("argmax of %d values = %d, want %d", n, got, want)
			}
		}
	})
}
