package model

// Backend is the small set of operations the forward pass (forward.go) is
// written against, once, for every architecture. The CPU backend (cpu.go)
// implements it with goroutine-parallel kernels; a CUDA backend implements
// the same methods with device-resident data. The contract is shaped so:
//
//   - Buffers and weights are opaque handles the backend allocates (Alloc,
//     Upload, NewCache). The forward pass never touches their memory; only
//     Read copies a result (logits, hidden states) back to the host. No
//     operation implies a host copy.
//   - Operations are enqueued in order and do not return errors: a backend
//     that runs asynchronously (a CUDA stream) records the first failure and
//     reports it from Read or Err, as CUDA's sticky errors do. The CPU backend
//     runs each operation to completion before returning.
//   - The step's variable inputs (token ids and the position of the first
//     token) are set once per step by SetStep; Embed, Rope and Attention read
//     them from backend state rather than from their arguments. A GPU backend
//     keeps them in device memory, so a decode step (n = 1, same buffers,
//     same arguments every time) can be captured once as a CUDA graph and
//     replayed with only SetStep's small upload in between.
//   - Shapes (n tokens, dims, heads) are plain arguments; they are fixed
//     for decode, and prefill runs in chunks of at most the session's batch.
//
// Activations are row-major [n, dim] float32. A weight is [rows, cols]
// (rows = output features); MatMul computes dst = x · Wᵀ, reading each
// weight row once for all n tokens.
type Backend interface {
	// Name identifies the backend in messages ("cpu", "cuda").
	Name() string
	// Upload makes a weight resident on the backend. It is called once per
	// weight and session; a backend may cache by *Weight.
	Upload(w *Weight) (Mat, error)
	// Alloc returns a zeroed buffer of n float32 values.
	Alloc(n int) (Buf, error)
	// View is the part [off, off+n) of a buffer, sharing its memory.
	View(b Buf, off, n int) Buf
	// NewCache allocates a key/value cache for layers layers, positions
	// positions and kvDim values per position (keys and values each).
	NewCache(layers, positions, kvDim int) (KVCache, error)

	// SetStep sets the token ids of the next step and the position of the
	// first of them.
	SetStep(tokens []int, pos int) error
	// Embed writes the step's token rows of table, times scale, into dst [n, cols].
	Embed(dst Buf, table Mat, n int, scale float32)
	// RMSNorm normalizes each of the n rows of x (length dim) into dst:
	// x / sqrt(mean(x²) + eps) * w, or * (1 + w) when plusOne (Gemma).
	RMSNorm(dst, x Buf, w Mat, n, dim int, eps float32, plusOne bool)
	// MatMul computes dst[n, rows] = x[n, cols] · Wᵀ.
	MatMul(dst, x Buf, w Mat, n int)
	// Rope rotates x [n, heads*headDim] in place at the step's positions
	// (HF rotate-half layout: pairs (i, i+headDim/2)), with the inverse
	// frequencies invFreq [headDim/2] uploaded once as a weight.
	Rope(x Buf, n, heads, headDim int, invFreq Mat)
	// Attention stores the step's keys and values k, v [n, kvHeads*headDim]
	// in layer's cache at the step's positions, then writes into out
	// [n, heads*headDim] each query's causal attention over the cache
	// (grouped-query: query head h reads kv head h/(heads/kvHeads); only the
	// last Window positions when Window > 0).
	Attention(out, q, k, v Buf, c KVCache, layer, n int, a AttnShape)
	// GLU computes dst = act(gate) * up elementwise over n values.
	GLU(dst, gate, up Buf, n int, act string)
	// Add computes dst += x over n values.
	Add(dst, x Buf, n int)

	// Read waits for the enqueued work and copies len(dst) values of src,
	// from off, to the host.
	Read(dst []float32, src Buf, off int) error
	// Err reports the first failure of an enqueued operation, if any.
	Err() error
}

// Buf is an activation buffer owned by a backend (host memory on the CPU,
// a device pointer on a GPU).
type Buf interface {
	// Len is the number of float32 values.
	Len() int
}

// Mat is a weight resident on a backend.
type Mat any

// KVCache is a session's key/value cache on a backend.
type KVCache any

// AttnShape is the geometry of attention.
type AttnShape struct {
	Heads, KVHeads, HeadDim int
	// Window limits attention to the last Window positions (0: all).
	Window int
	// Scale multiplies q·k (1/sqrt(HeadDim)).
	Scale float32
}

// StepReplayer is implemented by backends that can record a decode step
// once and replay it (a CUDA graph). The session calls ReplayStep for
// one-token steps, after SetStep, with a key that stays the same while the
// step's buffers and arguments do; enqueue queues the step's operations.
// The backend runs enqueue directly, or records what it queues, or replays
// an earlier recording instead of calling it.
type StepReplayer interface {
	ReplayStep(key any, enqueue func() error) error
}

// Argmaxer is implemented by backends that find the largest of n values
// where they are (on the device), so greedy decoding copies back one token
// id instead of the logits.
type Argmaxer interface {
	Argmax(src Buf, n int) (int, error)
}

// GreedyChainer is implemented by backends that, after a replayed decode
// step, can take its argmax as the next step's token where the logits are
// and queue that step before the id has come back, so the host's round
// trip between two greedy tokens is off the device's path. The queued
// step is a guess that the caller goes on greedily from the id; a caller
// that does not (a stop, another token or position) only discards it: it
// wrote the cache one position past the sequence, which the next real
// step there overwrites, and the logits, which a greedy caller does not
// read.
type GreedyChainer interface {
	// ChainGreedy returns the argmax of src[0..n), the logits of key's
	// decode step, and queues key's step once more on it, one position on.
	ChainGreedy(key any, src Buf, n int) (int, error)
	// Chained says whether key's step on tokens at pos is the one
	// ChainGreedy queued (and so needs no SetStep or replay); any answer
	// ends the chain.
	Chained(key any, tokens []int, pos int) bool
}

// TopKer is implemented by backends that find the k largest of n logits
// where they are, so sampling copies back k candidates, not the
// vocabulary.
type TopKer interface {
	TopK(src Buf, n, k int, temp float32) (*Candidates, error)
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

// Fuser is implemented by backends that can join weights read by the same
// input along their rows (q/k/v, gate/up), so a decode step runs one
// product instead of several. Fuse returns the joined weight, or false
// when these weights cannot be joined; the parts stay usable on their own
// (the backend may make them views into the joined one).
type Fuser interface {
	Fuse(parts ...Mat) (Mat, bool)
}

// RopeAttender is implemented by backends that rotate q and k inside the
// attention of a decode step (one token) instead of in a separate pass.
type RopeAttender interface {
	// RopeAttention is Rope of q (Heads heads) and k (KVHeads heads) at
	// the step's position with invFreq, then Attention, for one token.
	RopeAttention(out, q, k, v Buf, c KVCache, layer int, a AttnShape, invFreq Mat)
}

// MatMulFuser is implemented by backends that, for one token, fold the
// steps around a product into it: the gated activation and RMSNorm that
// make its input (it computes them as it reads x) and the residual add
// after it (it adds its output to dst). Decode then needs no norm, gate or
// add passes of its own.
type MatMulFuser interface {
	// FusedMatMul computes dst = w x' for one token, x' being x after f's
	// gate and norm, adding to dst when f.Add; it reports false, queueing
	// nothing, where it cannot (the caller then runs the plain operations).
	FusedMatMul(dst, x Buf, w Mat, f Fusion) bool
}

// Fusion lists the steps FusedMatMul folds into a product.
type Fusion struct {
	// Act, when set, gates x: act(x) * Up (the MLP's activation).
	Act string
	Up  Buf
	// Norm, when set, RMS-normalizes x (after the gate) over Dim values
	// with these weights (plus one where PlusOne, as Gemma stores them).
	Norm    Mat
	Dim     int
	Eps     float32
	PlusOne bool
	// Add adds the product to dst (the residual add) instead of storing it.
	Add bool
	// OutAct, when set, takes w's rows as two halves, gate then up, and
	// writes act(gate row i . x') * (up row i . x') into dst[i]: half as
	// many values, the MLP's activation folded into the joined gate/up
	// product so the down projection reads one vector.
	OutAct string
}

// AddNormer is implemented by backends that fuse the residual add with the
// RMSNorm that follows it (one pass over the row instead of two kernels).
type AddNormer interface {
	// AddRMSNorm computes x += y over n rows of dim, then writes RMSNorm(x)
	// into dst exactly as RMSNorm does.
	AddRMSNorm(dst, x, y Buf, w Mat, n, dim int, eps float32, plusOne bool)
}
