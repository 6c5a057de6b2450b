package gpu

import (
	"slices"

	"lowbit/model"
)

// Greedy decode steps chained on the device.
//
// Unchained, between two greedy tokens the host waits for the step, copies
// the id back and copies it in again as the next step's token, and the GPU
// idles for that round trip, a large share of a small model's token.
// Chained, the argmax kernel writes the id as the next step's token and
// advances the position itself, the next step's graph is queued at once,
// and the host reads the id behind an event while that step already runs.
// The chained step's graph ends with its own argmax (stepGraph.chain: the
// step captured once more with the argmax after its head), which writes
// the id into pinned host memory directly, so between two steps the stream
// holds only the event: an argmax launched after the graph and a copy of
// the id would put a launch and a copy on every token's path. The next
// call finds its step queued (chained)
// when it continues with that id; any other call discards it: it only
// wrote the cache one position past the sequence, which the next real
// step there overwrites, and the logits, which a greedy caller does not
// read.

// chainedStep is the step chainGreedy queued: key's, on token tok at pos;
// argmaxed when it ran as the graph that ends with its argmax
// (stepGraph.chain).
type chainedStep struct {
	key      any
	tok, pos int
	argmaxed bool
	// draw is the draw the step's graph made on its logits (chainDraw)
	// as the next call must ask it (its index and recent tokens
	// advanced), and plan how.
	draw *model.Draw
	plan drawPlan
}

// chainGreedy is the argmax of src[0..n), the logits of key's decode
// step just queued; when key's step is a captured graph, the same step is
// queued once more on that id at the next position before the id comes
// back.
func (b *Backend) chainGreedy(key any, sb Buffer, n int) (int, error) {
	s := b.steps[key]
	run := b.running
	b.running = nil
	if s == nil || s.g == nil || b.n != 1 || b.noChain {
		return b.argmax(sb, n)
	}
	if b.err != nil {
		return 0, b.err
	}
	if s.chain == nil && !s.chainTried {
		if err := b.captureChain(s, sb, n); err != nil {
			return 0, err
		}
	}
	// The chained graph takes the argmax of these logits (the caller's
	// are the same each step); the step running now, when it was that
	// graph, has computed it already.
	fits := s.chain != nil && s.chainSrc == sb && s.chainN == n
	argmaxed := fits && run != nil && run.key == key && run.argmaxed
	next := s.g
	if fits {
		next = s.chain
	}
	var tail func() error
	if !argmaxed {
		tail = func() error { return b.d.argmaxChain(sb, n, b.idx, b.tok, b.pos, b.d.idDev) }
	}
	id, err := b.queueNext(tail, next)
	if err != nil {
		return 0, err
	}
	b.first++
	b.chain = &chainedStep{key: key, tok: int(id), pos: b.first, argmaxed: fits}
	return int(id), nil
}

// queueNext queues tail (the id's kernels for the step running now, when
// its graph did not end with them; nil: none), then the event behind
// the id, then next (the following step's graph), and waits for the id
// of the step at b.first while next runs.
func (b *Backend) queueNext(tail func() error, next *Graph) (int32, error) {
	var id int32
	err := b.run(func() error {
		if err := b.d.hostID(); err != nil {
			return err
		}
		if tail != nil {
			if err := tail(); err != nil {
				return err
			}
		}
		if err := b.d.markID(); err != nil {
			return err
		}
		if err := b.d.launchGraph(next); err != nil {
			return err
		}
		var err error
		id, err = b.d.idFromHost(b.first)
		return err
	})
	return id, err
}

// captureChain records key's step followed by the argmax of its logits at
// src (as chainGreedy queues it) into s.chain, once: the step's pass
// runs again inside the capture.
func (b *Backend) captureChain(s *stepGraph, src Buffer, n int) error {
	s.chainTried = true
	if s.pass == nil || b.noGraphs {
		return nil
	}
	// (the argmax's scratch and the id's memory exist before the capture)
	pre := func() error {
		if err := b.d.hostID(); err != nil {
			return err
		}
		return b.d.argmaxScratch()
	}
	tail := func() error { return b.d.argmaxChain(src, n, b.idx, b.tok, b.pos, b.d.idDev) }
	g, err := b.captureStep(pre, s.pass, tail)
	if err != nil {
		return err
	}
	s.chain, s.chainSrc, s.chainN = g, src, n
	return nil
}

// chained says whether key's step on tokens at pos is the one chainGreedy
// or chainDraw queued (then it is running already, and its logits come
// with the next chainGreedy or argmax). A step whose graph argmaxed or
// drew (and so moved the token and position on) is that step only for a
// call that wants the same again. Any answer ends the chain.
func (b *Backend) chained(key any, tokens []int, pos int, w model.Want) bool {
	c := b.chain
	b.chain, b.running = nil, nil
	ok := c != nil && c.key == key && len(tokens) == 1 && tokens[0] == c.tok && pos == c.pos && b.err == nil
	switch {
	case !ok:
	case c.argmaxed:
		ok = w.Draw == nil
	case c.draw != nil:
		ok = w.Draw != nil && !w.Logits && sameDraw(c.draw, w.Draw)
	}
	if ok {
		b.running = c
	}
	return ok
}

// hostID allocates, once, the pinned host memory a chained step's id
// goes to (mapped: the argmax kernel writes it through idDev) and the
// event that marks it there (device thread).
func (d *Device) hostID() error {
	if d.idHost.Host() == nil {
		h, err := d.cu.AllocHostMapped(8) // two int32 ids, by position parity
		if err != nil {
			return err
		}
		d.idHost, d.idDev = h, h.Dev()
	}
	if d.idEv == nil {
		ev, err := d.cu.NewEvent()
		if err != nil {
			return err
		}
		d.idEv = ev
	}
	return nil
}

// markID records the event behind the work that writes the id (device
// thread).
func (d *Device) markID() error { return d.idEv.Record() }

// idFromHost waits for the id of the step at pos that the work before
// markID writes and returns it; work queued after it may still run
// (device thread).
func (d *Device) idFromHost(pos int) (int32, error) {
	if err := d.idEv.Synchronize(); err != nil {
		return 0, err
	}
	return (*[2]int32)(d.idHost.Host())[pos&1], nil
}

// sameDraw says whether two draws ask the same: options, index and
// recent tokens.
func sameDraw(a, b *model.Draw) bool {
	return a.Options == b.Options && a.Index == b.Index && slices.Equal(a.Recent, b.Recent)
}
