package convert

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"lowbit/half"
	"lowbit/internal/fixture"
	"lowbit/safetensors"
)

// tinyLlamaSpec has TinyLlama-1.1B's exact shapes.
func tinyLlamaSpec() fixture.Spec {
	return fixture.Spec{Arch: "LlamaForCausalLM", Hidden: 2048, Intermediate: 5632, Layers: 22, Heads: 32, KVHeads: 4, HeadDim: 64, Vocab: 32000, DType: "BF16"}
}

// writeBenchModel writes a BF16 model of spec's shapes with random
// heavy-tailed weights (a uniform over a square root: Student-t-like tails),
// generated quickly in parallel; it is kept in the temp dir between runs.
func writeBenchModel(b *testing.B, spec fixture.Spec, dir string) {
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
			return
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	cfg, _ := json.Marshal(spec.Config())
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		b.Fatal(err)
	}
	// convert refuses a model without a tokenizer: the fixtures' one fits any vocabulary.
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), fixture.TokenizerJSON(spec.Vocab), 0o644); err != nil {
		b.Fatal(err)
	}
	tensors := spec.Tensors()
	var specs []safetensors.Spec
	for name, shape := range tensors {
		specs = append(specs, safetensors.Spec{Name: name, DType: "BF16", Shape: shape})
	}
	tmp := filepath.Join(dir, "model.safetensors.tmp")
	w, err := safetensors.Create(tmp, specs, nil)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	work := make(chan safetensors.Spec, len(specs))
	for _, s := range specs {
		work <- s
	}
	close(work)
	errs := make(chan error, len(specs))
	for k := 0; k < runtime.GOMAXPROCS(0); k++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for s := range work {
				n := int64(1)
				for _, d := range s.Shape {
					n *= d
				}
				scale := 1 / math.Sqrt(float64(s.Shape[len(s.Shape)-1]))
				buf := make([]byte, 2*n)
				for i := int64(0); i < n; i++ {
					v := 1.0
					if len(s.Shape) == 2 {
						u := r.Float64() - 0.5
						v = scale * u / (math.Sqrt(r.Float64()) + 0.02)
					}
					binary.LittleEndian.PutUint16(buf[2*i:], uint16(half.BFromFloat32(float32(v))))
				}
				errs <- w.Write(s.Name, buf)
			}
		}(uint64(k))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "model.safetensors")); err != nil {
		b.Fatal(err)
	}
}

// rssAnon reads the process's anonymous resident memory in bytes (Linux).
func rssAnon() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkConvertTinyLlamaQ4 converts a TinyLlama-1.1B-shaped BF16 model to
// q4 with the clipping search on, without calibration (nocalib), with it
// (calib: the float model's pass over the built-in text first), and to a
// 3.5-bit mix (mix3.5), reporting weights/s, seconds and the peak RssAnon
// sampled during the run; validation is left out (random weights fail it,
// and it is a stage of its own). The source model (2.2 GB) is generated
// once into $TMPDIR/lowbit-bench-tinyllama.
func BenchmarkConvertTinyLlamaQ4(b *testing.B) {
	spec := tinyLlamaSpec()
	src := filepath.Join(os.TempDir(), "lowbit-bench-tinyllama")
	writeBenchModel(b, spec, src)
	var params int64
	for _, shape := range spec.Tensors() {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		params += n
	}
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"nocalib", Options{Bits: "4", NoCalib: true}},
		{"calib", Options{Bits: "4"}},
		{"mix3.5", Options{Bits: "3.5"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			runtime.GC()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out := filepath.Join(b.TempDir(), "out")
				var peak int64
				done := make(chan struct{})
				go func() {
					t := time.NewTicker(20 * time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-done:
							return
						case <-t.C:
							peak = max(peak, rssAnon())
						}
					}
				}()
				start := time.Now()
				opts := bc.opts
				opts.Source, opts.Out, opts.NoValidate = src, out, true
				if _, err := Run(context.Background(), opts); err != nil {
					b.Fatal(err)
				}
				sec := time.Since(start).Seconds()
				close(done)
				peak = max(peak, rssAnon())
				b.ReportMetric(float64(params)/sec, "weights/s")
				b.ReportMetric(float64(peak)/(1<<20), "peak-RssAnon-MiB")
				b.ReportMetric(sec, "s/convert")
			}
		})
	}
}
