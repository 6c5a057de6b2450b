package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lowbit/half"
	"lowbit/model"
	"lowbit/quantize"
)

// benchShapes are the decode products of TinyLlama-1.1B, Llama-2-7B and
// BitNet-2B-4T as the backend runs them: q/k/v and gate/up fused, then
// o, down and the head (BitNet-2B's at 8 bits).
var benchShapes = []struct {
	model      string
	rows, cols int
}{
	{"tinyllama", 2560, 2048}, {"tinyllama", 2048, 2048}, {"tinyllama", 11264, 2048}, {"tinyllama", 2048, 5632},
	{"tinyllama", 32000, 2048}, {"llama7b", 12288, 4096}, {"llama7b", 4096, 4096}, {"llama7b", 22016, 4096},
	{"llama7b", 4096, 11008}, {"llama7b", 32000, 4096}, {"bitnet2b", 3840, 2560}, {"bitnet2b", 2560, 2560},
	{"bitnet2b", 13824, 2560}, {"bitnet2b", 2560, 6912}, {"bitnet2b", 128256, 2560},
}

// randomTensor builds a tensor of format f with random packed codes and
// plausible scales: speed does not depend on the values, and quantizing
// the 7B shapes on the CPU would dominate the benchmark's run time. Heads
// (32000 rows or more) have the groups convert gives them
// (TableGroupSize), the others the format's default. A block format's
// blocks are random bytes, scales included.
func randomTensor(r *rand.Rand, f quantize.Format, rows, cols int) *quantize.Tensor {
	t := &quantize.Tensor{Format: f, Rows: rows, Cols: cols, GroupSize: f.DefaultGroupSize(), Scale: 0.02}
	if rows >= 32000 {
		t.GroupSize = f.TableGroupSize()
	}
	t.Data = make([]byte, rows*t.RowBytes())
	for i := range t.Data {
		t.Data[i] = byte(r.Uint32())
	}
	if ng := rows * t.Groups(); ng > 0 && !f.Spec().BlockScales {
		t.Scales = make([]half.Float16, ng)
		for i := range t.Scales {
			t.Scales[i] = half.FromFloat32(0.01 + 0.01*r.Float32())
		}
		if f == quantize.Q4 || f == quantize.Q2 {
			t.Mins = make([]half.Float16, ng)
			for i := range t.Mins {
				t.Mins[i] = half.FromFloat32(-0.05 * r.Float32())
			}
		}
	}
	return t
}

// BenchmarkMatVec times the decode product of every format on the
// TinyLlama and Llama-2-7B layer shapes. Each replay of a CUDA graph runs
// the product over enough copies of the matrix (at least 256 MiB in all)
// that the 50 MB L2 cache holds none of them, and CUDA events time the
// replays. Reported: microseconds per product, weight bytes read per
// second, and that rate over the measured device-to-device copy rate.
func BenchmarkMatVec(b *testing.B) {
	d := openOrSkip(b)
	copyBW, err := d.CopyBandwidth(1<<30, 20)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: device-to-device copy %.0f GB/s (bytes read + written)", d, copyBW/1e9)
	r := rand.New(rand.NewPCG(7, 8))
	type variant struct {
		name string
		f    quantize.Format
		act  Activations
		k    matvecKernel // fixed kernel (see Device.matvecMode; zero: chosen by shape)
	}
	variants := []variant{
		{"f16", quantize.F16, ActFloat, matvecKernel{}}, {"q8", quantize.Q8, ActFloat, matvecKernel{}},
		{"q8-a8", quantize.Q8, ActInt8, matvecKernel{}}, {"q4", quantize.Q4, ActFloat, matvecKernel{}},
		{"q2", quantize.Q2, ActFloat, matvecKernel{}}, {"q1", quantize.Q1, ActFloat, matvecKernel{}},
		{"q1-bin", quantize.Q1, ActBinary, matvecKernel{}}, {"tq2", quantize.TQ2, ActFloat, matvecKernel{}},
		{"tq2-a8", quantize.TQ2, ActInt8, matvecKernel{}}, {"tq2-i8", quantize.TQ2, actStagedInt8, matvecKernel{}},
		{"q4k", quantize.Q4K, ActFloat, matvecKernel{}}, {"q5k", quantize.Q5K, ActFloat, matvecKernel{}},
		{"q6k", quantize.Q6K, ActFloat, matvecKernel{}}, {"q5_0", quantize.Q5_0, ActFloat, matvecKernel{}},
		{"q5_1", quantize.Q5_1, ActFloat, matvecKernel{}},
	}
	sweep := []variant{}
	for _, f := range []quantize.Format{quantize.F16, quantize.Q8, quantize.Q4, quantize.Q2} {
		for _, k := range append([]matvecKernel{matvecPlain}, matvecKernels...) {
			sweep = append(sweep, variant{fmt.Sprintf("%s-kernel-%s", f, k), f, ActFloat, k})
		}
	}
	for _, k := range matvecKernels {
		sweep = append(sweep, variant{fmt.Sprintf("tq2-i8-kernel-%s", k), quantize.TQ2, actStagedInt8, k})
	}
	for _, sh := range benchShapes {
		vs := variants
		switch {
		case sh.rows < 32000:
			vs = append(vs[:len(vs):len(vs)], sweep...)
		case sh.model == "bitnet2b": // its 8-bit head: which kernel streams it fastest
			for _, v := range sweep {
				if v.f == quantize.Q8 {
					vs = append(vs[:len(vs):len(vs)], v)
				}
			}
		}
		for _, v := range vs {
			b.Run(fmt.Sprintf("%s-%dx%d/%s", sh.model, sh.rows, sh.cols, v.name), func(b *testing.B) {
				var m0 *Matrix
				if v.f == quantize.F16 {
					m0, err = d.UploadFloat(v.f, make([]float32, sh.rows*sh.cols), sh.rows, sh.cols)
				} else {
					m0, err = d.Upload(randomTensor(r, v.f, sh.rows, sh.cols))
				}
				if err != nil {
					b.Fatal(err)
				}
				ms := []*Matrix{m0}
				defer func() {
					for _, m := range ms {
						d.FreeMatrix(m)
					}
				}()
				n := int(max(1, (256<<20)/m0.Bytes()))
				err := d.do(func() error {
					for i := 1; i < n; i++ {
						m := *m0
						var err error
						if m.data, err = d.alloc(m0.data.Size(), MemWeights); err != nil {
							return err
						}
						if err := d.copyDtoD(m.data, m0.data, m0.data.Size()); err != nil {
							return err
						}
						m.scales, m.mins = Buffer{}, Buffer{}
						for _, p := range []struct{ dst, src *Buffer }{{&m.scales, &m0.scales}, {&m.mins, &m0.mins}} {
							if p.src.Ptr() == 0 {
								continue
							}
							if *p.dst, err = d.alloc(p.src.Size(), MemWeights); err != nil {
								return err
							}
							if err := d.copyDtoD(*p.dst, *p.src, p.src.Size()); err != nil {
								return err
							}
						}
						ms = append(ms, &m)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				var usPer float64
				err = d.do(func() error {
					x, err := d.uploadNew(bytesOf(make([]float32, m0.blocks()*32)), 0, MemScratch)
					if err != nil {
						return err
					}
					defer d.free(x)
					if err := d.memset(x, 0x3c); err != nil { // x = 0.0115 everywhere: not zeros
						return err
					}
					y, err := d.alloc(int64(4*sh.rows), MemScratch)
					if err != nil {
						return err
					}
					defer d.free(y)
					d.matvecMode = v.k
					defer func() { d.matvecMode = matvecKernel{} }()
					run := func() error {
						for _, m := range ms {
							if err := d.product(m, v.act, x, y); err != nil {
								return err
							}
						}
						return nil
					}
					if err := run(); err != nil { // warm up outside the graph
						return err
					}
					if err := d.sync(); err != nil {
						return err
					}
					g, err := d.capture(run)
					if err != nil {
						return err
					}
					defer g.Destroy()
					if _, err := d.timeIt(2, func() error { return d.launchGraph(g) }); err != nil {
						return err
					}
					b.ResetTimer()
					msPer, err := d.timeIt(b.N, func() error { return d.launchGraph(g) })
					if err != nil {
						return err
					}
					usPer = msPer * 1e3 / float64(len(ms))
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				bw := float64(m0.Bytes()) / (usPer * 1e-6)
				b.ReportMetric(usPer, "us/matvec")
				b.ReportMetric(bw/1e9, "GB/s")
				b.ReportMetric(100*bw/copyBW, "%copy")
			})
		}
	}
}

// product queues one matrix-vector product in activation mode act,
// quantizing or binarizing x first where the mode needs it (device thread).
func (d *Device) product(m *Matrix, act Activations, x, y Buffer) error {
	switch act {
	case actStagedInt8:
		return d.matvecWith(m, x, y, matvecOpts{act: -1, int8: true})
	case ActInt8:
		return d.withInt8(m, x, func(q, s Buffer) error { return d.matvecI8(m, q, s, y) })
	case ActBinary:
		return d.withBinary(m, x, func(bits, beta Buffer) error { return d.matvecBinary(m, bits, beta, y) })
	}
	return d.matvec(m, x, y)
}

// actStagedInt8 is the benchmarks' name for tq2's decode product: x
// rounded to int8 as the kernel stages it (no quantize kernel before).
const actStagedInt8 Activations = 100

// BenchmarkCopy measures the device-to-device copy rate, the roofline.
func BenchmarkCopy(b *testing.B) {
	d := openOrSkip(b)
	bw, err := d.CopyBandwidth(1<<30, max(b.N, 10))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(bw/1e9, "GB/s")
}

// BenchmarkMatMul times the prefill product of 512 tokens on the layer
// shapes, reported as TFLOP/s (2*rows*cols*512 operations).
func BenchmarkMatMul(b *testing.B) {
	d := openOrSkip(b)
	r := rand.New(rand.NewPCG(9, 10))
	const n = 512
	for _, sh := range benchShapes {
		for _, f := range []quantize.Format{quantize.F16, quantize.Q8, quantize.Q4, quantize.Q2, quantize.TQ2, quantize.Q4K, quantize.Q6K} {
			b.Run(fmt.Sprintf("%s-%dx%d/%s", sh.model, sh.rows, sh.cols, f), func(b *testing.B) {
				var m *Matrix
				var err error
				if f == quantize.F16 {
					m, err = d.UploadFloat(f, gaussian(r, sh.rows*sh.cols), sh.rows, sh.cols)
				} else {
					m, err = d.Upload(randomTensor(r, f, sh.rows, sh.cols))
				}
				if err != nil {
					b.Fatal(err)
				}
				defer d.FreeMatrix(m)
				var ms float64
				err = d.do(func() error {
					x, err := d.uploadNew(bytesOf(gaussian(r, n*sh.cols)), 0, MemScratch)
					if err != nil {
						return err
					}
					defer d.free(x)
					y, err := d.alloc(int64(4*n*sh.rows), MemScratch)
					if err != nil {
						return err
					}
					defer d.free(y)
					if _, err := d.timeIt(1, func() error { return d.matmul(m, x, y, n) }); err != nil {
						return err
					}
					b.ResetTimer()
					ms, err = d.timeIt(b.N, func() error { return d.matmul(m, x, y, n) })
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(ms*1e3, "us/matmul")
				b.ReportMetric(2*float64(sh.rows)*float64(sh.cols)*n/(ms*1e-3)/1e12, "TFLOP/s")
			})
		}
	}
}

// BenchmarkDraw times a sampled step's tail on the device, over a
// vocabulary of Llama-2's 32,000 logits: the top-k candidates alone, and
// the whole draw (candidates and pick; with the penalty's copy and pass),
// per token.
func BenchmarkDraw(b *testing.B) {
	d := openOrSkip(b)
	be, err := NewBackend(d, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const n = 32000
	r := rand.New(rand.NewPCG(11, 12))
	x := gaussian(r, n)
	for _, c := range []struct {
		name string
		o    model.SamplerOptions
	}{
		{"topk40", model.SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.9}},
		{"topp", model.SamplerOptions{Temperature: 0.8, TopP: 0.9}},
		{"penalty", model.SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.1, RepeatLastN: 64}},
	} {
		b.Run(c.name, func(b *testing.B) {
			dr := &model.Draw{Options: c.o}
			if c.o.RepeatPenalty > 0 {
				dr.Recent = make([]int, 64)
			}
			p, _ := planDraw(dr, n)
			var topk, all float64
			err := be.run(func() error {
				xb, err := d.uploadNew(bytesOf(x), 0, MemScratch)
				if err != nil {
					return err
				}
				defer d.free(xb)
				if err := be.drawBuffers(p, n); err != nil {
					return err
				}
				if err := be.setDraw(dr); err != nil {
					return err
				}
				tk := func() error { return d.topK(xb, n, p.k, c.o.Temperature, be.draws.cands, p.partial) }
				dw := func() error { return be.launchDraw(xb, n, dr, p, false) }
				if _, err := d.timeIt(3, dw); err != nil {
					return err
				}
				b.ResetTimer()
				if topk, err = d.timeIt(b.N, tk); err != nil {
					return err
				}
				all, err = d.timeIt(b.N, dw)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(topk*1e3, "us/topk")
			b.ReportMetric(all*1e3, "us/draw")
		})
	}
}
