package gpu

// Sampled decode steps drawn on the device (model.Want.Draw).
//
// A draw is three launches after the step's logits: the repetition
// penalty on a copy of them (penalize), the candidates (topk) and the
// pick (draw), each computing what the host's sampler computes from the
// same values, so the token is the one it would draw. Draw i's uniform is
// a function of the seed and i, so the device needs no generator state
// but a counter. Chained as greedy steps are (chain.go): the step is
// captured once more with the draw after it, which writes the id as the
// next step's token, advances the position, the draw counter and the ring
// of recent tokens, and the next step's graph is queued before the id
// comes back. A draw the candidates do not settle comes back as -1: the
// step is run again so that its logits are there for the host to sample
// from.

import (
	"encoding/binary"
	"fmt"
	"slices"

	"lowbit/model"
)

// maxDrawRecent is the longest window of recent tokens the device's
// repetition penalty takes (a longer one is drawn on the host).
const maxDrawRecent = 8192

// drawState is the device memory of drawing: the topk results, the
// draw's id, the penalized copy of the logits, and the chained draws'
// counter, ring count and ring of recent tokens.
type drawState struct {
	cands   Buffer // topk's output for k candidates (topK's layout)
	k       int
	id      Buffer // draw's out[0]
	plog    Buffer // the logits with the penalty applied
	state   Buffer // counter (uint64), count (int32), pad, ring [w]int32
	w       int
	counter Buffer
	count   Buffer
	ring    Buffer
}

// drawPlan is how a Draw runs on the device: its candidates (k, partial:
// the candidates are the head of the vocabulary) and the ring's window.
type drawPlan struct {
	k       int
	partial bool
	w       int
	penalty bool
}

// planDraw decides how d runs over a vocabulary of n, or reports why the
// device does not take it (the host then draws from all logits).
func planDraw(d *model.Draw, n int) (drawPlan, bool) {
	o := d.Options
	if !(o.Temperature > 0) {
		return drawPlan{}, false
	}
	p := drawPlan{k: min(model.DrawCandidates, n), partial: n > model.DrawCandidates}
	if o.TopK > 0 {
		p.k, p.partial = min(o.TopK, n), false
	}
	if p.k > topKPool {
		return drawPlan{}, false
	}
	if o.RepeatPenalty > 0 && o.RepeatPenalty != 1 {
		p.penalty = true
		p.w = o.RepeatLastN
		if p.w <= 0 || p.w > maxDrawRecent || len(d.Recent) > p.w {
			return drawPlan{}, false
		}
	} else {
		p.w = 1
	}
	return p, true
}

// drawBuffers makes sure the draw's buffers fit plan p over n logits
// (device thread).
func (b *Backend) drawBuffers(p drawPlan, n int) error {
	ds := &b.draws
	grow := func(buf *Buffer, size int64) error {
		if buf.Size() >= size {
			return nil
		}
		if buf.Size() > 0 {
			b.retired = append(b.retired, *buf) // a recorded graph may read it
		}
		var err error
		*buf, err = b.d.alloc(size, MemScratch)
		return err
	}
	if err := grow(&ds.cands, int64(8*p.k+16)); err != nil {
		return err
	}
	ds.k = p.k
	if err := grow(&ds.id, 4); err != nil {
		return err
	}
	if p.penalty {
		if err := grow(&ds.plog, int64(4*n)); err != nil {
			return err
		}
	}
	if ds.state.Size() < int64(16+4*p.w) {
		if err := grow(&ds.state, int64(16+4*p.w)); err != nil {
			return err
		}
	}
	ds.w = p.w
	ds.counter, ds.count, ds.ring = ds.state.Slice(0, 8), ds.state.Slice(8, 4), ds.state.Slice(16, int64(4*p.w))
	return nil
}

// setDraw queues the upload of d's draw index and recent tokens into the
// device's draw state, starting a chain of draws (device thread).
func (b *Backend) setDraw(d *model.Draw) error {
	raw := make([]byte, 16+4*len(d.Recent))
	binary.LittleEndian.PutUint64(raw, d.Index)
	binary.LittleEndian.PutUint32(raw[8:], uint32(len(d.Recent)))
	for i, id := range d.Recent {
		binary.LittleEndian.PutUint32(raw[16+4*i:], uint32(int32(id)))
	}
	return b.d.htod(b.draws.state, 0, raw)
}

// launchDraw queues the penalty, the candidates and the pick over logits
// src[0..n); with chain, the pick chains the next step (tok, pos, the
// mapped host id) (device thread).
func (b *Backend) launchDraw(src Buffer, n int, d *model.Draw, p drawPlan, chain bool) error {
	ds, o := &b.draws, d.Options
	x := src
	if p.penalty {
		x = ds.plog.Slice(0, int64(4*n))
		if err := b.d.copyDtoD(x, src, int64(4*n)); err != nil {
			return err
		}
		if err := b.d.launchPDL("penalize", grid1(1), grid1(256), 4*p.w, argBuf(x), argInt(n), argBuf(ds.ring),
			argBuf(ds.count), argInt(p.w), argF32(o.RepeatPenalty)); err != nil {
			return err
		}
	}
	// (the softmax's denominator only where the candidates are a head of
	// the vocabulary)
	if err := b.d.topK(x, n, p.k, o.Temperature, ds.cands, p.partial); err != nil {
		return err
	}
	partial := 0
	if p.partial {
		partial = 1
	}
	var tok, pos, host Buffer
	if chain {
		tok, pos, host = b.tok, b.pos, b.d.idDev
	}
	c := ds.cands.Ptr()
	return b.d.launchPDL("draw", grid1(1), grid1(32), 4*p.k, c, c+uint64(4*p.k), c+uint64(8*p.k), c+uint64(8*p.k+8),
		argInt(p.k), argInt(partial), argF32(o.Temperature), argF32(o.TopP), argF32(o.MinP), d.Options.Seed,
		argBuf(ds.counter), argBuf(ds.id), argBuf(tok), argBuf(pos), argBuf(host), argBuf(ds.ring), argBuf(ds.count), argInt(p.w))
}

// drawOnce draws from logits src[0..n) without chaining: -1 where the
// device could not settle the draw.
func (b *Backend) drawOnce(src Buffer, n int, d *model.Draw, p drawPlan) (int, error) {
	var id [1]int32
	err := b.run(func() error {
		if err := b.drawBuffers(p, n); err != nil {
			return err
		}
		if err := b.setDraw(d); err != nil {
			return err
		}
		if err := b.launchDraw(src, n, d, p, false); err != nil {
			return err
		}
		return b.d.dtoh(bytesOf(id[:]), b.draws.id, 0)
	})
	return int(id[0]), err
}

// chainDraw draws from src[0..n), the logits of key's decode step just
// queued; when the step is a captured graph, the same step is queued once
// more on the drawn id at the next position before the id comes back
// (chainGreedy's way). -1: not settled on the device.
func (b *Backend) chainDraw(key any, seq model.Seq, src Buffer, n int, d *model.Draw, p drawPlan) (int, error) {
	s := b.steps[key]
	run := b.running
	b.running = nil
	if s == nil || s.g == nil || b.n != 1 || b.noChain {
		return b.drawOnce(src, n, d, p)
	}
	if b.err != nil {
		return 0, b.err
	}
	if s.drawChain == nil || s.drawSrc != src || s.drawN != n || s.drawPlan != p || s.drawOpts != d.Options {
		if err := b.captureDraw(s, src, n, d, p); err != nil {
			return 0, err
		}
	}
	// The step running now, when it was the chained graph with the same
	// draw, has drawn already (chained checked its index and recent
	// tokens); else the draw starts here from d.
	drawn := run != nil && run.key == key && run.draw != nil && run.plan == p
	var tail func() error
	if !drawn {
		tail = func() error {
			if err := b.setDraw(d); err != nil {
				return err
			}
			return b.launchDraw(src, n, d, p, true)
		}
	}
	id, err := b.queueNext(tail, s.drawChain)
	if err != nil {
		return 0, err
	}
	if id < 0 {
		// The queued step ran on no token: run this one again, for its
		// logits, and leave the draw to the host.
		if err := b.rerun(key, seq); err != nil {
			return 0, err
		}
		return -1, nil
	}
	next := *d
	next.Index++
	if p.penalty {
		next.Recent = append(slices.Clone(d.Recent), int(id))
		next.Recent = next.Recent[max(0, len(next.Recent)-p.w):]
	}
	b.first++
	b.chain = &chainedStep{key: key, tok: int(id), pos: b.first, draw: &next, plan: p}
	return int(id), nil
}

// rerun runs key's captured step again on seq (its logits were
// overwritten by the step queued after it).
func (b *Backend) rerun(key any, seq model.Seq) error {
	s := b.steps[key]
	b.setStep(seq)
	b.op("graph", func() error { return b.d.launchGraph(s.g) })
	return b.run(nil)
}

// captureDraw records key's step followed by the draw of its logits at
// src (chained) into s.drawChain: the step's pass runs again inside the
// capture.
func (b *Backend) captureDraw(s *stepGraph, src Buffer, n int, d *model.Draw, p drawPlan) error {
	if s.pass == nil || b.noGraphs {
		return fmt.Errorf("gpu: draw: no step to capture")
	}
	if old := s.drawChain; old != nil { // another draw's: the options changed
		s.drawChain = nil
		if err := b.run(func() error { old.Destroy(); return nil }); err != nil {
			return err
		}
	}
	pre := func() error {
		if err := b.d.hostID(); err != nil {
			return err
		}
		return b.drawBuffers(p, n)
	}
	tail := func() error { return b.launchDraw(src, n, d, p, true) }
	g, err := b.captureStep(pre, s.pass, tail)
	if err != nil {
		return err
	}
	s.drawChain, s.drawSrc, s.drawN, s.drawPlan, s.drawOpts = g, src, n, p, d.Options
	return nil
}
