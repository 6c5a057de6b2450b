// Package sched generates for many requests at once on one model session
// (continuous batching, as llama-server's slots and vLLM's scheduler do):
// a decode step reads every weight once whether it produces one token or
// one for each running sequence, so stepping them together multiplies a
// server's throughput.
//
// The scheduler owns the session's cache slots. A request waits in a
// first-in, first-out queue for a free slot; once admitted its prompt is
// prefilled in chunks, placed in the same steps as the decode tokens of
// the sequences already running, so a long prompt never stalls their
// streams; a finished or cancelled sequence leaves its slot at the next
// step, and the next request in the queue takes it. Each sequence samples
// with its own settings from its own logits, and produces the tokens it
// would produce alone on the same session (the same chunks of its prompt,
// the same draws of its seed). A slot keeps the tokens its cache holds, so
// a request whose prompt begins with them (a conversation's next turn)
// prefills only the rest.
package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"lowbit/model"
)

// Options tune a Scheduler; zero fields take the defaults.
type Options struct {
	// Chunk is the most prompt tokens a step prefills (0: DefaultChunk, or
	// less to fit the session's batch beside a decode token per slot; the
	// whole batch on a session of one slot, where no stream waits for a
	// prompt). A prompt is prefilled in chunks of this size, as a session
	// of this batch prefills it alone.
	Chunk int
	// Queue is the most requests that wait for a slot; one more is
	// refused with ErrQueueFull. Default DefaultQueue.
	Queue int
	// SeparatePrefill puts the chunks of prompts and the decode tokens in
	// separate steps, for a backend that serves the two better apart; by
	// default they share each step.
	SeparatePrefill bool
	// Lock, when set, is held around each step: schedulers of several
	// models that share one backend (which runs one step at a time).
	Lock sync.Locker
	// OnStep, when set, is told about each step after it ran (for metrics
	// and tests); it runs on the scheduler's goroutine and must not block.
	OnStep func(StepInfo)
}

// Defaults of Options.
const (
	DefaultChunk = 256
	DefaultQueue = 64
)

// StepInfo describes one step.
type StepInfo struct {
	// Decode is the number of sequences that fed one decode token.
	Decode int
	// Chunks and Prefill are the prompt chunks and their tokens.
	Chunks, Prefill int
	// Duration is the step's time, sampling included.
	Duration time.Duration
}

// ErrQueueFull refuses a request when Options.Queue requests already wait.
var ErrQueueFull = errors.New("sched: the queue is full")

// Scheduler runs generations on one session's slots. It is safe for
// concurrent use; its steps run on a goroutine of its own, started while
// there is work.
type Scheduler struct {
	s     *model.Session
	opts  Options
	vocab int

	mu      sync.Mutex
	waiting []*seq // in order of arrival
	active  []*seq // admitted, in order of admission
	slots   []slot
	running bool // the step loop's goroutine is running
	clock   int64
}

// slot is what a cache slot holds.
type slot struct {
	busy bool
	// fed are the tokens in the slot's cache, in order.
	fed []int
	// used orders the slots by their last release (least recent first).
	used int64
}

// New schedules on s, whose slots it owns from now on (nothing else may
// step the session).
func New(s *model.Session, opts Options) (*Scheduler, error) {
	if opts.Queue < 0 || opts.Chunk < 0 {
		return nil, fmt.Errorf("sched: queue %d and chunk %d: want 0 (the default) or more", opts.Queue, opts.Chunk)
	}
	if opts.Queue == 0 {
		opts.Queue = DefaultQueue
	}
	// A step holds a decode token of every slot but the prefilling one,
	// and a chunk.
	room := s.Batch() - (s.Slots() - 1)
	if opts.SeparatePrefill {
		room = s.Batch()
	}
	if opts.Chunk == 0 {
		opts.Chunk = min(DefaultChunk, room)
		if s.Slots() == 1 {
			opts.Chunk = room
		}
	}
	if opts.Chunk < 1 || opts.Chunk > room || s.Slots() > s.Batch() {
		return nil, fmt.Errorf("sched: a session of %d slots and steps of %d tokens has no room for chunks of %d prompt tokens beside a decode token per slot", s.Slots(), s.Batch(), opts.Chunk)
	}
	return &Scheduler{s: s, opts: opts, vocab: s.Model().Config.VocabSize, slots: make([]slot, s.Slots())}, nil
}

// Session is the scheduler's session.
func (sc *Scheduler) Session() *model.Session { return sc.s }

// Options are the scheduler's settings, defaults filled in.
func (sc *Scheduler) Options() Options { return sc.opts }

// Load is how many requests hold a slot and how many wait for one.
func (sc *Scheduler) Load() (running, waiting int) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.active), len(sc.waiting)
}

// seq is one request, from its arrival until it leaves its slot. The
// fields below mu's are the step loop's alone.
type seq struct {
	prompt  []int
	opts    model.GenerateOptions
	sampler *model.Sampler
	out     *outbox
	// cancelled is set (under the scheduler's mu) when the request's
	// caller gives up; the loop lets the sequence go at the next step.
	cancelled bool

	slot      int
	pos       int   // tokens in the slot's cache
	next      int   // the token to feed next, once decoding
	decoding  bool  // the prompt is in the cache
	history   []int // prompt and generated tokens, for the repetition penalty
	generated int
	finished  bool
}

// outbox carries a sequence's tokens from the step loop to the caller.
type outbox struct {
	mu       sync.Mutex
	events   []event
	admitted time.Time
	done     bool
	stop     string
	err      error
	doneAt   time.Time
	prompted int // prompt tokens prefilled (after the slot's prefix)
	// ready is signalled when events or the end arrive.
	ready chan struct{}
	// freed is closed once the sequence has left the queue or its slot.
	freed chan struct{}
}

// event is one generated token.
type event struct {
	id int
	lp *model.TokenLogprobs
	at time.Time
}

func (o *outbox) signal() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// Generate submits prompt and waits for its generation, which follows
// model.Generate's rules (opts' MaxTokens, Sampler, StopIDs, OnToken,
// OnLogprobs and TopLogprobs mean what they mean there; the callbacks run
// on the caller's goroutine, never holding up other sequences). The whole
// prompt is given: the part of it the chosen slot's cache holds already is
// not prefilled again (Stats.PromptTokens counts the rest). When ctx ends
// the request leaves the queue, or its slot at the next step, and Generate
// returns ctx's error; a full queue is ErrQueueFull.
func (sc *Scheduler) Generate(ctx context.Context, prompt []int, opts model.GenerateOptions) (model.GenerateStats, error) {
	st := model.GenerateStats{PromptTokens: len(prompt)}
	if len(prompt) == 0 {
		return st, fmt.Errorf("sched: the prompt is empty")
	}
	if len(prompt) > sc.s.Context() {
		return st, fmt.Errorf("sched: prompt of %d tokens exceeds the context of %d", len(prompt), sc.s.Context())
	}
	for _, t := range prompt {
		if t < 0 || t >= sc.vocab {
			return st, fmt.Errorf("sched: token id %d is outside the vocabulary of %d", t, sc.vocab)
		}
	}
	if opts.MaxTokens < 0 {
		return st, fmt.Errorf("sched: max tokens %d: want 0 (no limit) or more", opts.MaxTokens)
	}
	sampler := opts.Sampler
	if sampler == nil {
		sampler = model.Greedy()
	}
	q := &seq{prompt: slices.Clone(prompt), opts: opts, sampler: sampler, history: slices.Clone(prompt),
		out: &outbox{ready: make(chan struct{}, 1), freed: make(chan struct{})}}
	start := time.Now()
	if err := sc.submit(q); err != nil {
		return st, err
	}
	// Deliver the tokens as they come, until the end, the caller's stop
	// or ctx's.
	var first, last time.Time
	for {
		select {
		case <-q.out.ready:
		case <-ctx.Done():
			sc.cancel(q)
			st = sc.stats(q, st, start, first, last)
			return st, ctx.Err()
		}
		q.out.mu.Lock()
		events := q.out.events
		q.out.events = nil
		done, stop, err := q.out.done, q.out.stop, q.out.err
		q.out.mu.Unlock()
		for _, e := range events {
			if first.IsZero() {
				first = e.at
			} else {
				st.MaxGap = max(st.MaxGap, e.at.Sub(last))
			}
			last = e.at
			st.GeneratedTokens++
			st.Tokens = append(st.Tokens, e.id)
			if opts.OnLogprobs != nil && e.lp != nil {
				opts.OnLogprobs(*e.lp)
			}
			if opts.OnToken != nil && !opts.OnToken(e.id) {
				sc.cancel(q)
				st = sc.stats(q, st, start, first, last)
				st.Stop = model.StopCallback
				return st, nil
			}
		}
		if done { // the loop adds no event after the end
			<-q.out.freed
			st = sc.stats(q, st, start, first, last)
			st.Stop = stop
			return st, err
		}
	}
}

// stats fills in st's timings once the sequence ends: the wait for a
// slot, the prefill up to the first token, the decoding after it.
func (sc *Scheduler) stats(q *seq, st model.GenerateStats, start, first, last time.Time) model.GenerateStats {
	q.out.mu.Lock()
	defer q.out.mu.Unlock()
	st.PromptTokens = q.out.prompted
	if q.out.admitted.IsZero() {
		st.Queued = time.Since(start)
		return st
	}
	st.Queued = q.out.admitted.Sub(start)
	switch {
	case !first.IsZero():
		st.PromptDuration = first.Sub(q.out.admitted)
		end := last
		if q.out.done && q.out.doneAt.After(end) {
			end = q.out.doneAt
		}
		st.GenDuration = end.Sub(first)
	case q.out.done:
		st.PromptDuration = q.out.doneAt.Sub(q.out.admitted) // ended at its first token
	}
	return st
}

// submit queues q and starts the step loop when it is not running.
func (sc *Scheduler) submit(q *seq) error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	// Requests admitted at the next step count as waiting until then.
	if len(sc.waiting)+len(sc.active) >= sc.opts.Queue+len(sc.slots) {
		return fmt.Errorf("%w: %d requests are waiting already", ErrQueueFull, sc.opts.Queue)
	}
	sc.waiting = append(sc.waiting, q)
	if !sc.running {
		sc.running = true
		go sc.loop()
	}
	return nil
}

// cancel takes q out of the queue, or asks the loop to let it go, and
// waits until it is gone.
func (sc *Scheduler) cancel(q *seq) {
	sc.mu.Lock()
	if i := slices.Index(sc.waiting, q); i >= 0 {
		sc.waiting = slices.Delete(sc.waiting, i, i+1)
		close(q.out.freed)
	} else {
		q.cancelled = true
	}
	sc.mu.Unlock()
	<-q.out.freed
}

// loop steps the active sequences until none is left.
func (sc *Scheduler) loop() {
	for {
		sc.mu.Lock()
		sc.release()
		sc.admit()
		if len(sc.active) == 0 {
			sc.running = false
			sc.mu.Unlock()
			return
		}
		p := sc.plan()
		sc.mu.Unlock()
		sc.run(p)
	}
}

// release lets the finished and cancelled sequences go, freeing their
// slots (the caller holds mu).
func (sc *Scheduler) release() {
	sc.active = slices.DeleteFunc(sc.active, func(q *seq) bool {
		if !q.finished && !q.cancelled {
			return false
		}
		sc.clock++
		sc.slots[q.slot].busy, sc.slots[q.slot].used = false, sc.clock
		close(q.out.freed)
		return true
	})
}

// admit gives free slots to the waiting requests, first come first
// served (the caller holds mu). Of the free slots a request takes the one
// whose cache holds the longest prefix of its prompt, else the one left
// longest ago, so that recent conversations keep theirs.
func (sc *Scheduler) admit() {
	for len(sc.waiting) > 0 {
		q := sc.waiting[0]
		best, keep := -1, 0
		for i, sl := range sc.slots {
			if sl.busy {
				continue
			}
			n := commonPrefix(sl.fed, q.prompt)
			if best < 0 || n > keep || n == keep && sl.used < sc.slots[best].used {
				best, keep = i, n
			}
		}
		if best < 0 {
			return
		}
		sc.waiting = sc.waiting[1:]
		keep = min(keep, len(q.prompt)-1) // at least one token runs, for the logits
		sl := &sc.slots[best]
		sl.busy, sl.fed = true, sl.fed[:keep]
		q.slot, q.pos = best, keep
		q.out.mu.Lock()
		q.out.admitted, q.out.prompted = time.Now(), len(q.prompt)-keep
		q.out.mu.Unlock()
		sc.active = append(sc.active, q)
	}
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// plan is what one round of steps feeds: the chunks of prompts, those
// that end a prompt last, then the decode tokens.
type plan struct {
	chunks []part
	decode []part
}

// part is one sequence's tokens in a step.
type part struct {
	q      *seq
	tokens []int
	logits bool // the last chunk of a prompt, or a decode token
}

// plan chooses the next round (the caller holds mu): every decoding
// sequence's token, and chunks of the prompts being prefilled, oldest
// first, as many as fit in one chunk's worth of tokens (at least one).
// A prompt's chunks are whole (Options.Chunk tokens, its last the rest)
// whatever else the step holds, so it is cut as it would be alone.
func (sc *Scheduler) plan() plan {
	var p plan
	var ending []part
	used, full := 0, false
	for _, q := range sc.active {
		if q.decoding {
			p.decode = append(p.decode, part{q: q, tokens: []int{q.next}, logits: true})
			continue
		}
		n := min(len(q.prompt)-q.pos, sc.opts.Chunk)
		if full || used > 0 && used+n > sc.opts.Chunk {
			full = true // no later prompt overtakes this one
			continue
		}
		used += n
		c := part{q: q, tokens: q.prompt[q.pos : q.pos+n], logits: q.pos+n == len(q.prompt)}
		if c.logits {
			ending = append(ending, c)
		} else {
			p.chunks = append(p.chunks, c)
		}
	}
	p.chunks = append(p.chunks, ending...)
	return p
}

// run runs a round's steps and hands each sequence its token.
func (sc *Scheduler) run(p plan) {
	if sc.opts.SeparatePrefill {
		for _, parts := range [][]part{p.decode, p.chunks} {
			if len(parts) > 0 {
				sc.step(parts)
			}
		}
		return
	}
	sc.step(append(p.chunks, p.decode...))
}

// step runs one step over parts, samples each row and hands out the
// tokens; a failure ends every sequence of the step with it.
func (sc *Scheduler) step(parts []part) {
	start := time.Now()
	info := StepInfo{}
	seqs := make([]model.BatchSeq, len(parts))
	var rows []*seq
	for i, pt := range parts {
		seqs[i] = model.BatchSeq{Slot: pt.q.slot, Pos: pt.q.pos, Tokens: pt.tokens, Logits: pt.logits}
		if pt.logits {
			rows = append(rows, pt.q)
		}
		if pt.q.decoding {
			info.Decode++
		} else {
			info.Chunks++
			info.Prefill += len(pt.tokens)
		}
	}
	want, kinds := wantOf(rows)
	if sc.opts.Lock != nil {
		sc.opts.Lock.Lock()
	}
	err := sc.stepLocked(seqs, rows, want, kinds, parts)
	if sc.opts.Lock != nil {
		sc.opts.Lock.Unlock()
	}
	if err != nil {
		for _, pt := range parts {
			sc.finish(pt.q, "", err)
			// What the failed step left in the cache is unknown.
			sc.mu.Lock()
			sc.slots[pt.q.slot].fed = nil
			sc.mu.Unlock()
		}
	}
	info.Duration = time.Since(start)
	if sc.opts.OnStep != nil {
		sc.opts.OnStep(info)
	}
}

// stepLocked runs the step on the backend and picks each row's token.
func (sc *Scheduler) stepLocked(seqs []model.BatchSeq, rows []*seq, want model.Want, kinds []rowKind, parts []part) error {
	res, err := sc.s.StepBatch(context.Background(), seqs, want)
	if err != nil {
		return err
	}
	// The tokens are in the cache now.
	sc.mu.Lock()
	for _, pt := range parts {
		sl := &sc.slots[pt.q.slot]
		sl.fed = append(sl.fed, pt.tokens...)
	}
	sc.mu.Unlock()
	for _, pt := range parts {
		pt.q.pos += len(pt.tokens)
	}
	ids := make([]int, len(rows))
	lps := make([]*model.TokenLogprobs, len(rows))
	for r, q := range rows {
		if ids[r], lps[r], err = sc.pick(r, q, kinds[r], want, res); err != nil {
			return err
		}
	}
	for r, q := range rows {
		sc.take(q, ids[r], lps[r])
	}
	return nil
}

// rowKind is how a row's token is picked.
type rowKind int

const (
	// byArgmax: the backend's greedy id.
	byArgmax rowKind = iota
	// byCandidates: the most likely tokens, at the step's temperature or
	// found on the host at the sequence's own.
	byCandidates
	// byLogits: the whole row (a repetition penalty, or logprobs).
	byLogits
)

// wantOf is what a step asks of its rows' logits: only the greedy ids
// when every row is greedy (on a GPU the logits then stay on the device),
// else candidates at the first sampled row's temperature, else all the
// logits; and how each row is picked.
func wantOf(rows []*seq) (model.Want, []rowKind) {
	kinds := make([]rowKind, len(rows))
	var w model.Want
	var temp float32
	cands, full := false, false
	for i, q := range rows {
		switch {
		case q.opts.OnLogprobs != nil || !q.sampler.ArgmaxOnly() && !q.sampler.CandidateSampling():
			kinds[i], full = byLogits, true
		case q.sampler.ArgmaxOnly():
			kinds[i], w.Greedy = byArgmax, true
		default:
			kinds[i] = byCandidates
			if !cands {
				cands, temp = true, q.sampler.Options().Temperature
			}
		}
	}
	switch {
	case cands:
		w.TopK, w.Temp = model.DrawCandidates, temp
	case full:
		w.Logits = true
	}
	return w, kinds
}

// pick chooses row r's token as model.Generate does for its sequence
// alone.
func (sc *Scheduler) pick(r int, q *seq, kind rowKind, want model.Want, res *model.StepResult) (int, *model.TokenLogprobs, error) {
	row := func() ([]float32, error) {
		if want.Logits {
			return res.Logits[r*sc.vocab : (r+1)*sc.vocab], nil
		}
		return sc.s.RowLogits(r)
	}
	switch kind {
	case byArgmax:
		return res.Next[r], nil, nil
	case byCandidates:
		c := res.Cands[r]
		temp := q.sampler.Options().Temperature
		if temp != want.Temp {
			logits, err := row()
			if err != nil {
				return 0, nil, err
			}
			c = model.TopCandidates(logits, model.DrawCandidates, temp)
		}
		if c.Exact {
			if id, ok := q.sampler.PickCandidates(c.IDs, c.Logits, c.SumExp); ok {
				return id, nil, nil
			}
		}
		logits, err := row()
		if err != nil {
			return 0, nil, err
		}
		return q.sampler.Sample(logits, q.history), nil, nil
	}
	logits, err := row()
	if err != nil {
		return 0, nil, err
	}
	id := q.sampler.Sample(logits, q.history)
	if q.opts.OnLogprobs == nil {
		return id, nil, nil
	}
	lp := model.LogprobsOf(logits, id, q.opts.TopLogprobs)
	return id, &lp, nil
}

// take hands q its next token, or ends it, by model.Generate's rules.
func (sc *Scheduler) take(q *seq, id int, lp *model.TokenLogprobs) {
	if slices.Contains(q.opts.StopIDs, id) {
		sc.finish(q, model.StopEOS, nil)
		return
	}
	q.generated++
	q.history = append(q.history, id)
	q.out.mu.Lock()
	q.out.events = append(q.out.events, event{id: id, lp: lp, at: time.Now()})
	q.out.mu.Unlock()
	q.out.signal()
	switch {
	case q.pos >= sc.s.Context():
		sc.finish(q, model.StopContext, nil)
	case q.opts.MaxTokens > 0 && q.generated >= q.opts.MaxTokens:
		sc.finish(q, model.StopMaxTokens, nil)
	default:
		q.decoding, q.next = true, id
	}
}

// finish ends q with a reason or an error; the loop frees its slot
// before the next step.
func (sc *Scheduler) finish(q *seq, stop string, err error) {
	if q.finished {
		return
	}
	q.finished = true
	q.out.mu.Lock()
	q.out.done, q.out.stop, q.out.err, q.out.doneAt = true, stop, err, time.Now()
	q.out.mu.Unlock()
	q.out.signal()
}
