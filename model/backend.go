package model

import (
	"context"
	"fmt"
)

// Backend is what the forward pass (forward.go) is written against, once,
// for every architecture: the model says what to compute, the backend
// decides how. The CPU backend (cpu.go) computes each operation plainly,
// as written; the CUDA backend (package gpu) folds norms, gates, residual
// adds and rotations into its kernels, joins products that read the same
// input, and records a decode step once as a CUDA graph to replay it.
// None of that shows here: there are no optional interfaces, and every
// operation the model asks for runs on the CPU in every test.
//
//   - Weights, buffers and caches are typed handles (Mat, Buf, Cache) the
//     backend hands out; the model never touches their memory. Read copies
//     a buffer back; nothing else implies a host copy.
//   - Operations are queued in order and return no error: a backend that
//     runs asynchronously records the first failure and returns it from
//     Step or Read, as CUDA's sticky errors do.
//   - Shapes follow from the handles: a Linear reads x.Len()/Cols rows.
//   - Step runs one forward step over a batch of sequences, each with its
//     tokens, the position of the first and its cache slot; the operations
//     of the pass read tokens and positions from the step, not from their
//     arguments, so a decode step queues the same operations every token
//     and can be replayed.
type Backend interface {
	// Name identifies the backend in messages ("cpu", "cuda").
	Name() string
	// Available is the memory the backend can still allocate, in bytes (0
	// where it cannot tell): a session checks that its weights, cache and
	// buffers fit before it allocates any of them.
	Available() int64
	// Upload makes weights resident, once per weight and session. Weights
	// uploaded together are read by the same input (q/k/v, gate/up): the
	// backend may store them as one matrix and run a Linear over them as
	// one product.
	Upload(group ...*Weight) ([]Mat, error)
	// Alloc returns a zeroed buffer of n float32 values.
	Alloc(n int) (Buf, error)
	// NewCache allocates a key/value cache.
	NewCache(shape CacheShape) (Cache, error)

	// Step sets the step's tokens and positions, calls pass to queue the
	// forward pass (a backend may instead replay what an earlier step of
	// the same key queued), and returns what st.Want asks of the logits.
	Step(ctx context.Context, st *Step, pass func() error) (*StepResult, error)

	// Embed writes the step's token rows of table, times scale, into dst.
	Embed(dst Buf, table Mat, scale float32)
	// Linear runs products that read the same input: x, RMS-normalized
	// when norm.W is set, times each output's weight, stored in or added
	// to its Dst.
	Linear(x Buf, norm Norm, outs ...Output)
	// Attention rotates q and k (when a.Rope is set) at the step's
	// positions, stores k and v in layer's cache at those positions and
	// slots, and writes into out each query's causal attention over its
	// sequence (grouped-query: query head h reads kv head h/(Heads/KVHeads);
	// only the last Window positions when Window > 0).
	Attention(out, q, k, v Buf, c Cache, layer int, a Attn)

	// Read waits for the queued work and copies len(dst) values of src to
	// the host.
	Read(dst []float32, src Buf) error
}

// Buf is an activation buffer on a backend: a range of float32 values, of
// a buffer Alloc made, that the model slices into views.
type Buf struct {
	id, off, n int
}

// MakeBuf is the handle a backend returns for its buffer id of n values.
func MakeBuf(id, n int) Buf { return Buf{id: id, n: n} }

// ID is the backend's index of the whole buffer.
func (b Buf) ID() int { return b.id }

// Off is the view's first value within the whole buffer.
func (b Buf) Off() int { return b.off }

// Len is the number of float32 values.
func (b Buf) Len() int { return b.n }

// Slice is the view [off, off+n) of b, sharing its memory. A range outside
// b is a bug in the caller, and panics as slicing a Go slice does.
func (b Buf) Slice(off, n int) Buf {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("model: view [%d, %d) of a buffer of %d", off, off+n, b.n))
	}
	return Buf{id: b.id, off: b.off + off, n: n}
}

// Mat is a weight on a backend, [Rows, Cols]. The zero Mat is no weight
// (an absent norm, bias or rotation).
type Mat struct {
	id, rows, cols int
}

// MakeMat is the handle a backend returns for its weight id (1 or more).
func MakeMat(id, rows, cols int) Mat { return Mat{id: id, rows: rows, cols: cols} }

// ID is the backend's index of the weight (0: none).
func (m Mat) ID() int { return m.id }

// Rows is the number of output features.
func (m Mat) Rows() int { return m.rows }

// Cols is the number of input features.
func (m Mat) Cols() int { return m.cols }

// Valid says whether m is a weight.
func (m Mat) Valid() bool { return m.id != 0 }

// Cache is a key/value cache on a backend.
type Cache struct{ id int }

// MakeCache is the handle a backend returns for its cache id.
func MakeCache(id int) Cache { return Cache{id: id} }

// ID is the backend's index of the cache.
func (c Cache) ID() int { return c.id }

// CacheShape is the geometry of a key/value cache: for each of Slots
// sequences and Layers layers, Positions keys and values of KVDim values
// in heads of HeadDim (0: one head of KVDim), stored as Type.
type CacheShape struct {
	Layers, Slots, Positions, KVDim, HeadDim int
	Type                                     KVType
}

// Bytes is the cache's memory.
func (s CacheShape) Bytes() int64 {
	return 2 * int64(s.Layers) * int64(s.Slots) * int64(s.Positions) * s.Type.RowBytes(s.KVDim, s.headDim())
}

// headDim is the values of one head row (one scale of a q8 cache).
func (s CacheShape) headDim() int {
	if s.HeadDim > 0 && s.KVDim%s.HeadDim == 0 {
		return s.HeadDim
	}
	return s.KVDim
}

// Act is the activation of a gated MLP.
type Act int

// The gated MLP activations: act(gate) * up.
const (
	SiLU     Act = iota + 1 // SwiGLU (Llama, Mistral)
	GELUTanh                // GeGLU with tanh-approximated GELU (Gemma)
	ReLU2                   // squared ReLU (BitNet)
)

// ActOf maps config.json's activation name to its Act.
func ActOf(name string) (Act, error) {
	switch name {
	case "silu":
		return SiLU, nil
	case "gelu_tanh":
		return GELUTanh, nil
	case "relu2":
		return ReLU2, nil
	}
	return 0, fmt.Errorf("model: activation %q is not supported", name)
}

// Norm is an RMSNorm: x / sqrt(mean(x²) + Eps) * W.
type Norm struct {
	W   Mat
	Eps float32
}

// Output is one product of a Linear.
type Output struct {
	// Dst receives x·Wᵀ (x normed), [rows, W.Rows()].
	Dst Buf
	W   Mat
	// Up, when set, makes the output gated: Dst = act(x·Wᵀ) * (x·Upᵀ)
	// with Act (the MLP's gate and up products and their activation).
	Up  Mat
	Act Act
	// Bias, when set, [1, W.Rows()], is added to each row of x·Wᵀ (an
	// output without Up).
	Bias Mat
	// Norm, when set, RMS-normalizes each row of the product (Gemma 2's
	// norms after attention and the MLP), then SoftCap, when positive,
	// caps it: SoftCap * tanh(y / SoftCap) (Gemma 2's final logits).
	Norm    Norm
	SoftCap float32
	// Add adds the product to Dst (the residual add) instead of storing it.
	Add bool
}

// Attn is the geometry of attention.
type Attn struct {
	Heads, KVHeads, HeadDim int
	// Scale multiplies q·k (1/sqrt(HeadDim)).
	Scale float32
	// Window limits attention to the last Window positions (0: all).
	Window int
	// QNorm and KNorm, when set, RMS-normalize each head of q and k
	// before the rotation (Qwen3, Gemma 3).
	QNorm, KNorm Norm
	// Rope, when set, is the rotation [1, HeadDim]: each of the HeadDim/2
	// pairs' inverse frequency, then each one's factor for its cos and sin
	// (HF rotate-half layout: pairs (i, i+HeadDim/2); a pair that does not
	// rotate has frequency 0 and factor 1).
	Rope Mat
	// SoftCap, when positive, caps each score (after Scale):
	// SoftCap * tanh(s / SoftCap) (Gemma 2).
	SoftCap float32
}

// Seq is one sequence's part of a step.
type Seq struct {
	// Tokens are the ids fed at positions Pos, Pos+1, ...
	Tokens []int
	Pos    int
	// Slot is the cache slot holding the sequence.
	Slot int
}

// Step is one forward step over a batch of sequences.
//
// A step may mix sequences of several tokens (a prompt, or a chunk of
// one) with sequences of one (decode), each in its own slot at its own
// position: Session.StepBatch sends what a server's scheduler (package
// sched) asks for, which by default is the decode tokens of every running
// sequence together with chunks of new prompts, and, for a backend that
// is better served so, the two as separate steps (sched.Options.
// SeparatePrefill). The tokens are laid out in the order of Seqs, so
// row i of the pass's activations is the i-th token of the step.
type Step struct {
	Seqs  []Seq
	Cache Cache
	// Key, when not nil, promises that every step with this key and the
	// same tokens per sequence (so the same number of sequences) queues
	// the same operations on the same buffers: the backend may record the
	// pass once and replay it, reading the tokens, positions and slots
	// from where Step puts them. A batch step has a key only when each of
	// its sequences carries one token and wants its logits.
	Key any
	// Logits is where the pass leaves the logits, [rows, Vocab]; Want
	// says what comes back of them (nothing when Logits is empty), for
	// each row alike. Which tokens the rows are is the pass's business (a
	// single sequence's last token or all of them; in a batch step the
	// last token of each sequence that asked, in the order of Seqs).
	Logits Buf
	Vocab  int
	Want   Want
}

// Tokens is the number of tokens of the step.
func (st *Step) Tokens() int {
	n := 0
	for _, s := range st.Seqs {
		n += len(s.Tokens)
	}
	return n
}

// Check verifies the step against its cache's shape: at least one token,
// each sequence in its own slot, every position inside the cache, logits
// in rows of whole vocabularies.
func (st *Step) Check(cs CacheShape) error {
	if len(st.Seqs) == 0 || st.Tokens() == 0 {
		return fmt.Errorf("step: no tokens")
	}
	used := map[int]bool{}
	for _, s := range st.Seqs {
		if s.Slot < 0 || s.Slot >= cs.Slots || used[s.Slot] {
			return fmt.Errorf("step: cache slot %d (of %d) is out of range or used twice", s.Slot, cs.Slots)
		}
		used[s.Slot] = true
		if s.Pos < 0 || s.Pos+len(s.Tokens) > cs.Positions {
			return fmt.Errorf("step: %d tokens at position %d exceed the cache's %d positions", len(s.Tokens), s.Pos, cs.Positions)
		}
	}
	if st.Logits.Len() > 0 && (st.Vocab <= 0 || st.Logits.Len()%st.Vocab != 0) {
		return fmt.Errorf("step: logits of %d values are not rows of a vocabulary of %d", st.Logits.Len(), st.Vocab)
	}
	return nil
}

// Want is what a step returns of its logits, for each row.
type Want struct {
	// Logits copies them back.
	Logits bool
	// Greedy finds the largest (the greedy next token).
	Greedy bool
	// TopK finds the TopK most likely tokens at temperature Temp, with
	// the softmax denominator (sampling's candidates).
	TopK int
	Temp float32
	// Draw, when set, draws the next token where the logits are, as a
	// Sampler draws it (Sampler.Draw makes the request): its id comes
	// back in Next, and Drawn says the draw was settled there. Where it
	// was not (a filter reaching past what the backend found), the logits
	// are kept for the caller to sample from (Session.LastLogits).
	Draw *Draw
}

// Draw asks a backend to draw a token: the sampler's options (a
// temperature above 0), the index of the draw in the sampler's sequence
// (its uniform), and the tokens the repetition penalty looks at.
type Draw struct {
	Options SamplerOptions
	Index   uint64
	Recent  []int
}

// StepResult is what Step returns, for each row of the logits.
type StepResult struct {
	// Logits are [rows, vocab] (Want.Logits).
	Logits []float32
	// Next are the argmax ids (Want.Greedy) or the drawn ones (Want.Draw).
	Next []int
	// Drawn says Next holds the tokens Want.Draw asked for.
	Drawn bool
	// Cands are the candidates (Want.TopK).
	Cands []*Candidates
}

// Candidates are the most likely tokens of a step, in the order Sample's
// stable sort puts them (larger logit first, then smaller id).
type Candidates struct {
	IDs    []int
	Logits []float32
	// Exact says they are the k largest; else the caller reads all logits.
	Exact bool
	// SumExp is the softmax denominator over all logits: the sum of
	// exp((x - max) / temp), each term rounded as Sample rounds it.
	SumExp float64
}
