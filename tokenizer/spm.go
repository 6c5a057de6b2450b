package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"lowbit/internal/safefile"
)

// SentencePiece piece types (sentencepiece_model.proto, ModelProto.SentencePiece.Type).
const (
	spNormal      = 1
	spUnknown     = 2
	spControl     = 3
	spUserDefined = 4
	spUnused      = 5
	spByte        = 6
)

const spaceSymbol = "\u2581" // ▁, SentencePiece's escaped space

// spPiece is one vocabulary entry of a SentencePiece model.
type spPiece struct {
	text  string
	score float32
	typ   int
}

// spModel is a SentencePiece BPE model (Llama-2, TinyLlama, Mistral, Gemma, llama2.c's tok512).
// It follows the C++ library's bpe_model.cc and normalizer.cc for the options those models
// use: identity normalization, add_dummy_prefix, remove_extra_whitespaces, byte_fallback,
// user-defined (unsplittable) symbols and unused pieces.
type spModel struct {
	specials
	pieces      []spPiece
	ids         map[string]int // normal, user-defined and unused pieces
	reserved    map[string]int // control, unknown and byte pieces
	userDefined []string       // user-defined symbols, longest first
	byteIDs     [256]int       // id of <0xXX>, -1 if absent
	unkID       int
	byteFallbck bool
	dummyPrefix bool
	removeExtra bool
	escapeWS    bool
	wsSuffix    bool
	unkSurface  string
	multiRunes  map[rune]bool // runes inside pieces of two or more runes
}

// LoadSentencePiece reads a SentencePiece model file (tokenizer.model).
func LoadSentencePiece(path string) (Tokenizer, error) {
	b, err := safefile.ReadFile(path, maxSentencePieceSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	m, err := parseSentencePiece(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return m, nil
}

// protoReader walks protobuf wire format; it is all a .model file needs.
type protoReader struct {
	b []byte
}

var errTruncated = errors.New("truncated protobuf")

func (r *protoReader) varint() (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, errTruncated
	}
	r.b = r.b[n:]
	return v, nil
}

// next returns the next field number, wire type and, for length-delimited fields, the bytes;
// for varint and fixed fields the value is in v.
func (r *protoReader) next() (field int, wt int, v uint64, data []byte, err error) {
	key, err := r.varint()
	if err != nil {
		return 0, 0, 0, nil, err
	}
	field, wt = int(key>>3), int(key&7)
	switch wt {
	case 0:
		v, err = r.varint()
	case 1:
		if len(r.b) < 8 {
			return 0, 0, 0, nil, errTruncated
		}
		v, r.b = binary.LittleEndian.Uint64(r.b), r.b[8:]
	case 2:
		var n uint64
		if n, err = r.varint(); err == nil {
			if n > uint64(len(r.b)) {
				return 0, 0, 0, nil, errTruncated
			}
			data, r.b = r.b[:n], r.b[n:]
		}
	case 5:
		if len(r.b) < 4 {
			return 0, 0, 0, nil, errTruncated
		}
		v, r.b = uint64(binary.LittleEndian.Uint32(r.b)), r.b[4:]
	default:
		return 0, 0, 0, nil, fmt.Errorf("unsupported protobuf wire type %d (field %d)", wt, field)
	}
	return field, wt, v, data, err
}

func parseSentencePiece(b []byte) (*spModel, error) {
	m := &spModel{
		ids: map[string]int{}, reserved: map[string]int{},
		dummyPrefix: true, removeExtra: true, escapeWS: true,
		unkSurface: " \u2047 ",
	}
	modelType := 1 // UNIGRAM is the proto default
	bosID, eosID, unkID := 1, 2, 0
	var normName string
	var charsmap []byte
	r := protoReader{b}
	for len(r.b) > 0 {
		f, wt, _, data, err := r.next()
		if err != nil {
			return nil, err
		}
		if wt != 2 {
			continue
		}
		switch f {
		case 1: // pieces
			p := spPiece{typ: spNormal}
			pr := protoReader{data}
			for len(pr.b) > 0 {
				f, wt, v, d, err := pr.next()
				if err != nil {
					return nil, fmt.Errorf("piece %d: %w", len(m.pieces), err)
				}
				switch {
				case f == 1 && wt == 2:
					p.text = string(d)
				case f == 2 && wt == 5:
					p.score = math.Float32frombits(uint32(v))
				case f == 3 && wt == 0:
					p.typ = int(v)
				}
			}
			m.pieces = append(m.pieces, p)
		case 2: // trainer_spec
			tr := protoReader{data}
			for len(tr.b) > 0 {
				f, wt, v, d, err := tr.next()
				if err != nil {
					return nil, fmt.Errorf("trainer_spec: %w", err)
				}
				switch {
				case f == 3 && wt == 0:
					modelType = int(v)
				case f == 35 && wt == 0:
					m.byteFallbck = v != 0
				case f == 24 && wt == 0:
					m.wsSuffix = v != 0
				case f == 40 && wt == 0:
					unkID = int(int32(v))
				case f == 41 && wt == 0:
					bosID = int(int32(v))
				case f == 42 && wt == 0:
					eosID = int(int32(v))
				case f == 44 && wt == 2:
					m.unkSurface = string(d)
				}
			}
		case 3: // normalizer_spec
			nr := protoReader{data}
			for len(nr.b) > 0 {
				f, wt, v, d, err := nr.next()
				if err != nil {
					return nil, fmt.Errorf("normalizer_spec: %w", err)
				}
				switch {
				case f == 1 && wt == 2:
					normName = string(d)
				case f == 2 && wt == 2:
					charsmap = d
				case f == 3 && wt == 0:
					m.dummyPrefix = v != 0
				case f == 4 && wt == 0:
					m.removeExtra = v != 0
				case f == 5 && wt == 0:
					m.escapeWS = v != 0
				}
			}
		}
	}
	if len(m.pieces) == 0 {
		return nil, errors.New("no pieces")
	}
	if modelType != 2 {
		return nil, fmt.Errorf("trainer_spec.model_type %d not supported (only BPE = 2)", modelType)
	}
	if len(charsmap) > 0 {
		return nil, fmt.Errorf("normalizer_spec %q with a precompiled_charsmap is not supported (only identity)", normName)
	}
	if m.wsSuffix {
		return nil, errors.New("trainer_spec.treat_whitespace_as_suffix is not supported")
	}
	if err := m.indexPieces(); err != nil {
		return nil, err
	}
	if m.unkID < 0 {
		return nil, errors.New("no unknown piece")
	}
	if unkID != m.unkID {
		return nil, fmt.Errorf("trainer_spec.unk_id %d is not the unknown piece (%d)", unkID, m.unkID)
	}
	if err := m.finishPieces(); err != nil {
		return nil, err
	}
	m.bos, m.eos = m.controlID(bosID), m.controlID(eosID)
	m.addBOS = m.bos >= 0
	if m.eos >= 0 {
		m.eosIDs = []int{m.eos}
	}
	return m, nil
}

// indexPieces builds the lookup tables of m.pieces: pieces by text (normal,
// user-defined and unused apart from the reserved ones), the user-defined symbols,
// the byte pieces, and the first unknown piece as m.unkID (-1 if none).
func (m *spModel) indexPieces() error {
	for i := range m.byteIDs {
		m.byteIDs[i] = -1
	}
	m.unkID = -1
	for id, p := range m.pieces {
		if p.text == "" {
			return fmt.Errorf("piece %d is empty", id)
		}
		if !utf8.ValidString(p.text) {
			return fmt.Errorf("piece %d is not valid UTF-8", id)
		}
		switch p.typ {
		case spNormal, spUserDefined, spUnused:
			if _, dup := m.ids[p.text]; !dup {
				m.ids[p.text] = id
			}
			if p.typ == spUserDefined {
				m.userDefined = append(m.userDefined, p.text)
			}
		case spUnknown, spControl, spByte:
			if _, dup := m.reserved[p.text]; !dup {
				m.reserved[p.text] = id
			}
			if p.typ == spUnknown && m.unkID < 0 {
				m.unkID = id
			}
			if p.typ == spByte {
				v, ok := parseBytePiece(p.text)
				if !ok {
					return fmt.Errorf("piece %d: byte piece %q is not <0xXX>", id, p.text)
				}
				m.byteIDs[v] = id
			}
		default:
			return fmt.Errorf("piece %d %q: unknown type %d", id, p.text, p.typ)
		}
	}
	return nil
}

// finishPieces checks that byte fallback has every byte piece and derives what
// encoding needs from the tables indexPieces built.
func (m *spModel) finishPieces() error {
	if m.byteFallbck {
		for v, id := range m.byteIDs {
			if id < 0 {
				return fmt.Errorf("byte_fallback is on but piece <0x%02X> is missing", v)
			}
		}
	}
	m.multiRunes = multiRuneSet(m.ids)
	// Longest first, so the prefix match picks the longest user-defined symbol.
	sortByLenDesc(m.userDefined)
	return nil
}

// controlID returns id when it names a piece (the spec's bos/eos ids), else -1.
func (m *spModel) controlID(id int) int {
	if id < 0 || id >= len(m.pieces) {
		return -1
	}
	return id
}

// parseBytePiece reads "<0xXX>".
func parseBytePiece(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	return byte(v), err == nil
}

// sortByLenDesc sorts s longest first, keeping the order of strings of one length.
func sortByLenDesc(s []string) {
	slices.SortStableFunc(s, func(a, b string) int { return len(b) - len(a) })
}

// normalize applies the identity normalizer: whitespace handling and escaping as
// normalizer.cc does it.
func (m *spModel) normalize(text string) string {
	var sb strings.Builder
	sb.Grow(len(text) + 8)
	if m.removeExtra {
		text = strings.TrimLeft(text, " ")
	}
	if text == "" {
		return ""
	}
	if m.dummyPrefix {
		sb.WriteString(spaceSymbol)
	}
	prevSpace := m.removeExtra
	for len(text) > 0 {
		// User-defined symbols pass through whole.
		if n := m.matchUserDefined(text); n > 0 {
			sb.WriteString(text[:n])
			prevSpace = false
			text = text[n:]
			continue
		}
		r, n := utf8.DecodeRuneInString(text)
		ch := text[:n]
		if r == utf8.RuneError && n == 1 {
			ch = "\uFFFD"
		}
		text = text[n:]
		if ch == " " {
			if prevSpace {
				continue
			}
			prevSpace = m.removeExtra
			if m.escapeWS {
				sb.WriteString(spaceSymbol)
			} else {
				sb.WriteByte(' ')
			}
			continue
		}
		prevSpace = false
		sb.WriteString(ch)
	}
	out := sb.String()
	if m.removeExtra {
		sp := " "
		if m.escapeWS {
			sp = spaceSymbol
		}
		for strings.HasSuffix(out, sp) {
			out = out[:len(out)-len(sp)]
		}
	}
	return out
}

func (m *spModel) matchUserDefined(s string) int {
	for _, u := range m.userDefined {
		if strings.HasPrefix(s, u) {
			return len(u)
		}
	}
	return 0
}

// pieceID is PieceToId: normal pieces first, then reserved ones, else unknown.
func (m *spModel) pieceID(s string) int {
	if id, ok := m.ids[s]; ok {
		return id
	}
	if id, ok := m.reserved[s]; ok {
		return id
	}
	return m.unkID
}

// Encode tokenizes text as SentencePiece's EncodeAsIds does, with BOS in front when asked.
func (m *spModel) Encode(text string, addBOS bool) ([]int, error) {
	var out []int
	if addBOS && m.bos >= 0 {
		out = append(out, m.bos)
	}
	norm := m.normalize(text)
	// No merge can cross a rune that appears in no piece longer than itself, so the
	// text is merged in segments cut around such runes (the same ids, much faster).
	splitAtBarriers(norm, func(r rune) bool { return !m.multiRunes[r] }, func(seg string) { out = m.encodeSegment(out, seg) })
	return out, nil
}

// encodeSegment merges one normalized segment (bpe_model.cc's Encode) and appends its ids.
func (m *spModel) encodeSegment(out []int, norm string) []int {
	// Split into characters (user-defined symbols stay whole and frozen).
	syms := make([]bpeSym, 0, utf8.RuneCountInString(norm))
	for pos := 0; pos < len(norm); {
		n := m.matchUserDefined(norm[pos:])
		frozen := n > 0
		if n == 0 {
			_, n = utf8.DecodeRuneInString(norm[pos:])
		}
		syms = append(syms, bpeSym{start: pos, end: pos + n, prev: len(syms) - 1, next: len(syms) + 1, frozen: frozen})
		pos += n
	}
	syms[len(syms)-1].next = -1
	q := newHeap[spCand](2 * len(syms))
	revMerge := map[string][2]string{}
	add := func(l, r int) {
		if l < 0 || r < 0 || syms[l].frozen || syms[r].frozen {
			return
		}
		piece := norm[syms[l].start:syms[r].end]
		id, ok := m.ids[piece]
		if !ok {
			return
		}
		q.push(spCand{left: int32(l), right: int32(r), size: int32(len(piece)), score: m.pieces[id].score})
		if m.pieces[id].typ == spUnused {
			revMerge[piece] = [2]string{norm[syms[l].start:syms[l].end], norm[syms[r].start:syms[r].end]}
		}
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for q.len() > 0 {
		c := q.pop()
		left, right := int(c.left), int(c.right)
		l, r := &syms[left], &syms[right]
		if l.end == l.start || r.end == r.start || r.end-l.start != int(c.size) || l.next != right {
			continue
		}
		l.end = r.end
		r.start, r.end = 0, 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = left
		}
		add(l.prev, left)
		add(left, l.next)
	}
	var resegment func(piece string)
	resegment = func(piece string) {
		id := m.pieceID(piece)
		if id != m.unkID && m.pieces[id].typ == spUnused {
			if parts, ok := revMerge[piece]; ok {
				resegment(parts[0])
				resegment(parts[1])
				return
			}
		}
		if id == m.unkID && m.byteFallbck {
			for i := 0; i < len(piece); i++ {
				out = append(out, m.byteIDs[piece[i]])
			}
			return
		}
		// Runs of unknown pieces fuse into one, as SentencePiece does without byte fallback.
		if id == m.unkID && len(out) > 0 && out[len(out)-1] == m.unkID {
			return
		}
		out = append(out, id)
	}
	for i := 0; i >= 0; i = syms[i].next {
		resegment(norm[syms[i].start:syms[i].end])
	}
	return out
}

// multiRuneSet collects the runes that occur in pieces of two or more runes.
func multiRuneSet(pieces map[string]int) map[rune]bool {
	set := map[rune]bool{}
	for p := range pieces {
		if utf8.RuneCountInString(p) < 2 {
			continue
		}
		for _, r := range p {
			set[r] = true
		}
	}
	return set
}

// splitAtBarriers calls enc on the pieces of s cut before and after every barrier rune.
func splitAtBarriers(s string, barrier func(rune) bool, enc func(string)) {
	start := 0
	for i, r := range s {
		if !barrier(r) {
			continue
		}
		if i > start {
			enc(s[start:i])
		}
		n := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, n = utf8.DecodeRuneInString(s[i:])
		}
		enc(s[i : i+n])
		start = i + n
	}
	if start < len(s) {
		enc(s[start:])
	}
}

// bpeSym is one live symbol of a word during merging: a byte range of the word and links.
type bpeSym struct {
	start, end int
	prev, next int
	frozen     bool
}

// spCand is a merge candidate: the best score wins, then the leftmost.
type spCand struct {
	left, right int32
	size        int32
	score       float32
}

// before orders candidates: best score first, then leftmost.
func (a spCand) before(b spCand) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// Decode turns ids into text; control tokens are invisible.
func (m *spModel) Decode(ids []int) string { return decodeAll(m, ids) }

// Piece returns the vocabulary string of id ("" when out of range).
func (m *spModel) Piece(id int) string {
	if id < 0 || id >= len(m.pieces) {
		return ""
	}
	return m.pieces[id].text
}

// VocabSize is the number of pieces.
func (m *spModel) VocabSize() int { return len(m.pieces) }

func (m *spModel) lossyPerByte() bool { return true }

// appendToken writes the bytes id stands for: byte pieces raw, ▁ as space, and the
// leading ▁ of the first piece dropped the way SentencePiece's Decode does it (is_bos_ws:
// with remove_extra_whitespaces every leading ▁ piece loses it, else only the first).
func (m *spModel) appendToken(dst []byte, id int, st *streamState) []byte {
	if id < 0 || id >= len(m.pieces) {
		return dst
	}
	p := m.pieces[id]
	if p.typ == spByte {
		v, _ := parseBytePiece(p.text)
		st.started = true
		return append(dst, v)
	}
	if st.bosSeen || st.started {
		st.bosDone = true
	}
	st.bosSeen = false
	switch p.typ {
	case spControl:
		return dst
	case spUnknown:
		st.started = true
		return append(dst, m.unkSurface...)
	}
	s := p.text
	if !st.bosDone && (m.dummyPrefix || m.removeExtra) && strings.HasPrefix(s, spaceSymbol) {
		s = s[len(spaceSymbol):]
		st.bosSeen = !m.removeExtra
	}
	if s != "" {
		st.started = true
	}
	for len(s) > 0 {
		i := strings.Index(s, spaceSymbol)
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, ' ')
		s = s[i+len(spaceSymbol):]
	}
	return dst
}
