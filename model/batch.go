package model

import (
	"context"
	"fmt"
)

// BatchSeq is one sequence's part of a StepBatch: tokens fed at positions
// Pos, Pos+1, ... of the sequence in cache slot Slot.
type BatchSeq struct {
	Slot, Pos int
	Tokens    []int
	// Logits asks for the logits of the last token (a decode step, or the
	// last chunk of a prompt); a chunk before a prompt's last needs none.
	Logits bool
}

// StepBatch runs one forward step over several sequences, each in its own
// cache slot at its own position: decode tokens and chunks of prompts
// together, as a server steps its requests. The result has one row for
// each sequence that asked for Logits, in the order given, with what want
// asks of them; RowLogits reads a row back later when want asked for
// candidates or logits.
//
// Each sequence's logits are those it would have alone, stepped with the
// same tokens: on the CPU bit for bit. The head (the largest product of a
// step on most models) runs once per run of consecutive sequences with
// Logits, so a step is fastest when those come last, single tokens last
// of all: decode rows and the last chunk before them are then one
// product.
func (s *Session) StepBatch(ctx context.Context, seqs []BatchSeq, want Want) (*StepResult, error) {
	if len(seqs) == 0 {
		return nil, fmt.Errorf("model: a batch step of no sequences")
	}
	vocab := s.cfg.VocabSize
	st := &Step{Seqs: make([]Seq, len(seqs)), Cache: s.cache}
	var heads []span
	n, decode := 0, true
	for i, q := range seqs {
		if len(q.Tokens) == 0 {
			return nil, fmt.Errorf("model: batch sequence %d (slot %d) has no tokens", i, q.Slot)
		}
		if q.Slot < 0 || q.Slot >= s.slots || q.Pos < 0 || q.Pos+len(q.Tokens) > s.ctx {
			return nil, fmt.Errorf("model: batch sequence %d: %d tokens at position %d of slot %d exceed the cache's %d slots of %d positions",
				i, len(q.Tokens), q.Pos, q.Slot, s.slots, s.ctx)
		}
		for _, t := range q.Tokens {
			if t < 0 || t >= vocab {
				return nil, fmt.Errorf("model: batch sequence %d: token id %d is outside the vocabulary of %d", i, t, vocab)
			}
		}
		st.Seqs[i] = Seq{Tokens: q.Tokens, Pos: q.Pos, Slot: q.Slot}
		n += len(q.Tokens)
		decode = decode && len(q.Tokens) == 1 && q.Logits
		if q.Logits {
			last := n - 1
			if k := len(heads) - 1; k >= 0 && heads[k].from+heads[k].rows == last {
				heads[k].rows++
			} else {
				heads = append(heads, span{from: last, rows: 1})
			}
		}
	}
	if n > s.batch {
		return nil, fmt.Errorf("model: a batch step of %d tokens exceeds the session's batch of %d", n, s.batch)
	}
	rows := 0
	for _, h := range heads {
		rows += h.rows
	}
	if rows > 0 {
		st.Logits, st.Vocab, st.Want = s.logits.Slice(0, rows*vocab), vocab, want
	}
	// A step of single decode tokens queues the same operations for the
	// same number of sequences, whatever their slots and positions.
	if decode {
		st.Key = batchKey{s}
	}
	s.kept = 0
	res, err := s.be.Step(ctx, st, func() error { return s.forward(ctx, n, heads, nil) })
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", s.be.Name(), err)
	}
	if want.TopK > 0 || want.Logits {
		s.kept = rows
	}
	return res, nil
}

// batchKey names a session's batch steps of decode tokens.
type batchKey struct{ s *Session }
