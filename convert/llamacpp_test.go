package convert

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/tokenizer"
	"lowbit/validate"
)

// llamaCppBin is the folder of llama.cpp's binaries given by
// LOWBIT_LLAMACPP, or skips t.
func llamaCppBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LOWBIT_LLAMACPP")
	if dir == "" {
		t.Skip("skipping: set LOWBIT_LLAMACPP to the folder of llama.cpp's binaries (llama-completion) to run llama.cpp on lowbit's GGUF files")
	}
	for _, name := range []string{"llama-completion", "llama-cli"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("LOWBIT_LLAMACPP=%s holds neither llama-completion nor llama-cli", dir)
	return ""
}

// llamaCppRun runs one of llama.cpp's tools and returns its standard
// output once it holds done. llama.cpp prints through a logging thread that
// can lose the end of the output when the process exits, so a run whose
// output is cut short is run again (the output is deterministic).
func llamaCppRun(t *testing.T, bin string, done func(string) bool, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for range 10 {
		cmd := exec.CommandContext(ctx, bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
		}
		if done(string(out) + stderr.String()) {
			return string(out) + stderr.String()
		}
	}
	t.Fatalf("%s %v: ten runs cut their output short", bin, args)
	return ""
}

// llamaCppGreedy is llama.cpp's greedy continuation of prompt by the GGUF
// file at path: n tokens, end of sequence ignored, on the CPU, as text.
func llamaCppGreedy(t *testing.T, bin, path, prompt string, n int) string {
	t.Helper()
	out := llamaCppRun(t, bin, func(s string) bool { return strings.Contains(s, "\n\n") && strings.Contains(s, "common_perf_print") },
		"-m", path, "-p", prompt, "-n", strconv.Itoa(n), "--temp", "0", "--seed", "1",
		"--no-warmup", "--ignore-eos", "--no-display-prompt", "-no-cnv", "--simple-io", "-t", "2", "-c", "512")
	// The text, then the two newlines llama-completion ends it with, then
	// its log (stderr, appended by llamaCppRun).
	text, _, _ := strings.Cut(out, "\n\n")
	return text
}

// llamaLogProbs is what llama-perplexity computed over a text: its tokens,
// the chunk length and, for the second half of every chunk, the
// log-probabilities of every token (read from its --kl-divergence-base
// file: per position two float32s, scale and minimum, then a uint16 per
// token, log p = scale*u + minimum).
type llamaLogProbs struct {
	tokens []int
	ctx    int
	rows   [][]float32
}

// llamaCppLogProbs runs llama-perplexity over the text file in chunks of
// ctx tokens and reads the log-probabilities it saved.
func llamaCppLogProbs(t *testing.T, bin, path, textFile string, ctx int) llamaLogProbs {
	t.Helper()
	base := filepath.Join(t.TempDir(), "base.kld")
	llamaCppRun(t, bin, func(s string) bool { return strings.Contains(s, "Final estimate: PPL = ") },
		"-m", path, "-f", textFile, "-c", strconv.Itoa(ctx), "-b", strconv.Itoa(ctx), "-t", "2", "--kl-divergence-base", base)
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if len(b) < 20 || string(b[:8]) != "_logits_" {
		t.Fatalf("%s is not a llama-perplexity logits file", base)
	}
	n, vocab, chunks := int(le.Uint32(b[8:])), int(le.Uint32(b[12:])), int(le.Uint32(b[16:]))
	b = b[20:]
	out := llamaLogProbs{ctx: n}
	for i := range chunks * n {
		out.tokens = append(out.tokens, int(int32(le.Uint32(b[4*i:]))))
	}
	b = b[4*chunks*n:]
	nv := 2*((vocab+1)/2) + 4
	for len(b) >= 2*nv {
		scale := math.Float32frombits(le.Uint32(b))
		minLP := math.Float32frombits(le.Uint32(b[4:]))
		row := make([]float32, vocab)
		for i := range row {
			row[i] = scale*float32(le.Uint16(b[8+2*i:])) + minLP
		}
		out.rows = append(out.rows, row)
		b = b[2*nv:]
	}
	if want := chunks * (n - 1 - n/2); len(out.rows) != want {
		t.Fatalf("%s: %d positions, want %d", base, len(out.rows), want)
	}
	return out
}

// llamaAgreement compares lowbit's next-token distributions with
// llama.cpp's at the positions llama-perplexity scored (the same tokens,
// chunked and begun with BOS as it does): the mean KL divergence
// (llama.cpp's to lowbit's, over the tokens llama.cpp gives a log
// probability above -16, the range it saves), how often the most likely
// token agrees, and both perplexities (a token's logit counted at no less
// than 16 below the top one in both, the floor llama-perplexity saves
// it at: a model with a confident top token puts much of a text below).
func llamaAgreement(t *testing.T, m *model.Model, tok tokenizer.Tokenizer, base llamaLogProbs) (kld, top1, pplLlama, pplLowbit float64) {
	t.Helper()
	s, err := m.NewSession(model.SessionOptions{Backend: model.NewCPU(2)})
	if err != nil {
		t.Fatal(err)
	}
	n, v, first := base.ctx, m.Config.VocabSize, base.ctx/2
	var nllL, nllB float64
	row, agree := 0, 0
	for c := 0; (c+1)*n <= len(base.tokens); c++ {
		in := slices.Clone(base.tokens[c*n : (c+1)*n])
		if tokenizer.AddBOS(tok) {
			in[0] = tok.BOS()
		}
		s.Reset()
		out, err := s.ForwardAll(context.Background(), in, false)
		if err != nil {
			t.Fatal(err)
		}
		for k := first; k < n-1; k++ {
			logits := out.Logits[k*v : (k+1)*v]
			mx := slices.Max(logits)
			var sum float64
			for _, x := range logits {
				sum += math.Exp(float64(x - mx))
			}
			lse := float64(mx) + math.Log(sum)
			ref := base.rows[row]
			row++
			var d float64
			for i, lp := range ref {
				if lp > -16 {
					d += math.Exp(float64(lp)) * (float64(lp) - (float64(logits[i]) - lse))
				}
			}
			kld += d
			if slices.Index(logits, mx) == slices.Index(ref, slices.Max(ref)) {
				agree++
			}
			next := in[k+1]
			nllL += lse - float64(max(logits[next], mx-16))
			nllB -= float64(ref[next])
		}
	}
	return kld / float64(row), float64(agree) / float64(row), math.Exp(nllB / float64(row)), math.Exp(nllL / float64(row))
}

// rawPiece is the text llama.cpp prints for a token of a SentencePiece
// vocabulary: ▁ as a space, <0xXX> as its byte, control tokens as nothing.
func rawPiece(tok tokenizer.Tokenizer, id int) string {
	p := tok.Piece(id)
	if len(p) == 6 && strings.HasPrefix(p, "<0x") && strings.HasSuffix(p, ">") {
		if b, err := strconv.ParseUint(p[3:5], 16, 8); err == nil {
			return string([]byte{byte(b)})
		}
	}
	if id == tok.BOS() || id == tok.EOS() || p == "<unk>" {
		return ""
	}
	return strings.ReplaceAll(p, "▁", " ")
}

// greedyStep is one token of lowbit's greedy continuation: the chosen
// token, every token's logit, and the lead of the chosen token's logit
// over the next one's (what another engine's rounding must overcome to
// choose otherwise).
type greedyStep struct {
	id     int
	logits []float32
	lead   float64
}

// lowbitGreedy is lowbit's greedy continuation of prompt on the CPU (the
// end-of-sequence ids excluded, as llama.cpp's --ignore-eos excludes them).
func lowbitGreedy(t *testing.T, m *model.Model, tok tokenizer.Tokenizer, prompt string, n int) []greedyStep {
	t.Helper()
	ids, err := tok.Encode(prompt, tokenizer.AddBOS(tok))
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(model.SessionOptions{Backend: model.NewCPU(2)})
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config.VocabSize
	var steps []greedyStep
	for range n {
		s.Reset()
		out, err := s.ForwardAll(context.Background(), ids, false)
		if err != nil {
			t.Fatal(err)
		}
		last := slices.Clone(out.Logits[(len(ids)-1)*v : len(ids)*v])
		best, second := -1, -1
		for i, x := range last {
			switch {
			case slices.Contains(tok.EOSIDs(), i):
			case best < 0 || x > last[best]:
				best, second = i, best
			case second < 0 || x > last[second]:
				second = i
			}
		}
		steps = append(steps, greedyStep{id: best, logits: last, lead: float64(last[best] - last[second])})
		ids = append(ids, best)
	}
	return steps
}

// compareGreedy counts the tokens of lowbit's continuation whose text
// llama.cpp's continuation starts with. At the first that differs it finds
// llama.cpp's token among lowbit's candidates (of the tokens whose text
// llama.cpp's text goes on with, the one lowbit ranks highest) and returns
// the gap between lowbit's top logit and that token's: a near tie, which
// another rounding of the products flips, when it is within the noise
// between the two engines' logits.
func compareGreedy(tok tokenizer.Tokenizer, steps []greedyStep, llama string) (matched int, gap float64, desc string) {
	rest := llama
	for i, st := range steps {
		p := rawPiece(tok, st.id)
		if strings.HasPrefix(rest, p) {
			rest = rest[len(p):]
			continue
		}
		other := -1
		for id, x := range st.logits {
			q := rawPiece(tok, id)
			if q != "" && strings.HasPrefix(rest, q) && (other < 0 || x > st.logits[other]) {
				other = id
			}
		}
		top := st.logits[st.id]
		if other < 0 {
			return i, math.Inf(1), fmt.Sprintf("token %d: lowbit %q; llama.cpp goes on with %.30q, no token's text", i, p, rest)
		}
		gap = float64(top - st.logits[other])
		return i, gap, fmt.Sprintf("token %d: lowbit %q (logit %.4f), llama.cpp %q (lowbit's logit %.4f, %.4f lower)",
			i, p, top, rawPiece(tok, other), st.logits[other], gap)
	}
	return len(steps), 0, "all equal"
}

// tinyLlamaShaped writes an HF directory of a model of TinyLlama's width,
// heads and grouped-query attention (2 of its 22 layers, for CPU time)
// with random weights and TinyLlama's real tokenizer (Llama 2's
// SentencePiece model, 32000 tokens). Random weights alone give near-flat
// logits, whose top two the engines' roundings swap within a few tokens;
// a direct path from each token to a successor (fixture.Spec.DirectPath)
// gives the next token the lead a trained model's has, strong enough
// that the successor wins by far more than that rounding, while the
// layers still set the rest of the distribution.
func tinyLlamaShaped(t *testing.T) string {
	t.Helper()
	spm := testmodels.Path(t, "llama2-tokenizer/tokenizer.model")
	hfTok := testmodels.Path(t, "llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0")
	dir := filepath.Join(t.TempDir(), "tinyllama-shaped")
	s := fixture.Spec{Arch: "LlamaForCausalLM", Hidden: 2048, Intermediate: 5632, Layers: 2, Heads: 32, KVHeads: 4, HeadDim: 64,
		Vocab: 32000, DType: "F16", Seed: 22, DirectPath: 16}
	if err := s.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ src, dst string }{
		{spm, "tokenizer.model"},
		{filepath.Join(hfTok, "tokenizer.json"), "tokenizer.json"},
		{filepath.Join(hfTok, "tokenizer_config.json"), "tokenizer_config.json"},
		{filepath.Join(hfTok, "special_tokens_map.json"), "special_tokens_map.json"},
	} {
		b, err := os.ReadFile(f.src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLlamaCppGreedy exports stories260K in floats, at q8 and at q4, and
// a TinyLlama-shaped model in f16, at q8 and at q4, as GGUF, and has
// llama.cpp (built from source, LOWBIT_LLAMACPP) run each file:
// llama-perplexity's distributions over a text must be lowbit's (mean KL
// divergence), and llama-completion's greedy continuation of three
// prompts, 24 tokens, lowbit's. The engines' logits differ by the noise
// (sqrt(2 KLD)) of the rounding llama.cpp applies to the activations
// before its products (to f16 for F16, to 8 bits per block of 32 for Q8_0;
// lowbit multiplies floats), and both models' top tokens lead by more
// than that (the log gives the smallest lead), so in floats and at q8 the
// continuations must be equal token for token. Q4_1's product rounds once
// more: its block minimum's term takes the block sum of the 8-bit
// activations, itself rounded to f16 (Q8_1); so at q4, where the products
// are not the same, a continuation may go apart at a near tie in lowbit's
// logits: a gap within four standard deviations of the noise. The log
// says where each continuation went apart.
func TestLlamaCppGreedy(t *testing.T) {
	bin := llamaCppBin(t)
	perplexity := filepath.Join(filepath.Dir(bin), "llama-perplexity")
	text := strings.Repeat(validate.DefaultText+"\n", 3)
	textFile := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(textFile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prompts := []string{"Once upon a time", "The little dog", "Lily and Tom went to the park"}
	const n = 24
	type source struct {
		name   string
		dir    func(t *testing.T) string
		pplCtx int      // llama-perplexity's chunk
		bits   []string // f32: everything kept in floats
	}
	// The divergence allowed per format: a wrong weight costs far more.
	maxKLD := map[string]float64{"f32": 1e-5, "f16": 1e-4, "8": 1e-2, "4": 1e-2}
	for _, src := range []source{
		{"stories260K", func(t *testing.T) string { return testmodels.Path(t, "stories260K-hf") }, 128, []string{"f32", "8", "4"}},
		{"tinyllama-shaped", tinyLlamaShaped, 128, []string{"f16", "8", "4"}},
	} {
		t.Run(src.name, func(t *testing.T) {
			dir := src.dir(t)
			for _, bits := range src.bits {
				t.Run(bits, func(t *testing.T) {
					out := filepath.Join(t.TempDir(), "lowbit")
					opts := Options{Source: dir, Out: out, Bits: bits, TableGroupSize: 32, NoValidate: true, NoSearch: true}
					if bits == "f32" || bits == "f16" {
						opts.EmbeddingBits, opts.OutputBits = bits, bits
					}
					if _, err := Run(ctx, opts); err != nil {
						t.Fatal(err)
					}
					file := filepath.Join(t.TempDir(), src.name+"-"+bits+".gguf")
					res, err := ExportGGUF(ctx, out, GGUFOptions{Out: file})
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("%s: %v", filepath.Base(file), res.Types)
					m, err := model.Load(ctx, file, model.LoadOptions{})
					if err != nil {
						t.Fatal(err)
					}
					tok, err := tokenizer.Load(file)
					if err != nil {
						t.Fatal(err)
					}
					noise := 0.05 // logit noise between the engines where llama-perplexity is missing
					if fileExists(perplexity) {
						kld, top1, pplL, pplB := llamaAgreement(t, m, tok, llamaCppLogProbs(t, perplexity, file, textFile, src.pplCtx))
						noise = math.Sqrt(2 * kld)
						t.Logf("over %d-token chunks: KLD(llama.cpp || lowbit) mean %.2e (logit noise %.3f), top-1 agreement %.1f%%, perplexity llama.cpp %.4f, lowbit %.4f (%+.3f%%)",
							src.pplCtx, kld, noise, 100*top1, pplL, pplB, 100*(pplB/pplL-1))
						if kld > maxKLD[bits] || math.Abs(pplB/pplL-1) > 0.02 {
							t.Errorf("llama.cpp and lowbit compute the same file apart: KLD %.3g (limit %.3g), perplexity %.4f and %.4f", kld, maxKLD[bits], pplL, pplB)
						}
					}
					for _, prompt := range prompts {
						steps := lowbitGreedy(t, m, tok, prompt, n)
						llama := llamaCppGreedy(t, bin, file, prompt, n)
						matched, gap, desc := compareGreedy(tok, steps, llama)
						lead := math.Inf(1)
						for _, st := range steps {
							lead = min(lead, st.lead)
						}
						t.Logf("%q: %d/%d tokens equal; %s; lowbit's smallest lead %.3f (%.0f times the noise)", prompt, matched, n, desc, lead, lead/noise)
						if matched < n && bits != "4" {
							t.Errorf("%q: llama.cpp's continuation leaves lowbit's at %s\nllama.cpp: %q", prompt, desc, llama)
						}
						if matched < n && bits == "4" && gap > 4*noise {
							t.Errorf("%q: llama.cpp's continuation leaves lowbit's at %s, not a near tie (limit %.4f)\nllama.cpp: %q", prompt, desc, 4*noise, llama)
						}
					}
				})
			}
		})
	}
}
