package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"lowbit/internal/safefile"
)

var errEmptyPattern = errors.New("empty pattern")

// hfFile is the part of tokenizer.json this package reads. truncation and padding are
// ignored (they shape batches, not ids).
type hfFile struct {
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    *hfNode         `json:"normalizer"`
	PreTokenizer  *hfNode         `json:"pre_tokenizer"`
	PostProcessor *hfNode         `json:"post_processor"`
	Decoder       *hfNode         `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

type hfAdded struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// hfNode is any normalizer, pre-tokenizer, post-processor or decoder; each type reads
// the fields it knows.
type hfNode struct {
	Type          string     `json:"type"`
	Normalizers   []hfNode   `json:"normalizers"`
	Pretokenizers []hfNode   `json:"pretokenizers"`
	Processors    []hfNode   `json:"processors"`
	Decoders      []hfNode   `json:"decoders"`
	Prepend       string     `json:"prepend"`
	Pattern       *hfPattern `json:"pattern"`
	Content       *string    `json:"content"`
	Behavior      string     `json:"behavior"`
	Invert        bool       `json:"invert"`
	AddPrefix     *bool      `json:"add_prefix_space"`
	UseRegex      *bool      `json:"use_regex"`
	Replacement   string     `json:"replacement"`
	PrependScheme string     `json:"prepend_scheme"`
	Split         *bool      `json:"split"`
	Start         int        `json:"start"`
	Stop          int        `json:"stop"`
	Left          bool       `json:"left"`
	Right         bool       `json:"right"`
	Individual    bool       `json:"individual_digits"`
	Single        []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
	Cls []any `json:"cls"`
	Sep []any `json:"sep"`
}

type hfBPE struct {
	Type         string          `json:"type"`
	Dropout      *float64        `json:"dropout"`
	UnkToken     *string         `json:"unk_token"`
	ContPrefix   *string         `json:"continuing_subword_prefix"`
	EndSuffix    *string         `json:"end_of_word_suffix"`
	FuseUnk      bool            `json:"fuse_unk"`
	ByteFallback bool            `json:"byte_fallback"`
	IgnoreMerges bool            `json:"ignore_merges"`
	Vocab        map[string]int  `json:"vocab"`
	Merges       json.RawMessage `json:"merges"`
}

// Pipeline steps, compiled from tokenizer.json.
type normStep struct {
	kind     string // prepend, replace, lower, strip, nfc
	a, b     string
	left, rt bool
}

type preStep struct {
	kind      string // split, bytelevel, metaspace, digits
	m         matcher
	behavior  string
	invert    bool
	addPrefix bool
	useRegex  bool
	repl      string
	prepend   string // always, first, never
	split     bool
	single    bool // digits: individual
}

type decStep struct {
	kind        string // replace, bytefallback, fuse, strip, metaspace, bytelevel
	a, b        string
	start, stop int
	afterFuse   bool
	prepend     bool
}

type mergeKey struct{ a, b int32 }
type mergeVal struct{ rank, id int32 }

// hfModel is a tokenizer.json with a BPE model.
type hfModel struct {
	specials
	vocab    map[string]int
	pieces   []string // id -> string (model vocab and added tokens)
	merges   map[mergeKey]mergeVal
	unk      int
	fuseUnk  bool
	byteFB   bool
	ignoreMg bool

	added       []hfAdded // longest content first
	addedByID   map[int]hfAdded
	norm        []normStep
	pre         []preStep
	post        []postItem // nil: no template
	postBOSOnly bool       // the post-processor adds nothing (ByteLevel only)
	dec         []decStep
	byteLevel   bool
	b2u         [256]rune
	u2b         map[rune]byte
	multiRunes  map[rune]bool // runes inside vocab strings of two or more runes
	fbBarrier   bool          // runes missing from the vocab become byte tokens no merge takes
}

// postItem is one element of the single-sequence template: ids, or the sequence itself (nil).
type postItem struct{ ids []int }

// LoadHFJSON reads a HuggingFace tokenizer.json with a BPE model.
func LoadHFJSON(path string) (Tokenizer, error) {
	b, err := safefile.ReadFile(path, maxHFJSONSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	m, err := parseHFJSON(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return m, nil
}

func parseHFJSON(b []byte) (*hfModel, error) {
	var f hfFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if len(f.Model) == 0 || string(f.Model) == "null" {
		return nil, errors.New("model: missing")
	}
	var bm hfBPE
	if err := json.Unmarshal(f.Model, &bm); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if bm.Type != "" && bm.Type != "BPE" {
		return nil, fmt.Errorf("model.type %q is not supported (only BPE)", bm.Type)
	}
	if bm.Dropout != nil && *bm.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout %v is not supported", *bm.Dropout)
	}
	if bm.ContPrefix != nil && *bm.ContPrefix != "" {
		return nil, fmt.Errorf("model.continuing_subword_prefix %q is not supported", *bm.ContPrefix)
	}
	if bm.EndSuffix != nil && *bm.EndSuffix != "" {
		return nil, fmt.Errorf("model.end_of_word_suffix %q is not supported", *bm.EndSuffix)
	}
	if bm.Vocab == nil {
		return nil, errors.New("model.vocab: missing")
	}
	m, err := newHFModel(bm.Vocab, f.AddedTokens)
	if err != nil {
		return nil, err
	}
	m.fuseUnk, m.byteFB, m.ignoreMg = bm.FuseUnk, bm.ByteFallback, bm.IgnoreMerges
	if bm.UnkToken != nil {
		id, ok := m.vocab[*bm.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in the vocab", *bm.UnkToken)
		}
		m.unk = id
	}
	if err := m.parseMerges(bm.Merges); err != nil {
		return nil, err
	}
	if m.norm, err = compileNorm(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if m.pre, err = compilePre(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := m.compilePost(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	if m.dec, err = compileDec(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	m.finish()
	return m, nil
}

// maxTokenID bounds the ids of every vocabulary file, so that a hostile id cannot make
// the id -> piece table huge; real vocabularies stay below 300k.
const maxTokenID = 1 << 24

// newHFModel makes a BPE tokenizer of vocab and added tokens, with no merges and no
// pipeline yet: the caller adds them, then calls finish.
func newHFModel(vocab map[string]int, added []hfAdded) (*hfModel, error) {
	m := &hfModel{vocab: vocab, unk: -1, addedByID: map[int]hfAdded{}, merges: map[mergeKey]mergeVal{}}
	size := 0
	for s, id := range m.vocab {
		if id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("vocab entry %q has id %d out of range", s, id)
		}
		size = max(size, id+1)
	}
	for _, a := range added {
		if a.ID < 0 || a.ID >= maxTokenID {
			return nil, fmt.Errorf("added token %q has id %d out of range", a.Content, a.ID)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("added token %d has empty content", a.ID)
		}
		size = max(size, a.ID+1)
	}
	m.pieces = make([]string, size)
	for s, id := range m.vocab {
		m.pieces[id] = s
	}
	for _, a := range added {
		m.pieces[a.ID] = a.Content
		m.addedByID[a.ID] = a
		m.added = append(m.added, a)
	}
	sort.SliceStable(m.added, func(i, j int) bool { return len(m.added[i].Content) > len(m.added[j].Content) })
	return m, nil
}

// finish derives what the pipeline implies (byte-level or not, BOS from the
// post-processor, EOS and end-of-turn ids from the added tokens).
func (m *hfModel) finish() {
	for _, p := range m.pre {
		if p.kind == "bytelevel" {
			m.byteLevel = true
		}
	}
	for _, d := range m.dec {
		if d.kind == "bytelevel" {
			m.byteLevel = true
		}
	}
	m.b2u, m.u2b = bytesToUnicode()
	m.multiRunes = multiRuneSet(m.vocab)
	m.fbBarrier = m.byteFB && m.byteTokensUnmerged()
	m.bos, m.eos = -1, -1
	for _, it := range m.post {
		if it.ids == nil {
			break
		}
		if len(it.ids) > 0 && m.bos < 0 {
			m.bos = it.ids[0]
		}
	}
	m.addBOS = m.bos >= 0
	for _, name := range []string{"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"} {
		if a, ok := m.addedIDByContent(name); ok {
			m.eos = a
			break
		}
	}
	m.eosIDs = defaultEOSIDs(m, m.eos)
}

// byteTokensUnmerged reports whether all 256 <0xXX> tokens exist and no merge uses one.
func (m *hfModel) byteTokensUnmerged() bool {
	isByte := map[int32]bool{}
	for v := 0; v < 256; v++ {
		id, ok := m.vocab[fmt.Sprintf("<0x%02X>", v)]
		if !ok {
			return false
		}
		isByte[int32(id)] = true
	}
	for k := range m.merges {
		if isByte[k.a] || isByte[k.b] {
			return false
		}
	}
	return true
}

func (m *hfModel) addedIDByContent(s string) (int, bool) {
	for _, a := range m.added {
		if a.Content == s {
			return a.ID, true
		}
	}
	return -1, false
}

func (m *hfModel) parseMerges(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return fmt.Errorf("model.merges: %w", err)
	}
	for rank, it := range items {
		var a, b string
		var pair []string
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			var ok bool
			a, b, ok = strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("model.merges[%d] %q is not two tokens", rank, s)
			}
		} else if err := json.Unmarshal(it, &pair); err == nil && len(pair) == 2 {
			a, b = pair[0], pair[1]
		} else {
			return fmt.Errorf("model.merges[%d] is neither \"a b\" nor [a, b]", rank)
		}
		if err := m.addMerge(a, b, rank); err != nil {
			return fmt.Errorf("model.merges[%d] %w", rank, err)
		}
	}
	return nil
}

// addMerge makes a+b the merge of a and b at rank; the first of duplicate merges counts.
func (m *hfModel) addMerge(a, b string, rank int) error {
	ia, ok1 := m.vocab[a]
	ib, ok2 := m.vocab[b]
	ic, ok3 := m.vocab[a+b]
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("(%q, %q): token not in the vocab", a, b)
	}
	k := mergeKey{int32(ia), int32(ib)}
	if _, dup := m.merges[k]; !dup {
		m.merges[k] = mergeVal{int32(rank), int32(ic)}
	}
	return nil
}

func patternOf(n *hfNode) (string, bool, error) {
	if n.Pattern == nil {
		return "", false, fmt.Errorf("%s: pattern missing", n.Type)
	}
	if n.Pattern.String != nil {
		return *n.Pattern.String, false, nil
	}
	if n.Pattern.Regex != nil {
		return *n.Pattern.Regex, true, nil
	}
	return "", false, fmt.Errorf("%s: pattern has neither String nor Regex", n.Type)
}

func compileNorm(n *hfNode) ([]normStep, error) {
	if n == nil {
		return nil, nil
	}
	switch n.Type {
	case "Sequence":
		var out []normStep
		for i := range n.Normalizers {
			s, err := compileNorm(&n.Normalizers[i])
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "Prepend":
		return []normStep{{kind: "prepend", a: n.Prepend}}, nil
	case "Replace":
		p, isRe, err := patternOf(n)
		if err != nil {
			return nil, err
		}
		if isRe || p == "" {
			return nil, fmt.Errorf("Replace with pattern %q: only non-empty String patterns are supported", p)
		}
		if n.Content == nil {
			return nil, errors.New("Replace: content missing")
		}
		return []normStep{{kind: "replace", a: p, b: *n.Content}}, nil
	case "Lowercase":
		return []normStep{{kind: "lower"}}, nil
	case "NFC":
		return []normStep{{kind: "nfc"}}, nil
	case "Strip":
		return []normStep{{kind: "strip", left: n.Left, rt: n.Right}}, nil
	}
	return nil, fmt.Errorf("type %q is not supported", n.Type)
}

func compilePre(n *hfNode) ([]preStep, error) {
	if n == nil {
		return nil, nil
	}
	switch n.Type {
	case "Sequence":
		var out []preStep
		for i := range n.Pretokenizers {
			s, err := compilePre(&n.Pretokenizers[i])
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "Split":
		p, isRe, err := patternOf(n)
		if err != nil {
			return nil, err
		}
		m, err := newMatcher(p, isRe)
		if err != nil {
			return nil, fmt.Errorf("Split pattern %q: %w", p, err)
		}
		switch n.Behavior {
		case "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous":
		default:
			return nil, fmt.Errorf("Split behavior %q is not supported", n.Behavior)
		}
		return []preStep{{kind: "split", m: m, behavior: n.Behavior, invert: n.Invert}}, nil
	case "ByteLevel":
		s := preStep{kind: "bytelevel", useRegex: true}
		if n.AddPrefix != nil {
			s.addPrefix = *n.AddPrefix
		}
		if n.UseRegex != nil {
			s.useRegex = *n.UseRegex
		}
		if s.useRegex {
			s.m = wordMatcher{}
		}
		return []preStep{s}, nil
	case "Metaspace":
		s, err := metaspace(n)
		if err != nil {
			return nil, err
		}
		s.split = n.Split == nil || *n.Split
		return []preStep{s}, nil
	case "Digits":
		return []preStep{{kind: "digits", single: n.Individual}}, nil
	}
	return nil, fmt.Errorf("type %q is not supported", n.Type)
}

func metaspace(n *hfNode) (preStep, error) {
	s := preStep{kind: "metaspace", repl: n.Replacement, prepend: "always"}
	if utf8.RuneCountInString(s.repl) != 1 {
		return s, fmt.Errorf("Metaspace replacement %q is not one character", s.repl)
	}
	if n.PrependScheme != "" {
		s.prepend = n.PrependScheme
	} else if n.AddPrefix != nil && !*n.AddPrefix {
		s.prepend = "never"
	}
	switch s.prepend {
	case "always", "first", "never":
	default:
		return s, fmt.Errorf("Metaspace prepend_scheme %q is not supported", s.prepend)
	}
	return s, nil
}

func (m *hfModel) compilePost(n *hfNode) error {
	if n == nil {
		return nil
	}
	switch n.Type {
	case "Sequence":
		for i := range n.Processors {
			if err := m.compilePost(&n.Processors[i]); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		return nil
	case "TemplateProcessing":
		if m.post != nil {
			return errors.New("more than one TemplateProcessing")
		}
		m.post = []postItem{}
		seq := false
		for _, it := range n.Single {
			switch {
			case it.SpecialToken != nil:
				st, ok := n.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("TemplateProcessing: special token %q not in special_tokens", it.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || id >= len(m.pieces) {
						return fmt.Errorf("TemplateProcessing: special token %q id %d out of range", it.SpecialToken.ID, id)
					}
				}
				m.post = append(m.post, postItem{ids: append([]int{}, st.IDs...)})
			case it.Sequence != nil:
				if seq {
					return errors.New("TemplateProcessing: single template has two sequences")
				}
				seq = true
				m.post = append(m.post, postItem{})
			default:
				return errors.New("TemplateProcessing: item is neither SpecialToken nor Sequence")
			}
		}
		if !seq {
			return errors.New("TemplateProcessing: single template has no sequence")
		}
		return nil
	case "RobertaProcessing", "BertProcessing":
		id := func(v []any, field string) ([]int, error) {
			if len(v) != 2 {
				return nil, fmt.Errorf("%s.%s is not [token, id]", n.Type, field)
			}
			f, ok := v[1].(float64)
			if !ok || f < 0 || f >= float64(len(m.pieces)) || f != math.Trunc(f) {
				return nil, fmt.Errorf("%s.%s id is not a valid id", n.Type, field)
			}
			return []int{int(f)}, nil
		}
		cls, err := id(n.Cls, "cls")
		if err != nil {
			return err
		}
		sep, err := id(n.Sep, "sep")
		if err != nil {
			return err
		}
		m.post = []postItem{{ids: cls}, {}, {ids: sep}}
		return nil
	}
	return fmt.Errorf("type %q is not supported", n.Type)
}

func compileDec(n *hfNode) ([]decStep, error) {
	if n == nil {
		return nil, nil
	}
	var out []decStep
	var add func(n *hfNode) error
	fused := false
	add = func(n *hfNode) error {
		switch n.Type {
		case "Sequence":
			for i := range n.Decoders {
				if err := add(&n.Decoders[i]); err != nil {
					return err
				}
			}
		case "Replace":
			p, isRe, err := patternOf(n)
			if err != nil {
				return err
			}
			if isRe || p == "" || n.Content == nil {
				return fmt.Errorf("Replace with pattern %q: only non-empty String patterns with content are supported", p)
			}
			out = append(out, decStep{kind: "replace", a: p, b: *n.Content})
		case "ByteFallback":
			out = append(out, decStep{kind: "bytefallback"})
		case "Fuse":
			fused = true
		case "Strip":
			if n.Content == nil || utf8.RuneCountInString(*n.Content) != 1 {
				return errors.New("Strip: content must be one character")
			}
			if fused && n.Stop > 0 {
				return errors.New("Strip with stop > 0 after Fuse is not supported (it cannot stream)")
			}
			if n.Start < 0 || n.Stop < 0 {
				return errors.New("Strip: negative start or stop")
			}
			out = append(out, decStep{kind: "strip", a: *n.Content, start: n.Start, stop: n.Stop, afterFuse: fused})
		case "Metaspace":
			s, err := metaspace(n)
			if err != nil {
				return err
			}
			out = append(out, decStep{kind: "metaspace", a: s.repl, prepend: s.prepend != "never"})
		case "ByteLevel":
			out = append(out, decStep{kind: "bytelevel"})
		default:
			return fmt.Errorf("type %q is not supported", n.Type)
		}
		return nil
	}
	if err := add(n); err != nil {
		return nil, err
	}
	if out == nil {
		out = []decStep{} // a decoder that only fuses
	}
	return out, nil
}

// defaultEOSIDs is eos plus the end-of-turn tokens the vocabulary has.
func defaultEOSIDs(t Tokenizer, eos int) []int {
	var ids []int
	if eos >= 0 {
		ids = append(ids, eos)
	}
	if m, ok := t.(*hfModel); ok {
		for _, name := range []string{"<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<end_of_turn>", "<|endoftext|>", "<|end|>", "<|eom_id|>"} {
			if id, ok := m.addedIDByContent(name); ok && m.addedByID[id].Special && !containsInt(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// segment is a piece of input text on its way through the pipeline; id >= 0 marks an
// added token already resolved. atStart: the piece begins at offset 0 of the input.
type segment struct {
	s       string
	id      int
	atStart bool
}

// splitAdded cuts added tokens (those with normalized == wantNormalized) out of segments.
func (m *hfModel) splitAdded(segs []segment, wantNormalized bool) []segment {
	var out []segment
	for _, sg := range segs {
		if sg.id >= 0 {
			out = append(out, sg)
			continue
		}
		s, pos, start := sg.s, 0, sg.atStart
		for i := 0; i < len(s); {
			a, b, e, ok := m.matchAdded(s, i, pos, wantNormalized)
			if !ok {
				_, w := utf8.DecodeRuneInString(s[i:])
				i += w
				continue
			}
			if b > pos {
				out = append(out, segment{s: s[pos:b], id: -1, atStart: start && pos == 0})
			}
			out = append(out, segment{s: s[b:e], id: a.ID})
			pos, i = e, e
		}
		if pos < len(s) {
			out = append(out, segment{s: s[pos:], id: -1, atStart: start && pos == 0})
		}
	}
	return out
}

// matchAdded finds the longest added token starting at i; lstrip/rstrip widen the match
// over whitespace (not before floor), single_word needs word boundaries.
func (m *hfModel) matchAdded(s string, i, floor int, wantNormalized bool) (hfAdded, int, int, bool) {
	for _, a := range m.added {
		if a.Normalized != wantNormalized || !strings.HasPrefix(s[i:], a.Content) {
			continue
		}
		b, e := i, i+len(a.Content)
		if a.SingleWord {
			r0, _ := utf8.DecodeLastRuneInString(s[:b])
			r1, _ := utf8.DecodeRuneInString(s[e:])
			if (b > 0 && isWordRune(r0)) || (e < len(s) && isWordRune(r1)) {
				continue
			}
		}
		if a.LStrip {
			for b > floor {
				r, w := utf8.DecodeLastRuneInString(s[:b])
				if !unicode.IsSpace(r) {
					break
				}
				b -= w
			}
		}
		if a.RStrip {
			for e < len(s) {
				r, w := utf8.DecodeRuneInString(s[e:])
				if !unicode.IsSpace(r) {
					break
				}
				e += w
			}
		}
		return a, b, e, true
	}
	return hfAdded{}, 0, 0, false
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

func (m *hfModel) normalize(s string) string {
	for _, n := range m.norm {
		switch n.kind {
		case "prepend":
			if s != "" {
				s = n.a + s
			}
		case "replace":
			s = strings.ReplaceAll(s, n.a, n.b)
		case "lower":
			s = strings.ToLower(s)
		case "nfc":
			s = norm.NFC.String(s)
		case "strip":
			if n.left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if n.rt {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
		}
	}
	return s
}

// preTokenize splits a normalized segment into words (already byte-mapped for ByteLevel).
func (m *hfModel) preTokenize(s string, atStart bool) []segment {
	words := []segment{{s: s, id: -1, atStart: atStart}}
	for _, p := range m.pre {
		var next []segment
		for _, w := range words {
			for j, piece := range p.apply(m, w.s, w.atStart) {
				next = append(next, segment{s: piece, id: -1, atStart: w.atStart && j == 0})
			}
		}
		words = next
	}
	return words
}

func (p *preStep) apply(m *hfModel, s string, atStart bool) []string {
	switch p.kind {
	case "split":
		return splitBy(s, p.m, p.behavior, p.invert)
	case "digits":
		var out []string
		pos := 0
		for i := 0; i < len(s); {
			r, w := utf8.DecodeRuneInString(s[i:])
			if !unicode.IsDigit(r) {
				i += w
				continue
			}
			e := i + w
			if !p.single {
				e = i + run(s[i:], unicode.IsDigit, -1)
			}
			if i > pos {
				out = append(out, s[pos:i])
			}
			out = append(out, s[i:e])
			pos, i = e, e
		}
		if pos < len(s) {
			out = append(out, s[pos:])
		}
		return out
	case "metaspace":
		s = strings.ReplaceAll(s, " ", p.repl)
		if !strings.HasPrefix(s, p.repl) && (p.prepend == "always" || (p.prepend == "first" && atStart)) {
			s = p.repl + s
		}
		if !p.split {
			return []string{s}
		}
		return splitBy(s, literalMatcher(p.repl), "MergedWithNext", false)
	case "bytelevel":
		if p.addPrefix && !strings.HasPrefix(s, " ") {
			s = " " + s
		}
		pieces := []string{s}
		if p.useRegex {
			pieces = splitBy(s, p.m, "Isolated", false)
		}
		for i, pc := range pieces {
			var sb strings.Builder
			for j := 0; j < len(pc); j++ {
				sb.WriteRune(m.b2u[pc[j]])
			}
			pieces[i] = sb.String()
		}
		return pieces
	}
	return []string{s}
}

// Encode runs added-token extraction, the normalizer, the pre-tokenizer and BPE; with
// addBOS the post-processor's template (or else BOS) wraps the ids.
func (m *hfModel) Encode(text string, addBOS bool) ([]int, error) {
	segs := []segment{{s: text, id: -1, atStart: true}}
	segs = m.splitAdded(segs, false)
	var ids []int
	for _, sg := range segs {
		if sg.id >= 0 {
			ids = append(ids, sg.id)
			continue
		}
		norm := m.normalize(sg.s)
		for _, ns := range m.splitAdded([]segment{{s: norm, id: -1, atStart: sg.atStart}}, true) {
			if ns.id >= 0 {
				ids = append(ids, ns.id)
				continue
			}
			for _, w := range m.preTokenize(ns.s, ns.atStart) {
				var err error
				if ids, err = m.bpe(ids, w.s); err != nil {
					return nil, err
				}
			}
		}
	}
	if !addBOS {
		return ids, nil
	}
	if m.post == nil {
		if m.bos >= 0 {
			return append([]int{m.bos}, ids...), nil
		}
		return ids, nil
	}
	var out []int
	for _, it := range m.post {
		if it.ids == nil {
			out = append(out, ids...)
		} else {
			out = append(out, it.ids...)
		}
	}
	return out, nil
}

// hfSym is a symbol of a word being merged: a token id and its neighbours.
type hfSym struct {
	id         int32
	prev, next int
	dead       bool
}

// bpe appends the ids of one pre-tokenized word (tokenizers' BPE::tokenize).
func (m *hfModel) bpe(out []int, w string) ([]int, error) {
	if w == "" {
		return out, nil
	}
	if m.ignoreMg {
		if id, ok := m.vocab[w]; ok {
			return append(out, id), nil
		}
	}
	if len(w) < 64 {
		return m.bpeSegment(out, w)
	}
	// A rune that is a token by itself and part of no longer token stops every merge, so
	// long words (SentencePiece-style files have no pre-tokenizer) merge in segments.
	var err error
	splitAtBarriers(w, func(r rune) bool {
		if m.multiRunes[r] {
			return false
		}
		_, ok := m.vocab[string(r)]
		return ok || m.fbBarrier
	}, func(seg string) {
		if err == nil {
			out, err = m.bpeSegment(out, seg)
		}
	})
	return out, err
}

// bpeSegment is tokenizers' BPE::merge_word on one segment of a word.
func (m *hfModel) bpeSegment(out []int, w string) ([]int, error) {
	syms := make([]hfSym, 0, len(w))
	unkPending := false
	flushUnk := func() {
		if unkPending {
			syms = append(syms, hfSym{id: int32(m.unk)})
			unkPending = false
		}
	}
	var hexbuf [6]byte
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		ch := w[i : i+n]
		i += n
		if id, ok := m.vocab[ch]; ok {
			flushUnk()
			syms = append(syms, hfSym{id: int32(id)})
			continue
		}
		if m.byteFB {
			var bids []int32
			for j := 0; j < len(ch); j++ {
				h := strconv.AppendUint(append(hexbuf[:0], "<0x"...), uint64(ch[j])|0x100, 16)
				key := string(h[:3]) + strings.ToUpper(string(h[4:])) + ">"
				id, ok := m.vocab[key]
				if !ok {
					bids = nil
					break
				}
				bids = append(bids, int32(id))
			}
			if bids != nil {
				flushUnk()
				for _, id := range bids {
					syms = append(syms, hfSym{id: id})
				}
				continue
			}
		}
		if m.unk < 0 {
			return nil, fmt.Errorf("tokenizer: %q has no token and the model has no unk_token", ch)
		}
		if unkPending && !m.fuseUnk {
			flushUnk()
		}
		unkPending = true
	}
	flushUnk()
	for i := range syms {
		syms[i].prev, syms[i].next = i-1, i+1
	}
	syms[len(syms)-1].next = -1
	q := newHeap[mergeItem](len(syms))
	for i := 0; i+1 < len(syms); i++ {
		if v, ok := m.merges[mergeKey{syms[i].id, syms[i+1].id}]; ok {
			q.push(mergeItem{pos: i, rank: v.rank, id: v.id})
		}
	}
	for q.len() > 0 {
		top := q.pop()
		s := &syms[top.pos]
		if s.dead || s.next < 0 {
			continue
		}
		r := &syms[s.next]
		v, ok := m.merges[mergeKey{s.id, r.id}]
		if !ok || v.id != top.id {
			continue
		}
		s.id = top.id
		r.dead = true
		s.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = top.pos
		}
		if s.prev >= 0 {
			if v, ok := m.merges[mergeKey{syms[s.prev].id, s.id}]; ok {
				q.push(mergeItem{pos: s.prev, rank: v.rank, id: v.id})
			}
		}
		if s.next >= 0 {
			if v, ok := m.merges[mergeKey{s.id, syms[s.next].id}]; ok {
				q.push(mergeItem{pos: top.pos, rank: v.rank, id: v.id})
			}
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		out = append(out, int(syms[i].id))
	}
	return out, nil
}

type mergeItem struct {
	pos      int
	rank, id int32
}

// before orders merges: lowest rank first, then leftmost.
func (a mergeItem) before(b mergeItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// Decode turns ids into text; special added tokens are left out.
func (m *hfModel) Decode(ids []int) string { return decodeAll(m, ids) }

// Piece returns the token string of id ("" when out of range).
func (m *hfModel) Piece(id int) string {
	if id < 0 || id >= len(m.pieces) {
		return ""
	}
	return m.pieces[id]
}

// VocabSize is one more than the largest id of the vocab and the added tokens.
func (m *hfModel) VocabSize() int { return len(m.pieces) }

func (m *hfModel) lossyPerByte() bool { return !m.byteLevel }

// appendToken runs the decoder chain on one token.
func (m *hfModel) appendToken(dst []byte, id int, st *streamState) []byte {
	return m.appendTokenSpecial(dst, id, st, true)
}

func (m *hfModel) appendTokenSpecial(dst []byte, id int, st *streamState, skipSpecial bool) []byte {
	if id < 0 || id >= len(m.pieces) {
		return dst
	}
	a, isAdded := m.addedByID[id]
	if isAdded && a.Special && skipSpecial {
		return dst
	}
	s := m.pieces[id]
	if m.dec == nil { // no decoder: tokens joined by spaces
		if st.tokens > 0 {
			dst = append(dst, ' ')
		}
		st.tokens++
		return append(dst, s...)
	}
	for _, d := range m.dec {
		switch d.kind {
		case "replace":
			s = strings.ReplaceAll(s, d.a, d.b)
		case "bytefallback":
			if v, ok := parseBytePiece(s); ok {
				s = string([]byte{v})
			}
		case "metaspace":
			if st.tokens == 0 && d.prepend {
				s = strings.TrimPrefix(s, d.a)
			}
			s = strings.ReplaceAll(s, d.a, " ")
		case "bytelevel":
			buf := make([]byte, 0, len(s))
			ok := true
			for _, r := range s {
				b, found := m.u2b[r]
				if !found {
					ok = false
					break
				}
				buf = append(buf, b)
			}
			if ok {
				s = string(buf)
			}
		case "strip":
			if d.afterFuse {
				if st.strip < 0 {
					st.strip = d.start
				}
				for st.strip > 0 && strings.HasPrefix(s, d.a) {
					s = s[len(d.a):]
					st.strip--
				}
				if s != "" {
					st.strip = 0
				}
				continue
			}
			for k := 0; k < d.start && strings.HasPrefix(s, d.a); k++ {
				s = s[len(d.a):]
			}
			for k := 0; k < d.stop && strings.HasSuffix(s, d.a); k++ {
				s = s[:len(s)-len(d.a)]
			}
		}
	}
	st.tokens++
	return append(dst, s...)
}
