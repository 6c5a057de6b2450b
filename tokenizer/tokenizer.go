// Package tokenizer turns text into token ids and back for the models lowbit runs:
// SentencePiece models (tokenizer.model), HuggingFace tokenizer.json BPE in its
// SentencePiece-like and byte-level (GPT-2, Llama-3, Qwen2) flavours, the byte-level
// vocabularies shipped without tokenizer.json (Llama 3's tiktoken tokenizer.model,
// vocab.json + merges.txt), and chat templates.
//
// The encoders follow the reference libraries step by step (sentencepiece's bpe_model.cc
// and the Rust tokenizers crate) so ids match exactly; the tests compare against ids the
// Python packages produced (testdata/tokenizer/gen.py).
package tokenizer

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes text into ids and decodes ids into text.
type Tokenizer interface {
	// Encode tokenizes text; addBOS puts the model's BOS (or its post-processor's
	// special tokens) in front. The caller decides, usually from AddBOS.
	Encode(text string, addBOS bool) ([]int, error)
	// Decode turns ids into text, leaving out control/special tokens.
	Decode(ids []int) string
	// Piece is the vocabulary string of id, "" when out of range.
	Piece(id int) string
	// VocabSize is one more than the largest id.
	VocabSize() int
	// BOS is the begin-of-sequence id, -1 if none.
	BOS() int
	// EOS is the end-of-sequence id, -1 if none.
	EOS() int
	// EOSIDs lists every id that ends generation (eos, end-of-turn, generation_config's).
	EOSIDs() []int
}

// AddBOS reports whether the model's configuration asks for BOS in front of a prompt
// (tokenizer_config.json's add_bos_token, else the tokenizer's own convention).
func AddBOS(t Tokenizer) bool {
	if a, ok := t.(interface{ AddBOS() bool }); ok {
		return a.AddBOS()
	}
	return t.BOS() >= 0
}

// specials holds the ids Load may override from the model's config files.
type specials struct {
	bos, eos int
	eosIDs   []int
	addBOS   bool
}

// BOS is the begin-of-sequence id, -1 if none.
func (s *specials) BOS() int { return s.bos }

// EOS is the end-of-sequence id, -1 if none.
func (s *specials) EOS() int { return s.eos }

// EOSIDs lists the ids that end generation.
func (s *specials) EOSIDs() []int { return append([]int(nil), s.eosIDs...) }

// AddBOS reports whether prompts start with BOS for this model.
func (s *specials) AddBOS() bool { return s.addBOS }

func (s *specials) base() *specials { return s }

// streamer is what the tokenizers of this package implement so that Decode and the
// streaming Decoder share one path: each token appends its bytes, and the bytes are
// made valid UTF-8 at the end (or as soon as a character is complete).
type streamer interface {
	Tokenizer
	appendToken(dst []byte, id int, st *streamState) []byte
	// lossyPerByte: invalid bytes become one U+FFFD each (byte fallback); otherwise
	// each maximal invalid subpart becomes one U+FFFD (byte-level, as Rust's from_utf8_lossy).
	lossyPerByte() bool
}

// streamState is what decoding remembers between tokens.
type streamState struct {
	started bool // some text has been produced
	bosSeen bool // SentencePiece: the last piece gave up its leading ▁
	bosDone bool // SentencePiece: no more leading ▁ to drop
	tokens  int  // tokens passed to the decoder so far (skipped specials not counted)
	strip   int  // leading characters still to strip (HF Strip decoder)
}

func decodeAll(s streamer, ids []int) string {
	st := streamState{strip: -1}
	var buf []byte
	for _, id := range ids {
		buf = s.appendToken(buf, id, &st)
	}
	out, _ := validPrefix(nil, buf, s.lossyPerByte(), true)
	return string(out)
}

// validPrefix appends to dst the valid UTF-8 form of b, replacing invalid bytes with
// U+FFFD. Unless final, a trailing incomplete (but so far valid) character is returned
// as rest instead, to be completed by later bytes.
func validPrefix(dst, b []byte, perByte, final bool) (out, rest []byte) {
	if !final {
		if k := incompleteTail(b); k > 0 {
			b, rest = b[:len(b)-k], b[len(b)-k:]
		}
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != utf8.RuneError || n > 1 {
			dst = append(dst, b[:n]...)
			b = b[n:]
			continue
		}
		if !perByte {
			n = subpartLen(b)
		}
		dst = append(dst, "\uFFFD"...)
		b = b[n:]
	}
	return dst, rest
}

// seqLen is the length of the UTF-8 sequence that lead byte c starts, 0 if c cannot start one.
func seqLen(c byte) int {
	switch {
	case c < 0x80:
		return 1
	case c >= 0xC2 && c <= 0xDF:
		return 2
	case c >= 0xE0 && c <= 0xEF:
		return 3
	case c >= 0xF0 && c <= 0xF4:
		return 4
	}
	return 0
}

// subpartLen is the length of the maximal subpart of an ill-formed sequence at b[0]
// (Unicode's "substitution of maximal subparts", what from_utf8_lossy replaces as one).
func subpartLen(b []byte) int {
	need := seqLen(b[0]) - 1
	if need <= 0 {
		return 1
	}
	lo, hi := byte(0x80), byte(0xBF)
	switch b[0] {
	case 0xE0:
		lo = 0xA0
	case 0xED:
		hi = 0x9F
	case 0xF0:
		lo = 0x90
	case 0xF4:
		hi = 0x8F
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// incompleteTail is how many trailing bytes of b start a valid character that is not complete yet.
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c >= 0x80 && c < 0xC0 { // continuation byte: look further back
			continue
		}
		if l := seqLen(c); l > k && subpartLen(b[len(b)-k:]) == k {
			return k
		}
		return 0
	}
	return 0
}

// Decoder turns ids into text one token at a time, for printing while generating.
// The pieces it returns concatenate to exactly Decode of the whole sequence: bytes of a
// character split across tokens are held back until the character is complete.
type Decoder struct {
	s       streamer
	st      streamState
	pending []byte
	// fallback for tokenizers from outside this package: re-decode and diff.
	t    Tokenizer
	ids  []int
	done string
}

// NewDecoder starts a streaming decode with t.
func NewDecoder(t Tokenizer) *Decoder {
	if s, ok := t.(streamer); ok {
		return &Decoder{s: s, st: streamState{strip: -1}}
	}
	return &Decoder{t: t}
}

// Next adds one token and returns the text that is now complete ("" if none yet).
func (d *Decoder) Next(id int) string {
	if d.s == nil {
		d.ids = append(d.ids, id)
		full := d.t.Decode(d.ids)
		// Hold back a trailing replacement character: it may be an incomplete character.
		for len(full) > len(d.done) && strings.HasSuffix(full, "\uFFFD") {
			full = full[:len(full)-3]
		}
		if len(full) <= len(d.done) || full[:len(d.done)] != d.done {
			return ""
		}
		out := full[len(d.done):]
		d.done = full
		return out
	}
	d.pending = d.s.appendToken(d.pending, id, &d.st)
	out, rest := validPrefix(nil, d.pending, d.s.lossyPerByte(), false)
	d.pending = append(d.pending[:0], rest...)
	return string(out)
}

// Peek is the text Next(id) would return, without adding id: the text of
// an alternative to the token that comes next.
func (d *Decoder) Peek(id int) string {
	c := Decoder{s: d.s, st: d.st, pending: slices.Clone(d.pending), t: d.t, ids: slices.Clone(d.ids), done: d.done}
	return c.Next(id)
}

// Flush returns whatever is still held back (an incomplete character becomes U+FFFD),
// as Decode of the whole sequence would end.
func (d *Decoder) Flush() string {
	if d.s == nil {
		full := d.t.Decode(d.ids)
		if len(full) < len(d.done) || full[:len(d.done)] != d.done {
			return ""
		}
		out := full[len(d.done):]
		d.done = full
		return out
	}
	out, _ := validPrefix(nil, d.pending, d.s.lossyPerByte(), true)
	d.pending = d.pending[:0]
	return string(out)
}
