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
	// Batch is the most tokens processed at once in prefill (0: 64).
	Batch int
}

// DefaultContext caps the KV cache when SessionOptions.Context is 0, so
// that models with very long position ranges (Mistral's 32768) do not
// allocate gigabytes of cache up front.
const DefaultContext = 4096

// Session runs a model on a backend and holds the key/value cache of one
// sequence: Forward appends tokens and returns logits.
type Session struct {
	m     *Model
	be    Backend
	cfg   Config
	ctx   int
	batch int
	pos   int
	cache KVCache

	// weights on the backend
	embed, norm, output, invFreq Mat
	layers                       []layerMats

	// activations [batch, ...]
	x, xb, xb2, q, k, v, att, gate, up, logits Buf
	// one token's [q k v] and [gate up], where the backend fuses products
	qkv, gateUp Buf
}

// layerMats are one layer's weights on the backend.
type layerMats struct {
	attnNorm, ffnNorm, wq, wk, wv, wo, gate, up, down, attnSub, ffnSub Mat
	// qkv and gateUp join wq/wk/wv and gate/up for decode (nil: not fused).
	qkv, gateUp Mat
}

// NewSession binds the model to a backend and allocates its cache and
// activation buffers.
func (m *Model) NewSession(opts SessionOptions) (*Session, error) {
	c := m.Config
	s := &Session{m: m, be: opts.Backend, cfg: c, ctx: opts.Context, batch: opts.Batch}
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
	s.batch = min(s.batch, s.ctx)
	up := func(name string) (Mat, error) {
		w, ok := m.Weights[name]
		if !ok {
			return nil, fmt.Errorf("model: tensor %s is missing", name)
		}
		mat, err := s.be.Upload(w)
		if err != nil {
			return nil, fmt.Errorf("model: %s: upload %s: %w", s.be.Name(), name, err)
		}
		return mat, nil
	}
	var err error
	if s.embed, err = up("model.embed_tokens.weight"); err != nil {
		return nil, err
	}
	if s.norm, err = up("model.norm.weight"); err != nil {
		return nil, err
	}
	if s.output, err = s.be.Upload(m.Output()); err != nil {
		return nil, fmt.Errorf("model: %s: upload output: %w", s.be.Name(), err)
	}
	inv := c.InvFreq()
	if s.invFreq, err = s.be.Upload(FloatWeight(1, len(inv), inv)); err != nil {
		return nil, fmt.Errorf("model: %s: upload rope frequencies: %w", s.be.Name(), err)
	}
	for l := 0; l < c.NumLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		var lm layerMats
		for _, f := range []struct {
			dst  *Mat
			name string
		}{
			{&lm.attnNorm, "input_layernorm.weight"}, {&lm.ffnNorm, "post_attention_layernorm.weight"},
			{&lm.wq, "self_attn.q_proj.weight"}, {&lm.wk, "self_attn.k_proj.weight"},
			{&lm.wv, "self_attn.v_proj.weight"}, {&lm.wo, "self_attn.o_proj.weight"},
			{&lm.gate, "mlp.gate_proj.weight"}, {&lm.up, "mlp.up_proj.weight"}, {&lm.down, "mlp.down_proj.weight"},
		} {
			if *f.dst, err = up(p + f.name); err != nil {
				return nil, err
			}
		}
		if c.SubNorms {
			if lm.attnSub, err = up(p + "self_attn.attn_sub_norm.weight"); err != nil {
				return nil, err
			}
			if lm.ffnSub, err = up(p + "mlp.ffn_sub_norm.weight"); err != nil {
				return nil, err
			}
		}
		if f, ok := s.be.(Fuser); ok {
			if m, ok := f.Fuse(lm.wq, lm.wk, lm.wv); ok {
				lm.qkv = m
			}
			if m, ok := f.Fuse(lm.gate, lm.up); ok {
				lm.gateUp = m
			}
		}
		s.layers = append(s.layers, lm)
	}
	kvDim := c.NumKVHeads * c.HeadDim
	if s.cache, err = s.be.NewCache(c.NumLayers, s.ctx, kvDim); err != nil {
		return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
	}
	qDim := c.NumHeads * c.HeadDim
	for _, b := range []struct {
		dst *Buf
		n   int
	}{
		{&s.x, c.HiddenSize}, {&s.xb, max(c.HiddenSize, qDim)}, {&s.xb2, c.HiddenSize},
		{&s.q, qDim}, {&s.k, kvDim}, {&s.v, kvDim}, {&s.att, qDim},
		{&s.gate, c.IntermediateSize}, {&s.up, c.IntermediateSize}, {&s.logits, c.VocabSize},
	} {
		if *b.dst, err = s.be.Alloc(s.batch * b.n); err != nil {
			return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
		}
	}
	if len(s.layers) > 0 && s.layers[0].qkv != nil {
		if s.qkv, err = s.be.Alloc(qDim + 2*kvDim); err != nil {
			return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
		}
	}
	if len(s.layers) > 0 && s.layers[0].gateUp != nil {
		if s.gateUp, err = s.be.Alloc(2 * c.IntermediateSize); err != nil {
			return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
		}
	}
	return s, nil
}

// Pos is the number of tokens in the cache (the position of the next token).
func (s *Session) Pos() int { return s.pos }

// Context is the number of positions the session holds.
func (s *Session) Context() int { return s.ctx }

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

// CacheBytes is the memory of the key/value cache.
func (s *Session) CacheBytes() int64 {
	return int64(s.cfg.NumLayers) * int64(s.ctx) * int64(s.cfg.NumKVHeads*s.cfg.HeadDim) * 2 * 4
}

// Forward appends tokens to the sequence and returns the logits of the last one.
func (s *Session) Forward(ctx context.Context, tokens []int) ([]float32, error) {
	out, err := s.run(ctx, tokens, false, false)
	if err != nil {
		return nil, err
	}
	return out.Logits, nil
}

// ForwardOutput is what ForwardAll returns.
type ForwardOutput struct {
	// Logits are [n, vocab], one row per token.
	Logits []float32
	// Hidden, when asked for, holds NumLayers+1 residual streams [n, hidden]:
	// the embeddings, then the output of each layer (before the final norm).
	Hidden [][]float32

	// greedy asks for the most likely next token only (NextGreedy).
	greedy bool
	next   int
	// topk > 0 asks a TopKer backend for that many candidates at
	// temperature temp (NextCandidates).
	topk  int
	temp  float32
	cands *Candidates
}

// NextGreedy appends tokens and returns the id of the most likely next
// token. On a backend that implements Argmaxer the logits stay where they
// are and only the id is copied back; on a GreedyChainer the step on that
// id is already queued when it returns (so LastLogits then reads that
// step's logits, not these).
func (s *Session) NextGreedy(ctx context.Context, tokens []int) (int, error) {
	out, err := s.runOut(ctx, tokens, &ForwardOutput{greedy: true}, false, false)
	if err != nil {
		return 0, err
	}
	return out.next, nil
}

// NextCandidates appends tokens and returns the k most likely next tokens
// with the softmax denominator at temperature temp, found where the logits
// are (TopKer), so only they are copied back. On other backends, or where
// the backend could not be sure of them, it returns the last token's
// logits instead (and nil candidates).
func (s *Session) NextCandidates(ctx context.Context, tokens []int, k int, temp float32) (*Candidates, []float32, error) {
	out, err := s.runOut(ctx, tokens, &ForwardOutput{topk: k, temp: temp}, false, false)
	switch {
	case err != nil:
		return nil, nil, err
	case out.cands == nil:
		return nil, out.Logits, nil
	case out.cands.Exact:
		return out.cands, nil, nil
	}
	logits, err := s.LastLogits()
	return nil, logits, err
}

// LastLogits copies back the logits of the last step's last token (after
// NextGreedy on a GreedyChainer backend: of the step it queued ahead).
func (s *Session) LastLogits() ([]float32, error) {
	logits := make([]float32, s.cfg.VocabSize)
	if err := s.be.Read(logits, s.logits, 0); err != nil {
		return nil, fmt.Errorf("model: %s: read logits: %w", s.be.Name(), err)
	}
	return logits, nil
}

// ForwardAll appends tokens and returns the logits of every one of them
// (for perplexity), and with hidden the residual stream after each layer.
func (s *Session) ForwardAll(ctx context.Context, tokens []int, hidden bool) (*ForwardOutput, error) {
	return s.run(ctx, tokens, true, hidden)
}

// run processes tokens in chunks of the batch size.
func (s *Session) run(ctx context.Context, tokens []int, all, hidden bool) (*ForwardOutput, error) {
	return s.runOut(ctx, tokens, &ForwardOutput{}, all, hidden)
}

// runOut is run filling out.
func (s *Session) runOut(ctx context.Context, tokens []int, out *ForwardOutput, all, hidden bool) (*ForwardOutput, error) {
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
	if hidden {
		out.Hidden = make([][]float32, s.cfg.NumLayers+1)
	}
	for lo := 0; lo < len(tokens); lo += s.batch {
		chunk := tokens[lo:min(lo+s.batch, len(tokens))]
		last := lo+len(chunk) == len(tokens)
		if err := s.step(ctx, chunk, out, all, last, hidden); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// step runs the model over n ≤ batch tokens at the current position: the
// whole forward pass, top to bottom.
func (s *Session) step(ctx context.Context, tokens []int, out *ForwardOutput, all, last, hidden bool) error {
	be, c, n := s.be, s.cfg, len(tokens)
	// The final norm and the logits run for every row, or only the last
	// token's, or not at all for a chunk of prefill before the last.
	rows, from, head := n, 0, true
	if !all {
		rows, from, head = 1, n-1, last
	}
	enqueue := func() error { return s.enqueue(ctx, n, rows, from, head, out, hidden) }
	// A decode step is the same every token: replayed where the backend
	// can, and already queued where the greedy step before chained it.
	r, replay := be.(StepReplayer)
	replay = replay && n == 1 && !hidden && head
	chainer, _ := be.(GreedyChainer)
	if !replay || chainer == nil || !chainer.Chained(s, tokens, s.pos) {
		if err := be.SetStep(tokens, s.pos); err != nil {
			return fmt.Errorf("model: %s: %w", be.Name(), err)
		}
		var err error
		if replay {
			err = r.ReplayStep(s, enqueue)
		} else {
			err = enqueue()
		}
		if err != nil {
			return err
		}
	}
	if !head {
		s.pos += n
		return be.Err()
	}
	if tk, ok := be.(TopKer); ok && out.topk > 0 {
		cands, err := tk.TopK(s.logits, c.VocabSize, out.topk, out.temp)
		if err != nil {
			return fmt.Errorf("model: %s: top-k: %w", be.Name(), err)
		}
		out.cands = cands
		s.pos += n
		return nil
	}
	if am, ok := be.(Argmaxer); ok && out.greedy {
		var next int
		var err error
		if replay && chainer != nil && s.pos+2 <= s.ctx {
			// The next step, on this id, is queued before it comes back.
			next, err = chainer.ChainGreedy(s, s.logits, c.VocabSize)
		} else {
			next, err = am.Argmax(s.logits, c.VocabSize)
		}
		if err != nil {
			return fmt.Errorf("model: %s: argmax: %w", be.Name(), err)
		}
		out.next = next
		s.pos += n
		return nil
	}
	logits := make([]float32, rows*c.VocabSize)
	if err := be.Read(logits, s.logits, 0); err != nil {
		return fmt.Errorf("model: %s: read logits: %w", be.Name(), err)
	}
	if err := be.Err(); err != nil {
		return fmt.Errorf("model: %s: %w", be.Name(), err)
	}
	out.Logits = append(out.Logits, logits...)
	if out.greedy {
		out.next = argmaxLogits(logits)
	}
	s.pos += n
	return nil
}

// enqueue queues the forward pass over the step's n tokens, from the
// embeddings to the logits of rows rows from row from (none unless head).
func (s *Session) enqueue(ctx context.Context, n, rows, from int, head bool, out *ForwardOutput, hidden bool) error {
	be, c := s.be, s.cfg
	dim, qDim, ffn := c.HiddenSize, c.NumHeads*c.HeadDim, c.IntermediateSize
	eps := float32(c.RMSNormEps)
	shape := AttnShape{Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		Window: c.SlidingWindow, Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	// Token embeddings (Gemma scales them by sqrt(hidden)).
	scale := float32(1)
	if c.EmbedScale {
		scale = float32(math.Sqrt(float64(dim)))
	}
	be.Embed(s.x, s.embed, n, scale)
	if err := s.keepHidden(out, 0, n, hidden); err != nil {
		return err
	}

	// The residual stream is x, plus xb2 while pending: a product's output
	// waits to be added with the next norm (one kernel where the backend
	// fuses them, AddNormer). A backend that folds norms, gates and
	// residual adds into the products (MatMulFuser, decode) leaves nothing
	// pending and needs no norm, gate or add kernels at all.
	an, addNormFused := be.(AddNormer)
	fz, _ := be.(MatMulFuser)
	if n != 1 {
		fz = nil
	}
	fused := func(dst, x Buf, w Mat, f Fusion) bool { return fz != nil && fz.FusedMatMul(dst, x, w, f) }
	normOf := func(w Mat, d int, plusOne bool) Fusion {
		return Fusion{Norm: w, Dim: d, Eps: eps, PlusOne: plusOne}
	}
	pending := false
	// norm makes xb the RMSNorm of the residual stream.
	norm := func(w Mat) {
		switch {
		case pending && addNormFused:
			an.AddRMSNorm(s.xb, s.x, s.xb2, w, n, dim, eps, c.NormPlusOne)
		case pending:
			be.Add(s.x, s.xb2, n*dim)
			be.RMSNorm(s.xb, s.x, w, n, dim, eps, c.NormPlusOne)
		default:
			be.RMSNorm(s.xb, s.x, w, n, dim, eps, c.NormPlusOne)
		}
		pending = false
	}
	// normMatMul queues dst = w RMSNorm(residual) for each (dst, w) pair:
	// one kernel each where the backend folds the norm in, else one norm
	// and the products.
	type product struct {
		dst Buf
		w   Mat
	}
	normMatMul := func(nw Mat, ps ...product) {
		normed := false // xb holds this norm
		for _, p := range ps {
			if !pending && fused(p.dst, s.x, p.w, normOf(nw, dim, c.NormPlusOne)) {
				continue
			}
			if !normed {
				norm(nw)
				normed = true
			}
			be.MatMul(p.dst, s.xb, p.w, n)
		}
	}
	// flush adds a pending product to x.
	flush := func() {
		if pending {
			be.Add(s.x, s.xb2, n*dim)
			pending = false
		}
	}
	ra, ropeAttn := be.(RopeAttender)
	for l, w := range s.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Attention: norm, q/k/v projections, rotary embeddings, attention
		// over the cache, (BitNet: sub-norm), output projection, residual.
		q, k, v := s.q, s.k, s.v
		if n == 1 && w.qkv != nil && s.qkv != nil {
			// Decode with fused weights: one product.
			kvDim := c.NumKVHeads * c.HeadDim
			normMatMul(w.attnNorm, product{s.qkv, w.qkv})
			q, k, v = be.View(s.qkv, 0, qDim), be.View(s.qkv, qDim, kvDim), be.View(s.qkv, qDim+kvDim, kvDim)
		} else {
			normMatMul(w.attnNorm, product{q, w.wq}, product{k, w.wk}, product{v, w.wv})
		}
		if n == 1 && ropeAttn {
			// the rotation of q and k inside the attention
			ra.RopeAttention(s.att, q, k, v, s.cache, l, shape, s.invFreq)
		} else {
			be.Rope(q, n, c.NumHeads, c.HeadDim, s.invFreq)
			be.Rope(k, n, c.NumKVHeads, c.HeadDim, s.invFreq)
			be.Attention(s.att, q, k, v, s.cache, l, n, shape)
		}
		of := Fusion{Add: true}
		if c.SubNorms {
			of = normOf(w.attnSub, qDim, false)
			of.Add = true
		}
		if !fused(s.x, s.att, w.wo, of) {
			if c.SubNorms {
				be.RMSNorm(s.att, s.att, w.attnSub, n, qDim, eps, false)
			}
			be.MatMul(s.xb2, s.att, w.wo, n)
			pending = true
		}

		// Gated MLP: norm, act(gate) * up, (BitNet: sub-norm), down,
		// residual.
		// With the activation folded into the joined product (OutAct),
		// gate already holds act(gate) * up.
		gate, up, gated := s.gate, s.up, false
		if n == 1 && w.gateUp != nil && s.gateUp != nil {
			gate, up = be.View(s.gateUp, 0, ffn), be.View(s.gateUp, ffn, ffn)
			gf := normOf(w.ffnNorm, dim, c.NormPlusOne)
			gf.OutAct = c.Activation
			if gated = !pending && fused(gate, s.x, w.gateUp, gf); !gated {
				normMatMul(w.ffnNorm, product{s.gateUp, w.gateUp})
			}
		} else {
			normMatMul(w.ffnNorm, product{gate, w.gate}, product{up, w.up})
		}
		df := Fusion{Add: true}
		if c.SubNorms {
			df = normOf(w.ffnSub, ffn, false)
			df.Add = true
		}
		if !gated {
			df.Act, df.Up = c.Activation, up
		}
		if !fused(s.x, gate, w.down, df) {
			if !gated {
				be.GLU(gate, gate, up, n*ffn, c.Activation)
			}
			if c.SubNorms {
				be.RMSNorm(gate, gate, w.ffnSub, n, ffn, eps, false)
			}
			be.MatMul(s.xb2, gate, w.down, n)
			pending = true
		}
		if hidden || l+1 == len(s.layers) {
			flush()
		}
		if err := s.keepHidden(out, l+1, n, hidden); err != nil {
			return err
		}
	}

	// Final norm and logits.
	if !head {
		return nil
	}
	x := be.View(s.x, from*dim, rows*dim)
	if rows == 1 && fused(s.logits, x, s.output, normOf(s.norm, dim, c.NormPlusOne)) {
		return nil
	}
	xb := be.View(s.xb, 0, rows*dim)
	be.RMSNorm(xb, x, s.norm, rows, dim, eps, c.NormPlusOne)
	be.MatMul(s.logits, xb, s.output, rows)
	return nil
}

// keepHidden copies the residual stream to the host when asked.
func (s *Session) keepHidden(out *ForwardOutput, layer, n int, hidden bool) error {
	if !hidden {
		return nil
	}
	h := make([]float32, n*s.cfg.HiddenSize)
	if err := s.be.Read(h, s.x, 0); err != nil {
		return fmt.Errorf("model: %s: read hidden state %d: %w", s.be.Name(), layer, err)
	}
	out.Hidden[layer] = append(out.Hidden[layer], h...)
	return nil
}

// argmaxLogits is the index of the largest value (the first on ties).
func argmaxLogits(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
