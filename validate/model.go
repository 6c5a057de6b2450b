package validate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"lowbit/hub"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/tokenizer"
)

// DefaultText is the evaluation passage used when none is given: plain
// narrative English, which every supported model has seen.
const DefaultText = `Once upon a time, in a small village at the edge of a great forest, there lived a girl named Lily who loved to explore. Every morning she walked along the river, watching the water sparkle in the sun and listening to the birds sing in the tall trees. One day she found a little boat tied to an old wooden post. It was painted red and blue, and it had a small white sail. Lily looked around, but there was nobody nearby. She wondered who had left it there and why. She decided to wait and see if the owner would come back. The sun climbed higher in the sky, and the air grew warm. After a while, an old man with a long grey beard came slowly down the path. He smiled when he saw Lily sitting next to his boat. "Do you like boats?" he asked. Lily nodded and told him that she had always wanted to sail across the river to see what was on the other side. The old man laughed kindly and said that he would take her, if her mother agreed. Lily ran home as fast as she could to ask.`

// Thresholds are the pass marks of a model check.
type Thresholds struct {
	// MaxKLDMean bounds the mean KL divergence (nats) of the next-token
	// distribution, reference to quantized.
	MaxKLDMean float64 `json:"max_kld_mean"`
	// MaxKLDP99 bounds its 99th percentile.
	MaxKLDP99 float64 `json:"max_kld_p99"`
	// MinTop1 is the least share of positions whose most likely token agrees.
	MinTop1 float64 `json:"min_top1"`
	// MaxPPLRatio bounds the quantized perplexity over the reference's.
	MaxPPLRatio float64 `json:"max_ppl_ratio"`
}

// DefaultThresholds are the pass marks per linear-weight format. They were
// set from measurements (BENCHMARKS.md, "Accuracy"): the 260K-parameter
// stories260K model is the hardest case, since small models lose the most
// per bit (q4 there: KLD mean 0.14, top-1 74%, perplexity +8%; q8: 0.001, 97%,
// +0.2%), and the q4 and q8 marks pass it with headroom. For 2 and 1 bits the
// marks ask that a model keep 40% (25%) of its top-1 choices and at most
// double (quadruple) its perplexity; stories260K quantized to 2 and 1 bits
// without training for it loses far more (top-1 15% and 2%, perplexity x2.8
// and x13) and fails, which is the honest answer for a model that small.
//
// GGUF's block formats and lowbit's super-block formats take the marks of
// the lowbit format of as many bits or fewer (q5_0 ... q6k, q4k and q4s:
// q4's; q3k, q2k, q3s and q2s: q2's); a model whose
// rows are not whole blocks stores most of its matrices in the fallback
// formats anyway (convert's notes say which).
func DefaultThresholds(format string) Thresholds {
	switch format {
	case "q8":
		return Thresholds{MaxKLDMean: 0.01, MaxKLDP99: 0.1, MinTop1: 0.90, MaxPPLRatio: 1.02}
	case "q4", "q4s", "q4k", "q5_0", "q5_1", "q5k", "q6k":
		return Thresholds{MaxKLDMean: 0.25, MaxKLDP99: 2.5, MinTop1: 0.65, MaxPPLRatio: 1.2}
	case "q2", "tq2", "q2k", "q3k", "q2s", "q3s":
		return Thresholds{MaxKLDMean: 1.0, MaxKLDP99: 6, MinTop1: 0.40, MaxPPLRatio: 2}
	case "q1":
		return Thresholds{MaxKLDMean: 2.0, MaxKLDP99: 10, MinTop1: 0.25, MaxPPLRatio: 4}
	}
	// Float formats: only rounding differences are allowed.
	return Thresholds{MaxKLDMean: 1e-4, MaxKLDP99: 1e-3, MinTop1: 0.99, MaxPPLRatio: 1.001}
}

// ModelOptions tune CompareModels.
type ModelOptions struct {
	// Text is the evaluation text (DefaultText when empty).
	Text string
	// Window is the most tokens per forward pass (0: min(context, 512));
	// each window starts with BOS when the tokenizer asks for it.
	Window int
	// MaxTokens caps the tokens evaluated (0: 8192).
	MaxTokens int
	// Thresholds are the pass marks.
	Thresholds Thresholds
	// Backend runs both models (nil: the CPU).
	Backend func() (model.Backend, error)
	// IDs, when set, are the tokens evaluated instead of Text's (a
	// conversation the model's chat template rendered: it writes its own
	// BOS, so windows add none).
	IDs []int
	// KVCache is how the quantized model's cache stores keys and values
	// (the zero value: f32); the reference's cache is always f32, so the
	// report counts what a narrower cache costs with what the weights cost.
	KVCache model.KVType
}

// ModelReport is what the bits cost one model over a text.
type ModelReport struct {
	Format    string `json:"format"`
	Tokens    int    `json:"tokens"`
	Positions int    `json:"positions"`
	// LayerRelErr is the relative L2 error of the residual stream after
	// the embedding (index 0) and after each layer.
	LayerRelErr []float64 `json:"layer_rel_err"`
	KLDMean     float64   `json:"kld_mean"`
	KLDMedian   float64   `json:"kld_median"`
	KLDP99      float64   `json:"kld_p99"`
	KLDMax      float64   `json:"kld_max"`
	Top1        float64   `json:"top1_agreement"`
	PPL         float64   `json:"ppl"`
	PPLRef      float64   `json:"ppl_reference"`
	PPLRatio    float64   `json:"ppl_ratio"`
	// KLD is the divergence at every position (for plots).
	KLD []float64 `json:"kld,omitempty"`
	// ReferenceWeights says how the reference's weights were changed
	// before the comparison (ReferenceTernary), empty when they were not.
	ReferenceWeights string `json:"reference_weights,omitempty"`
	// KVCache is the quantized model's cache type.
	KVCache string `json:"kv_cache"`
	// Chat is the same comparison over a conversation the model's chat
	// template rendered (DefaultChat: its role markers, end-of-turn and
	// EOS tokens predicted as a chat predicts them), where it has one.
	Chat *ModelReport `json:"chat,omitempty"`
	// KVCaches are what each cache type costs alone: the reference with
	// that cache against the reference with f32's (CompareKVCaches).
	KVCaches   []*ModelReport `json:"kv_caches,omitempty"`
	Thresholds Thresholds     `json:"thresholds"`
	Status     string         `json:"status"`
	Failures   []string       `json:"failures,omitempty"`
}

// CompareModels runs the quantized model and its reference over the text
// and measures how far apart they are.
func CompareModels(ctx context.Context, quant, ref *model.Model, tok tokenizer.Tokenizer, opts ModelOptions) (*ModelReport, error) {
	qc, rc := quant.Config, ref.Config
	switch {
	case qc.Arch != rc.Arch:
		return nil, fmt.Errorf("validate: the reference is a %s model, the quantized one %s", rc.Arch, qc.Arch)
	case qc.VocabSize != rc.VocabSize:
		return nil, fmt.Errorf("validate: the reference's vocabulary is %d tokens, the quantized model's %d", rc.VocabSize, qc.VocabSize)
	case qc.NumLayers != rc.NumLayers || qc.HiddenSize != rc.HiddenSize:
		return nil, fmt.Errorf("validate: the reference has %d layers of %d, the quantized model %d of %d", rc.NumLayers, rc.HiddenSize, qc.NumLayers, qc.HiddenSize)
	}
	ids := opts.IDs
	if ids == nil {
		text := opts.Text
		if text == "" {
			text = DefaultText
		}
		if strings.TrimSpace(text) == "" {
			return nil, errors.New("validate: the evaluation text is empty")
		}
		var err error
		if ids, err = tok.Encode(text, false); err != nil {
			return nil, fmt.Errorf("validate: encoding the text: %w", err)
		}
	}
	maxTok := opts.MaxTokens
	if maxTok <= 0 {
		maxTok = 8192
	}
	ids = ids[:min(len(ids), maxTok)]
	if len(ids) < 2 {
		return nil, fmt.Errorf("validate: the evaluation text has %d tokens; at least 2 are needed", len(ids))
	}
	for _, id := range ids {
		if id >= qc.VocabSize {
			return nil, fmt.Errorf("validate: the tokenizer gave id %d outside the model's vocabulary of %d", id, qc.VocabSize)
		}
	}
	newSession := func(m *model.Model, kv model.KVType) (*model.Session, error) {
		var b model.Backend
		if opts.Backend != nil {
			var err error
			if b, err = opts.Backend(); err != nil {
				return nil, err
			}
		}
		return m.NewSession(model.SessionOptions{Backend: b, KVCache: kv})
	}
	qs, err := newSession(quant, opts.KVCache)
	if err != nil {
		return nil, err
	}
	rs, err := newSession(ref, model.KVF32)
	if err != nil {
		return nil, err
	}
	window := opts.Window
	if window <= 0 {
		window = 512
	}
	window = min(window, qs.Context(), rs.Context())
	bos := -1
	if opts.IDs == nil && tokenizer.AddBOS(tok) && tok.BOS() >= 0 {
		bos = tok.BOS()
	}
	rep := &ModelReport{Tokens: len(ids), Thresholds: opts.Thresholds, LayerRelErr: make([]float64, qc.NumLayers+1), KVCache: opts.KVCache.String()}
	num, den := make([]float64, qc.NumLayers+1), make([]float64, qc.NumLayers+1)
	var nll, nllRef float64
	agree := 0
	step := window
	if bos >= 0 {
		step--
	}
	if step < 2 {
		return nil, fmt.Errorf("validate: a window of %d tokens is too short", window)
	}
	for lo := 0; lo < len(ids)-1; lo += step {
		chunk := ids[lo:min(lo+step, len(ids))]
		if len(chunk) < 2 {
			break
		}
		in := chunk
		if bos >= 0 {
			in = append([]int{bos}, chunk...)
		}
		qs.Reset()
		rs.Reset()
		qo, err := qs.ForwardAll(ctx, in, true)
		if err != nil {
			return nil, fmt.Errorf("validate: quantized model: %w", err)
		}
		ro, err := rs.ForwardAll(ctx, in, true)
		if err != nil {
			return nil, fmt.Errorf("validate: reference model: %w", err)
		}
		for l := range num {
			for i, r := range ro.Hidden[l] {
				d := float64(qo.Hidden[l][i]) - float64(r)
				num[l] += d * d
				den[l] += float64(r) * float64(r)
			}
		}
		v := qc.VocabSize
		// Position p predicts in[p+1]; positions before the chunk's first
		// token (BOS) predict it too.
		for p := 0; p+1 < len(in); p++ {
			lq, lr := model.LogSoftmax(qo.Logits[p*v:(p+1)*v]), model.LogSoftmax(ro.Logits[p*v:(p+1)*v])
			var kld float64
			for i, a := range lr {
				if pa := math.Exp(a); pa > 0 {
					kld += pa * (a - lq[i])
				}
			}
			rep.KLD = append(rep.KLD, math.Max(kld, 0))
			if argmax64(lq) == argmax64(lr) {
				agree++
			}
			next := in[p+1]
			nll -= lq[next]
			nllRef -= lr[next]
		}
	}
	n := len(rep.KLD)
	rep.Positions = n
	for l := range num {
		rep.LayerRelErr[l] = math.Sqrt(num[l] / math.Max(den[l], 1e-300))
	}
	sorted := slices.Clone(rep.KLD)
	slices.Sort(sorted)
	for _, k := range sorted {
		rep.KLDMean += k
	}
	rep.KLDMean /= float64(n)
	rep.KLDMedian = quantile(sorted, 0.5)
	rep.KLDP99 = quantile(sorted, 0.99)
	rep.KLDMax = sorted[n-1]
	rep.Top1 = float64(agree) / float64(n)
	rep.PPL, rep.PPLRef = math.Exp(nll/float64(n)), math.Exp(nllRef/float64(n))
	rep.PPLRatio = rep.PPL / rep.PPLRef
	rep.judge()
	return rep, nil
}

// judge sets Status from the thresholds; NaN fails every comparison.
func (r *ModelReport) judge() {
	t := r.Thresholds
	check := func(ok bool, format string, args ...any) {
		if !ok {
			r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
		}
	}
	check(r.KLDMean <= t.MaxKLDMean, "KLD mean %.4g above %.4g", r.KLDMean, t.MaxKLDMean)
	check(r.KLDP99 <= t.MaxKLDP99, "KLD p99 %.4g above %.4g", r.KLDP99, t.MaxKLDP99)
	check(r.Top1 >= t.MinTop1, "top-1 agreement %.1f%% below %.1f%%", 100*r.Top1, 100*t.MinTop1)
	check(r.PPLRatio <= t.MaxPPLRatio, "perplexity ratio %.4g above %.4g", r.PPLRatio, t.MaxPPLRatio)
	r.Status = Pass
	if len(r.Failures) > 0 {
		r.Status = Fail
	}
}

func argmax64(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// quantile of sorted values by linear interpolation.
func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	f := pos - float64(i)
	return sorted[i]*(1-f) + sorted[i+1]*f
}

// FindReference locates the float original of a lowbit model directory:
// the directory the manifest says it was converted from, when it still
// holds the model, else the source revision in the HF cache.
func FindReference(dir, cacheDir string) (string, error) {
	m, err := manifest.Read(dir)
	if err != nil {
		return "", fmt.Errorf("validate: %s is not a lowbit model: %w", dir, err)
	}
	src := m.Source
	if src.Dir != "" {
		if _, err := os.Stat(filepath.Join(src.Dir, "config.json")); err == nil {
			return src.Dir, nil
		}
	}
	if src.RepoID == "" {
		return "", fmt.Errorf("validate: %s was converted from %s, which is gone, and names no Hub repo: give --reference", dir, src.Dir)
	}
	rev := src.Commit
	if rev == "" {
		rev = src.Revision
	}
	snap, err := hub.CachedSnapshot(cacheDir, src.RepoID, rev, nil)
	if err != nil {
		return "", fmt.Errorf("validate: the reference %s is not in the HF cache (lowbit download %s, or give --reference): %w", src.RepoID, src.RepoID, err)
	}
	return snap.Dir, nil
}
