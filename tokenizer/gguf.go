package tokenizer

import (
	"errors"
	"fmt"
	"strings"

	"lowbit/gguf"
)

// This file builds a tokenizer from the metadata of a GGUF file, where
// llama.cpp's converter stores the vocabulary: tokenizer.ggml.model names the
// kind ("llama": SentencePiece BPE; "gpt2": byte-level BPE), and arrays give
// the tokens, their scores, types and the merges. The tokenizer follows
// llama.cpp's reading of those keys (its defaults, its special ids, its
// pre-tokenizer names), built on this package's own SentencePiece and
// byte-level BPE encoders.

// GGUF metadata keys of the tokenizer.
const (
	ggufModelKey     = "tokenizer.ggml.model"
	ggufPreKey       = "tokenizer.ggml.pre"
	ggufTokensKey    = "tokenizer.ggml.tokens"
	ggufScoresKey    = "tokenizer.ggml.scores"
	ggufTypesKey     = "tokenizer.ggml.token_type"
	ggufMergesKey    = "tokenizer.ggml.merges"
	ggufBOSKey       = "tokenizer.ggml.bos_token_id"
	ggufEOSKey       = "tokenizer.ggml.eos_token_id"
	ggufEOTKey       = "tokenizer.ggml.eot_token_id"
	ggufEOMKey       = "tokenizer.ggml.eom_token_id"
	ggufUnkKey       = "tokenizer.ggml.unknown_token_id"
	ggufAddBOSKey    = "tokenizer.ggml.add_bos_token"
	ggufAddEOSKey    = "tokenizer.ggml.add_eos_token"
	ggufAddSpaceKey  = "tokenizer.ggml.add_space_prefix"
	ggufTemplateKey  = "tokenizer.chat_template"
	ggufUnknownPiece = "\u2585" // ▅: what llama.cpp prints for an unknown token
)

// LoadGGUF builds the tokenizer a GGUF file's metadata describes, as llama.cpp
// reads it: "llama" vocabularies (SentencePiece BPE: tokens, scores, token
// types, a space prefix unless tokenizer.ggml.add_space_prefix is false,
// every byte piece for byte fallback) and "gpt2" ones (byte-level BPE: tokens,
// merges, token types, and the pre-tokenizer that tokenizer.ggml.pre names;
// control and user-defined tokens are read in text as added tokens). BOS, EOS,
// the end-of-turn ids (eot, eom) and add_bos/add_eos come from their keys,
// else llama.cpp's defaults. Every length and id is checked against the
// vocabulary; an error names the key at fault.
func LoadGGUF(f *gguf.File) (Tokenizer, error) {
	t, err := loadGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// loadGGUFPath is LoadGGUF of the file at path.
func loadGGUFPath(path string) (Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := loadGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// ggufChatTemplate reads tokenizer.chat_template of the GGUF file at path,
// with the texts of its BOS and EOS tokens; nil, nil when it has none.
func ggufChatTemplate(path string) (*ChatTemplate, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	if _, ok := f.Value(ggufTemplateKey); !ok {
		return nil, nil
	}
	src, err := f.String(ggufTemplateKey)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	t, err := loadGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	c, err := NewChatTemplate(src, t.Piece(t.BOS()), t.Piece(t.EOS()))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: key %q: %w", path, ggufTemplateKey, err)
	}
	c.path = path
	return c, nil
}

// ggufBase is what LoadGGUF builds: one of this package's tokenizers.
type ggufBase interface {
	streamer
	base() *specials
}

// ggufVocab is the vocabulary arrays shared by both kinds.
type ggufVocab struct {
	tokens []string
	scores []float32 // nil when the file has none
	types  []int     // llama.cpp's token types, normal where the file has none
}

func loadGGUF(f *gguf.File) (Tokenizer, error) {
	kind, err := f.String(ggufModelKey)
	if err != nil {
		return nil, err
	}
	v, err := readGGUFVocab(f)
	if err != nil {
		return nil, err
	}
	var t ggufBase
	var bos, eos int
	var addBOS bool
	switch kind {
	case "llama":
		// llama.cpp's defaults for a SentencePiece vocabulary.
		bos, eos, addBOS = 1, 2, true
		t, err = ggufSentencePiece(f, v)
	case "gpt2":
		// llama.cpp's defaults for a byte-level BPE one; the pre-tokenizer
		// may ask for BOS.
		bos, eos = 11, 11
		t, addBOS, err = ggufByteBPE(f, v)
	default:
		return nil, fmt.Errorf("key %q: tokenizer %q is not supported (only \"llama\", SentencePiece, and \"gpt2\", byte-level BPE)", ggufModelKey, kind)
	}
	if err != nil {
		return nil, err
	}
	n := len(v.tokens)
	inVocab := func(id int) int {
		if id >= n {
			return -1
		}
		return id
	}
	sp := t.base()
	sp.bos, sp.eos = inVocab(bos), inVocab(eos)
	if sp.bos, err = ggufID(f, ggufBOSKey, n, sp.bos); err != nil {
		return nil, err
	}
	if sp.eos, err = ggufID(f, ggufEOSKey, n, sp.eos); err != nil {
		return nil, err
	}
	if addBOS, err = ggufBool(f, ggufAddBOSKey, addBOS); err != nil {
		return nil, err
	}
	sp.addBOS = addBOS && sp.bos >= 0
	var ids []int
	for _, key := range []string{ggufEOTKey, ggufEOMKey} {
		id, err := ggufID(f, key, n, -1)
		if err != nil {
			return nil, err
		}
		if id >= 0 {
			ids = append(ids, id)
		}
	}
	sp.eosIDs = defaultEOSIDs(t, sp.eos)
	for _, id := range ids {
		if !containsInt(sp.eosIDs, id) {
			sp.eosIDs = append(sp.eosIDs, id)
		}
	}
	addEOS, err := ggufBool(f, ggufAddEOSKey, false)
	if err != nil {
		return nil, err
	}
	if addEOS && sp.eos >= 0 {
		return withEOS{t}, nil
	}
	return t, nil
}

// withEOS appends EOS to what Encode gives with special tokens
// (tokenizer.ggml.add_eos_token), as llama.cpp does.
type withEOS struct{ ggufBase }

// Encode tokenizes text; with addBOS the special tokens go in front and EOS at the end.
func (t withEOS) Encode(text string, addBOS bool) ([]int, error) {
	ids, err := t.ggufBase.Encode(text, addBOS)
	if err != nil || !addBOS {
		return ids, err
	}
	return append(ids, t.EOS()), nil
}

// readGGUFVocab reads the tokens, and the scores and token types when present,
// each as long as the tokens.
func readGGUFVocab(f *gguf.File) (ggufVocab, error) {
	var v ggufVocab
	var err error
	if v.tokens, err = f.Strings(ggufTokensKey); err != nil {
		return v, err
	}
	n := len(v.tokens)
	if n == 0 || n > maxTokenID {
		return v, fmt.Errorf("key %q: %d tokens (want 1 to %d)", ggufTokensKey, n, maxTokenID)
	}
	if _, ok := f.Value(ggufScoresKey); ok {
		if v.scores, err = f.Float32s(ggufScoresKey); err != nil {
			return v, err
		}
		if len(v.scores) != n {
			return v, fmt.Errorf("key %q: %d scores for %d tokens", ggufScoresKey, len(v.scores), n)
		}
	}
	v.types = make([]int, n)
	if _, ok := f.Value(ggufTypesKey); !ok {
		for i := range v.types {
			v.types[i] = spNormal
		}
		return v, nil
	}
	types, err := f.Ints(ggufTypesKey)
	if err != nil {
		return v, err
	}
	if len(types) != n {
		return v, fmt.Errorf("key %q: %d token types for %d tokens", ggufTypesKey, len(types), n)
	}
	for i, typ := range types {
		// llama.cpp's token types are SentencePiece's piece types.
		if typ < spNormal || typ > spByte {
			return v, fmt.Errorf("key %q: token %d has type %d (want 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused or 6 byte)", ggufTypesKey, i, typ)
		}
		v.types[i] = int(typ)
	}
	return v, nil
}

// ggufID reads the token id under key, def when the file has none.
func ggufID(f *gguf.File, key string, n, def int) (int, error) {
	if _, ok := f.Value(key); !ok {
		return def, nil
	}
	id, err := f.Int(key)
	if err != nil {
		return 0, err
	}
	if id < 0 || id >= int64(n) {
		return 0, fmt.Errorf("key %q: token id %d is not in the vocabulary of %d tokens", key, id, n)
	}
	return int(id), nil
}

// ggufBool reads the bool under key, def when the file has none.
func ggufBool(f *gguf.File, key string, def bool) (bool, error) {
	if _, ok := f.Value(key); !ok {
		return def, nil
	}
	return f.Bool(key)
}

// ggufSentencePiece is a "llama" vocabulary as llama.cpp tokenizes it: text
// with its spaces as ▁ (none removed), a ▁ in front unless add_space_prefix
// is false, merges by score, and bytes for what no piece covers.
func ggufSentencePiece(f *gguf.File, v ggufVocab) (*spModel, error) {
	addSpace, err := ggufBool(f, ggufAddSpaceKey, true)
	if err != nil {
		return nil, err
	}
	m := &spModel{
		ids: map[string]int{}, reserved: map[string]int{},
		dummyPrefix: addSpace, escapeWS: true,
		unkSurface: ggufUnknownPiece,
	}
	m.pieces = make([]spPiece, len(v.tokens))
	for i, s := range v.tokens {
		m.pieces[i] = spPiece{text: s, typ: v.types[i]}
		if v.scores != nil {
			m.pieces[i].score = v.scores[i]
		}
	}
	if err := m.indexPieces(); err != nil {
		return nil, fmt.Errorf("keys %q and %q: %w", ggufTokensKey, ggufTypesKey, err)
	}
	// llama.cpp's unknown id is its key's, else 0, whatever the type of that
	// token; it falls back to bytes when a piece is missing.
	if m.unkID, err = ggufID(f, ggufUnkKey, len(v.tokens), 0); err != nil {
		return nil, err
	}
	m.byteFallbck = true
	for _, id := range m.byteIDs {
		if id < 0 {
			m.byteFallbck = false
		}
	}
	if err := m.finishPieces(); err != nil {
		return nil, err
	}
	return m, nil
}

// ggufByteBPE is a "gpt2" vocabulary: byte-level BPE with the pre-tokenizer
// tokenizer.ggml.pre names (llama.cpp's names, those whose pattern this
// package has). It also returns llama.cpp's default of add_bos for that
// pre-tokenizer.
func ggufByteBPE(f *gguf.File, v ggufVocab) (*hfModel, bool, error) {
	pre, err := f.String(ggufPreKey)
	if errors.Is(err, gguf.ErrNoKey) {
		return nil, false, fmt.Errorf("key %q is missing: llama.cpp's \"default\" pre-tokenizer is not supported (only gpt-2, llama-bpe and qwen2)", ggufPreKey)
	}
	if err != nil {
		return nil, false, err
	}
	var pattern matcher
	var nfc, ignoreMerges, addBOS bool
	switch pre {
	case "gpt-2", "phi-2":
		// GPT-2's own pattern (nil).
	case "llama3", "llama-v3", "llama-bpe":
		pattern, ignoreMerges, addBOS = wordMatcher{llama3: true, digits: 3}, true, true
	case "qwen2", "deepseek-r1-qwen":
		// NFC first, as Qwen2's tokenizer.json does.
		pattern, nfc = wordMatcher{llama3: true, digits: 1}, true
	default:
		return nil, false, fmt.Errorf("key %q: pre-tokenizer %q is not supported (only gpt-2, phi-2, llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen)", ggufPreKey, pre)
	}
	merges, err := f.Strings(ggufMergesKey)
	if err != nil {
		return nil, false, err
	}
	vocab := make(map[string]int, len(v.tokens))
	var added []hfAdded
	for id, s := range v.tokens {
		vocab[s] = id // a repeated token is its last id, as in llama.cpp
		if (v.types[id] == spControl || v.types[id] == spUserDefined) && s != "" {
			added = append(added, hfAdded{ID: id, Content: s, Special: v.types[id] == spControl})
		}
	}
	m, err := newHFModel(vocab, added)
	if err != nil {
		return nil, false, fmt.Errorf("key %q: %w", ggufTokensKey, err)
	}
	copy(m.pieces, v.tokens) // the ids of repeated tokens keep their text
	m.ignoreMg = ignoreMerges
	if m.unk, err = ggufID(f, ggufUnkKey, len(v.tokens), -1); err != nil {
		return nil, false, err
	}
	for rank, s := range merges {
		// llama.cpp splits at the first space after the first byte.
		i := -1
		if len(s) > 1 {
			i = strings.IndexByte(s[1:], ' ')
		}
		if i < 0 {
			return nil, false, fmt.Errorf("key %q: merge %d, %.40q, is not two tokens separated by a space", ggufMergesKey, rank, s)
		}
		if err := m.addMerge(s[:i+1], s[i+2:], rank); err != nil {
			return nil, false, fmt.Errorf("key %q: merge %d %w", ggufMergesKey, rank, err)
		}
	}
	m.setByteLevel(pattern, nfc)
	m.finish()
	return m, addBOS, nil
}
