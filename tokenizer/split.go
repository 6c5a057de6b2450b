package tokenizer

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer patterns of GPT-2, Llama-3 and Qwen2 (Llama-3's with single digits).
// Go's regexp has no lookahead, so these have hand-written matchers that follow the
// patterns alternative by alternative.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// matcher finds the next match of a split pattern in s at or after start: [begin, end),
// or begin < 0 when there is none.
type matcher interface {
	find(s string, start int) (begin, end int)
}

// newMatcher picks the hand-written matcher for the known patterns, else Go's regexp
// (which has the same leftmost-first semantics for patterns without lookaround).
func newMatcher(pattern string, isRegex bool) (matcher, error) {
	if !isRegex {
		if pattern == "" {
			return nil, errEmptyPattern
		}
		return literalMatcher(pattern), nil
	}
	switch pattern {
	case gpt2Pattern:
		return wordMatcher{}, nil
	case llama3Pattern:
		return wordMatcher{llama3: true, digits: 3}, nil
	case qwen2Pattern:
		return wordMatcher{llama3: true, digits: 1}, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return regexMatcher{re}, nil
}

type literalMatcher string

func (m literalMatcher) find(s string, start int) (int, int) {
	i := strings.Index(s[start:], string(m))
	if i < 0 {
		return -1, -1
	}
	return start + i, start + i + len(m)
}

type regexMatcher struct{ re *regexp.Regexp }

func (m regexMatcher) find(s string, start int) (int, int) {
	for start <= len(s) {
		loc := m.re.FindStringIndex(s[start:])
		if loc == nil {
			return -1, -1
		}
		if loc[1] > loc[0] {
			return start + loc[0], start + loc[1]
		}
		// Skip empty matches (tokenizers ignores them).
		_, n := utf8.DecodeRuneInString(s[start+loc[0]:])
		if n == 0 {
			return -1, -1
		}
		start += loc[0] + n
	}
	return -1, -1
}

// wordMatcher implements gpt2Pattern, llama3Pattern and qwen2Pattern. Every character is
// covered by some alternative, so the matches tile the input.
type wordMatcher struct {
	llama3 bool // the Llama-3 family (Qwen2 included); else GPT-2
	digits int  // Llama-3 family: digits per number piece
}

func isL(r rune) bool     { return unicode.IsLetter(r) }
func isN(r rune) bool     { return unicode.IsNumber(r) }
func isS(r rune) bool     { return unicode.IsSpace(r) }
func isCRLF(r rune) bool  { return r == '\r' || r == '\n' }
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

func (m wordMatcher) find(s string, start int) (int, int) {
	if start >= len(s) {
		return -1, -1
	}
	return start, start + m.matchAt(s[start:])
}

// run returns the length of the prefix of s whose runes satisfy f, at most max runes (max < 0: no limit).
func run(s string, f func(rune) bool, max int) int {
	n := 0
	for i := 0; max < 0 || i < max; i++ {
		r, w := utf8.DecodeRuneInString(s[n:])
		if w == 0 || !f(r) {
			break
		}
		n += w
	}
	return n
}

// contraction matches 's 't 're 've 'm 'll 'd (case-insensitively for Llama-3).
func (m wordMatcher) contraction(s string) int {
	if len(s) < 2 || s[0] != '\'' {
		return 0
	}
	low := func(i int) (byte, int) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if m.llama3 {
			if r == 'ſ' { // U+017F folds to s
				return 's', w
			}
			if r < utf8.RuneSelf {
				return byte(unicode.ToLower(r)), w
			}
			return 0, w
		}
		if r < utf8.RuneSelf {
			return byte(r), w
		}
		return 0, w
	}
	c, w := low(1)
	switch c {
	case 's', 't', 'm', 'd':
		return 1 + w
	case 'r', 'v', 'l':
		if 1+w >= len(s) {
			return 0
		}
		c2, w2 := low(1 + w)
		if (c == 'r' && c2 == 'e') || (c == 'v' && c2 == 'e') || (c == 'l' && c2 == 'l') {
			return 1 + w + w2
		}
	}
	return 0
}

// matchAt returns the length of the match at the start of s (s is not empty).
func (m wordMatcher) matchAt(s string) int {
	if n := m.contraction(s); n > 0 {
		return n
	}
	r0, w0 := utf8.DecodeRuneInString(s)
	if m.llama3 {
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if isL(r0) {
			return run(s, isL, -1)
		}
		if !isCRLF(r0) && !isN(r0) {
			if n := run(s[w0:], isL, -1); n > 0 {
				return w0 + n
			}
		}
		// \p{N}{1,3} (Qwen2: \p{N})
		if n := run(s, isN, m.digits); n > 0 {
			return n
		}
	} else {
		// ' ?\p{L}+', ' ?\p{N}+'
		off := 0
		if r0 == ' ' {
			off = 1
		}
		if n := run(s[off:], isL, -1); n > 0 {
			return off + n
		}
		if n := run(s[off:], isN, -1); n > 0 {
			return off + n
		}
	}
	// ' ?[^\s\p{L}\p{N}]+' (Llama-3 adds [\r\n]*)
	off := 0
	if r0 == ' ' {
		off = 1
	}
	if n := run(s[off:], isOther, -1); n > 0 {
		n += off
		if m.llama3 {
			n += run(s[n:], isCRLF, -1)
		}
		return n
	}
	ws := run(s, isS, -1)
	if ws == 0 { // cannot happen: every rune is L, N, S or other
		return w0
	}
	if m.llama3 {
		// \s*[\r\n]+ : up to and including the last newline of the whitespace run.
		if i := strings.LastIndexAny(s[:ws], "\r\n"); i >= 0 {
			return i + 1
		}
	}
	// \s+(?!\S) then \s+
	if ws == len(s) {
		return ws
	}
	_, lastW := utf8.DecodeLastRuneInString(s[:ws])
	if ws-lastW > 0 {
		return ws - lastW
	}
	return ws
}

// splitBehavior applies a Split pre-tokenizer's behavior to the matches of m in s.
func splitBy(s string, m matcher, behavior string, invert bool) []string {
	type seg struct {
		s     string
		match bool
	}
	var segs []seg
	pos := 0
	for pos < len(s) {
		b, e := m.find(s, pos)
		if b < 0 {
			break
		}
		if b > pos {
			segs = append(segs, seg{s[pos:b], invert})
		}
		segs = append(segs, seg{s[b:e], !invert})
		pos = e
	}
	if pos < len(s) {
		segs = append(segs, seg{s[pos:], invert})
	}
	var out []string
	switch behavior {
	case "Removed":
		for _, g := range segs {
			if !g.match {
				out = append(out, g.s)
			}
		}
	case "MergedWithPrevious":
		for _, g := range segs {
			if g.match && len(out) > 0 {
				out[len(out)-1] += g.s
			} else {
				out = append(out, g.s)
			}
		}
	case "MergedWithNext":
		pending := ""
		for _, g := range segs {
			if g.match {
				pending += g.s
				continue
			}
			out = append(out, pending+g.s)
			pending = ""
		}
		if pending != "" {
			out = append(out, pending)
		}
	case "Contiguous":
		prevMatch := false
		for i, g := range segs {
			if g.match && prevMatch && i > 0 {
				out[len(out)-1] += g.s
			} else {
				out = append(out, g.s)
			}
			prevMatch = g.match
		}
	default: // Isolated
		for _, g := range segs {
			out = append(out, g.s)
		}
	}
	return out
}

// bytesToUnicode is GPT-2's map from bytes to printable runes.
func bytesToUnicode() (enc [256]rune, dec map[rune]byte) {
	dec = make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			enc[b] = rune(b)
		} else {
			enc[b] = rune(256 + n)
			n++
		}
		dec[enc[b]] = byte(b)
	}
	return enc, dec
}
