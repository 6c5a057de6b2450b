package model

import (
	"context"
	"fmt"
	"math"
)

// SessionOptions tune a session.
type SessionOptions struct {
	// Backend runs the operations (nil: the CPU with GOMAXPROCS workers).
	Backend Backend
	// Context is the number of positions the KV cache holds (0: the
	// model's max_position_embeddings, at most DefaultContext).
	Context int
	// Batch is the most tokens processed at once in prefill (0: 64), and
	// the most a StepBatch carries.
	Batch int
	// Slots is the number of sequences the cache holds (0: 1), each of
	// Context positions: StepBatch steps several of them together.
	Slots int
	// KVCache is how the cache stores keys and values (the zero value: f32).
	KVCache KVType
}

// DefaultContext caps the KV cache when SessionOptions.Context is 0, so
// that models with very long position ranges (Mistral's 32768) do not
// allocate gigabytes of cache up front.
const DefaultContext = 4096

// Session runs a model on a backend and holds the key/value cache of its
// sequences: Forward and the other single-sequence methods append tokens
// to the sequence in slot 0 (at Pos) and return its logits; StepBatch
// steps several slots at once, its caller keeping their positions.
type Session struct {
	m     *Model
	be    Backend
	cfg   Config
	ctx   int
	batch int
	slots int
	pos   int
	cache Cache
	shape CacheShape
	// kept is the number of rows of the last step's logits the logits
	// buffer holds (a step that returned candidates or all logits:
	// LastLogits and RowLogits may read them).
	kept int

	act        Act
	embedScale float32

	// weights on the backend
	embed, output Mat
	norm          Norm
	layers        []layerMats

	// activations [batch, ...]: the residual stream, q|k|v, attention's
	// output, the MLP's gated hidden state and the logits
	x, qkv, att, h, logits Buf
}

// layerMats are one layer's weights on the backend, and its attention.
type layerMats struct {
	attnNorm, ffnNorm, attnSub, ffnSub Norm
	// postAttn and postFfn norm the outputs of attention and the MLP
	// (Gemma 2, 3; zero elsewhere).
	postAttn, postFfn              Norm
	wq, wk, wv, wo, gate, up, down Mat
	bq, bk, bv                     Mat // zero where the model has no bias
	attn                           Attn
}

// NewSession binds the model to a backend and allocates its cache and
// activation buffers.
func (m *Model) NewSession(opts SessionOptions) (*Session, error) {
	c := m.Config
	s := &Session{m: m, be: opts.Backend, cfg: c, ctx: opts.Context, batch: opts.Batch, slots: max(opts.Slots, 1)}
	if s.be == nil {
		s.be = NewCPU(0)
	}
	if s.ctx <= 0 {
		s.ctx = min(c.MaxPositions, DefaultContext)
	}
	if s.ctx > c.MaxPositions {
		return nil, fmt.Errorf("model: context %d exceeds the model's max_position_embeddings %d", s.ctx, c.MaxPositions)
	}
	if s.batch <= 0 {
		s.batch = 64
	}
	s.batch = min(s.batch, s.ctx*s.slots) // no step holds more
	var err error
	if s.act, err = ActOf(c.Activation); err != nil {
		return nil, err
	}
	s.embedScale = 1
	if c.EmbedScale {
		s.embedScale = float32(math.Sqrt(float64(c.HiddenSize)))
	}
	qDim, kvDim := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	s.shape = CacheShape{Layers: c.NumLayers, Slots: s.slots, Positions: s.ctx, KVDim: kvDim, HeadDim: c.HeadDim, Type: opts.KVCache}
	if err := s.fits(); err != nil {
		return nil, err
	}
	if err := s.bind(); err != nil {
		return nil, err
	}
	if s.cache, err = s.be.NewCache(s.shape); err != nil {
		return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
	}
	for _, b := range []struct {
		dst *Buf
		n   int
	}{
		{&s.x, c.HiddenSize}, {&s.qkv, qDim + 2*kvDim}, {&s.att, qDim},
		{&s.h, c.IntermediateSize}, {&s.logits, c.VocabSize},
	} {
		if *b.dst, err = s.be.Alloc(s.batch * b.n); err != nil {
			return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
		}
	}
	return s, nil
}

// Pos is the number of tokens in the cache (the position of the next token).
func (s *Session) Pos() int { return s.pos }

// Context is the number of positions the session holds (each slot's).
func (s *Session) Context() int { return s.ctx }

// Slots is the number of sequences the cache holds.
func (s *Session) Slots() int { return s.slots }

// Batch is the most tokens a step carries.
func (s *Session) Batch() int { return s.batch }

// Model is the session's model.
func (s *Session) Model() *Model { return s.m }

// Reset empties the cache, starting a new sequence.
func (s *Session) Reset() { s.pos = 0 }

// Truncate keeps the first n tokens of the sequence and drops the rest, so
// a chat whose new prompt shares a prefix with the cache prefills only what
// differs. Later positions are overwritten by the next Forward.
func (s *Session) Truncate(n int) {
	if n >= 0 && n < s.pos {
		s.pos = n
	}
}

// CacheBytes is the memory of the key/value cache, every slot's.
func (s *Session) CacheBytes() int64 { return s.shape.Bytes() }

// KVCache is how the session's cache stores keys and values.
func (s *Session) KVCache() KVType { return s.shape.Type }

// Forward appends tokens to the sequence and returns the logits of the last one.
func (s *Session) Forward(ctx context.Context, tokens []int) ([]float32, error) {
	res, err := s.run(ctx, tokens, Want{Logits: true}, false, nil)
	if err != nil {
		return nil, err
	}
	return res.Logits, nil
}

// ForwardOutput is what ForwardAll returns.
type ForwardOutput struct {
	// Logits are [n, vocab], one row per token.
	Logits []float32
	// Hidden, when asked for, holds NumLayers+1 residual streams [n, hidden]:
	// the embeddings, then the output of each layer (before the final norm).
	Hidden [][]float32
}

// NextGreedy appends tokens and returns the id of the most likely next
// token. Only the id comes back from the backend; its logits are not kept
// (a backend may already run the step on that id).
func (s *Session) NextGreedy(ctx context.Context, tokens []int) (int, error) {
	res, err := s.run(ctx, tokens, Want{Greedy: true}, false, nil)
	if err != nil {
		return 0, err
	}
	if len(res.Next) != 1 {
		return 0, fmt.Errorf("model: %s: a greedy step returned %d ids", s.be.Name(), len(res.Next))
	}
	return res.Next[0], nil
}

// NextCandidates appends tokens and returns the k most likely next tokens
// with the softmax denominator at temperature temp, found where the logits
// are, so only they are copied back. The logits stay kept: where the
// candidates do not settle a draw, LastLogits reads them all.
func (s *Session) NextCandidates(ctx context.Context, tokens []int, k int, temp float32) (*Candidates, error) {
	res, err := s.run(ctx, tokens, Want{TopK: k, Temp: temp}, false, nil)
	if err != nil {
		return nil, err
	}
	if len(res.Cands) != 1 || res.Cands[0] == nil {
		return nil, fmt.Errorf("model: %s: a sampling step returned no candidates", s.be.Name())
	}
	s.kept = 1
	return res.Cands[0], nil
}

// NextDrawn appends tokens and has the backend draw the next token as
// the sampler d came from would (Sampler.Draw), where the logits are. It
// reports false where the backend could not settle the draw: the logits
// are then kept for LastLogits, and the caller samples from them.
func (s *Session) NextDrawn(ctx context.Context, tokens []int, d *Draw) (int, bool, error) {
	res, err := s.run(ctx, tokens, Want{Draw: d}, false, nil)
	if err != nil {
		return 0, false, err
	}
	if !res.Drawn {
		s.kept = 1
		return 0, false, nil
	}
	if len(res.Next) != 1 {
		return 0, false, fmt.Errorf("model: %s: a drawing step returned %d ids", s.be.Name(), len(res.Next))
	}
	return res.Next[0], true, nil
}

// LastLogits copies back the logits of the last step, when it was
// NextCandidates's or an unsettled NextDrawn's (other steps return
// theirs, or keep none).
func (s *Session) LastLogits() ([]float32, error) { return s.RowLogits(0) }

// RowLogits copies back row r of the last step's logits, when that step
// kept them: NextCandidates, an unsettled NextDrawn, or a StepBatch that
// asked for candidates or logits (so a sequence whose candidates do not
// settle its draw reads its whole row, and only its own).
func (s *Session) RowLogits(r int) ([]float32, error) {
	if r < 0 || r >= s.kept {
		return nil, fmt.Errorf("model: the last step kept no logits row %d (it kept %d)", r, s.kept)
	}
	vocab := s.cfg.VocabSize
	logits := make([]float32, vocab)
	if err := s.be.Read(logits, s.logits.Slice(r*vocab, vocab)); err != nil {
		return nil, fmt.Errorf("model: %s: read logits: %w", s.be.Name(), err)
	}
	return logits, nil
}

// ForwardAll appends tokens and returns the logits of every one of them
// (for perplexity), and with hidden the residual stream after each layer.
func (s *Session) ForwardAll(ctx context.Context, tokens []int, hidden bool) (*ForwardOutput, error) {
	out := &ForwardOutput{}
	if hidden {
		out.Hidden = make([][]float32, s.cfg.NumLayers+1)
	}
	res, err := s.run(ctx, tokens, Want{Logits: true}, true, out)
	if err != nil {
		return nil, err
	}
	out.Logits = res.Logits
	return out, nil
}

// run processes tokens in steps of at most the batch size, asking the
// last for want of the last token's logits (or every token's, with all).
// With out.Hidden it keeps the residual streams.
func (s *Session) run(ctx context.Context, tokens []int, want Want, all bool, out *ForwardOutput) (*StepResult, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("model: no tokens to process")
	}
	if s.pos+len(tokens) > s.ctx {
		return nil, fmt.Errorf("model: %d tokens at position %d exceed the context of %d", len(tokens), s.pos, s.ctx)
	}
	for _, t := range tokens {
		if t < 0 || t >= s.cfg.VocabSize {
			return nil, fmt.Errorf("model: token id %d is outside the vocabulary of %d", t, s.cfg.VocabSize)
		}
	}
	s.kept = 0
	res := &StepResult{}
	for lo := 0; lo < len(tokens); lo += s.batch {
		chunk := tokens[lo:min(lo+s.batch, len(tokens))]
		last := lo+len(chunk) == len(tokens)
		r, err := s.step(ctx, chunk, want, all, last, out)
		if err != nil {
			return nil, err
		}
		res.Logits = append(res.Logits, r.Logits...)
		res.Next, res.Cands, res.Drawn = r.Next, r.Cands, r.Drawn
	}
	return res, nil
}

// step runs the model over n ≤ batch tokens at the current position. The
// logits are computed for every token (all), or for the last (the last
// chunk), or not at all.
func (s *Session) step(ctx context.Context, tokens []int, want Want, all, last bool, out *ForwardOutput) (*StepResult, error) {
	n, vocab := len(tokens), s.cfg.VocabSize
	st := &Step{Seqs: []Seq{{Tokens: tokens, Pos: s.pos}}, Cache: s.cache}
	var heads []span
	switch {
	case all:
		heads = []span{{from: 0, rows: n}}
	case last:
		heads = []span{{from: n - 1, rows: 1}}
	}
	if len(heads) > 0 {
		st.Logits, st.Vocab, st.Want = s.logits.Slice(0, heads[0].rows*vocab), vocab, want
	}
	// A step that reads the residual stream back midway, or ends without
	// logits, differs from the decode step the session's key names.
	hidden := out != nil && out.Hidden != nil
	if !hidden && len(heads) > 0 {
		st.Key = stepKey{s, all}
	}
	res, err := s.be.Step(ctx, st, func() error { return s.forward(ctx, n, heads, out) })
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
	}
	s.pos += n
	return res, nil
}

// stepKey names a session's steps that queue the same operations for the
// same number of tokens: those with logits of the last token, or of all.
type stepKey struct {
	s   *Session
	all bool
}

// span is a run of consecutive tokens of a step whose logits are wanted:
// rows tokens from token from, into the logits rows that follow the
// spans before it.
type span struct{ from, rows int }

// forward queues the forward pass over the step's n tokens, from the
// embeddings to the logits of heads (one product of the head each): a
// layer is attention then the gated MLP, each around the residual
// stream x.
func (s *Session) forward(ctx context.Context, n int, heads []span, out *ForwardOutput) error {
	be, c := s.be, s.cfg
	dim, qDim, kvDim, ffn := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.IntermediateSize
	x := s.x.Slice(0, n*dim)
	q, k, v := s.qkv.Slice(0, n*qDim), s.qkv.Slice(n*qDim, n*kvDim), s.qkv.Slice(n*(qDim+kvDim), n*kvDim)
	att, h := s.att.Slice(0, n*qDim), s.h.Slice(0, n*ffn)

	be.Embed(x, s.embed, s.embedScale)
	if err := s.keepHidden(out, 0, x); err != nil {
		return err
	}
	for l, w := range s.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		be.Linear(x, w.attnNorm, Output{Dst: q, W: w.wq, Bias: w.bq}, Output{Dst: k, W: w.wk, Bias: w.bk}, Output{Dst: v, W: w.wv, Bias: w.bv})
		be.Attention(att, q, k, v, s.cache, l, w.attn)
		be.Linear(att, w.attnSub, Output{Dst: x, W: w.wo, Norm: w.postAttn, Add: true})
		be.Linear(x, w.ffnNorm, Output{Dst: h, W: w.gate, Up: w.up, Act: s.act})
		be.Linear(h, w.ffnSub, Output{Dst: x, W: w.down, Norm: w.postFfn, Add: true})
		if err := s.keepHidden(out, l+1, x); err != nil {
			return err
		}
	}
	row := 0
	for _, h := range heads {
		be.Linear(x.Slice(h.from*dim, h.rows*dim), s.norm, Output{Dst: s.logits.Slice(row*c.VocabSize, h.rows*c.VocabSize), W: s.output, SoftCap: float32(c.FinalSoftCap)})
		row += h.rows
	}
	return nil
}

// keepHidden copies the residual stream to the host when asked.
func (s *Session) keepHidden(out *ForwardOutput, layer int, x Buf) error {
	if out == nil || out.Hidden == nil {
		return nil
	}
	h := make([]float32, x.Len())
	if err := s.be.Read(h, x); err != nil {
		return fmt.Errorf("model: %s: read hidden state %d: %w", s.be.Name(), layer, err)
	}
	out.Hidden[layer] = append(out.Hidden[layer], h...)
	return nil
}
