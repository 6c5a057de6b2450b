package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"lowbit/gguf"
	"lowbit/internal/safefile"
)

// This file writes a model's tokenizer as GGUF metadata, the keys LoadGGUF
// (and llama.cpp) read: a SentencePiece model as a "llama" vocabulary
// (pieces, scores, types), a byte-level BPE as a "gpt2" one (tokens, types,
// merges and the pre-tokenizer's name), the special ids, add_bos and the
// chat template. The vocabulary is padded to the model's embedding rows with
// unused [PADn] tokens, as llama.cpp's converter pads it.

// GGUFMetadata is the tokenizer of the model in dir as GGUF metadata, for
// a model of vocabSize embedding rows. A tokenizer.model SentencePiece file
// is written as it is (llama.cpp's converter prefers it too), with the
// tokens tokenizer_config.json adds; a tokenizer.json BPE in SentencePiece's
// manner (Llama 2's, the fixtures') becomes a "llama" vocabulary whose
// scores rank pieces as its merges do; a byte-level BPE becomes a "gpt2"
// one where its pre-tokenizer is one GGUF names (gpt-2, llama-bpe, qwen2).
// The notes say what GGUF cannot carry (more end-of-generation ids than
// eot and eom).
func GGUFMetadata(dir string, vocabSize int) (kvs []gguf.KV, notes []string, err error) {
	t, err := Load(dir)
	if err != nil {
		return nil, nil, err
	}
	if t.VocabSize() > vocabSize {
		return nil, nil, fmt.Errorf("tokenizer: %s: %d tokens, more than the model's %d embedding rows: GGUF needs one row per token", dir, t.VocabSize(), vocabSize)
	}
	m := metaKVs{}
	var unk int
	if sp, ok, err := sentencePieceFile(dir); err != nil {
		return nil, nil, err
	} else if ok {
		unk, err = m.sentencePiece(sp, dir, vocabSize)
		if err != nil {
			return nil, nil, err
		}
	} else {
		switch v := t.(type) {
		case *hfModel:
			unk, err = m.hf(v, vocabSize)
		case *spModel:
			unk, err = m.sentencePiece(v, dir, vocabSize)
		default:
			err = fmt.Errorf("a %T has no GGUF form", t)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("tokenizer: %s: %w", dir, err)
		}
	}
	if id := t.BOS(); id >= 0 {
		m.add(ggufBOSKey, uint32(id))
	}
	if id := t.EOS(); id >= 0 {
		m.add(ggufEOSKey, uint32(id))
	}
	var extra []int
	for _, id := range t.EOSIDs() {
		if id != t.EOS() {
			extra = append(extra, id)
		}
	}
	for i, key := range []string{ggufEOTKey, ggufEOMKey} {
		if i < len(extra) {
			m.add(key, uint32(extra[i]))
		}
	}
	if len(extra) > 2 {
		notes = append(notes, fmt.Sprintf("the tokenizer ends generation at %d ids; GGUF names eos, eot and eom (%v): llama.cpp recognizes the others only by their text", len(extra)+1, extra[:2]))
	}
	if unk >= 0 {
		m.add(ggufUnkKey, uint32(unk))
	}
	m.add(ggufAddBOSKey, AddBOS(t))
	tpl, err := LoadChatTemplate(dir)
	if err != nil {
		return nil, nil, err
	}
	if tpl != nil {
		m.add(ggufTemplateKey, tpl.Source)
	}
	if m.err != nil {
		return nil, nil, m.err
	}
	return m.list, notes, nil
}

// sentencePieceFile reads dir's tokenizer.model when it is a SentencePiece
// model (not Llama 3's tiktoken file of the same name).
func sentencePieceFile(dir string) (*spModel, bool, error) {
	path := filepath.Join(dir, "tokenizer.model")
	b, err := safefile.ReadFile(path, maxSentencePieceSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("tokenizer: %w", err)
	}
	if looksLikeTiktoken(b) {
		return nil, false, nil
	}
	m, err := parseSentencePiece(b)
	if err != nil {
		return nil, false, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return m, true, nil
}

// padToken is the text of an id no token has, as llama.cpp's converter
// names it.
func padToken(id int) string { return fmt.Sprintf("[PAD%d]", id) }

// sentencePiece writes a SentencePiece model as a "llama" vocabulary, with
// the added tokens of dir's tokenizer_config.json over its pieces (control
// where special, else user-defined), and returns its unknown id.
func (m *metaKVs) sentencePiece(sp *spModel, dir string, vocabSize int) (int, error) {
	n := max(vocabSize, len(sp.pieces))
	tokens := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for id := range n {
		tokens[id], scores[id], types[id] = padToken(id), -1000, spUnused
	}
	for id, p := range sp.pieces {
		tokens[id], scores[id], types[id] = p.text, p.score, int32(p.typ)
	}
	cfg, err := readTokenizerConfig(dir)
	if err != nil {
		return 0, err
	}
	added, err := cfg.addedTokens()
	if err != nil {
		return 0, fmt.Errorf("tokenizer: %s: %w", filepath.Join(dir, "tokenizer_config.json"), err)
	}
	for _, a := range added {
		if a.ID >= n {
			return 0, fmt.Errorf("tokenizer: %s: added token %q has id %d, past the %d-token vocabulary", dir, a.Content, a.ID, n)
		}
		tokens[a.ID], scores[a.ID], types[a.ID] = a.Content, -1000, spUserDefined
		if a.Special {
			types[a.ID] = spControl
		}
	}
	m.add(ggufModelKey, "llama")
	m.add(ggufPreKey, "default")
	m.add(ggufTokensKey, tokens)
	m.add(ggufScoresKey, scores)
	m.add(ggufTypesKey, types)
	m.add(ggufAddSpaceKey, sp.dummyPrefix)
	return sp.unkID, nil
}

// hf writes a tokenizer.json (or vocab.json and merges.txt) BPE: byte-level
// as "gpt2", SentencePiece-like as "llama". It returns the unknown id.
func (m *metaKVs) hf(h *hfModel, vocabSize int) (int, error) {
	n := max(vocabSize, len(h.pieces))
	tokens := make([]string, n)
	types := make([]int32, n)
	named := make([]bool, n)
	for s, id := range h.vocab {
		tokens[id], types[id], named[id] = s, spNormal, true
	}
	for _, a := range h.added {
		tokens[a.ID], types[a.ID], named[a.ID] = a.Content, spUserDefined, true
		if a.Special {
			types[a.ID] = spControl
		}
	}
	for id := range n {
		if !named[id] {
			tokens[id], types[id] = padToken(id), spUnused
		}
	}
	merges := h.mergeList()
	if h.byteLevel {
		pre, err := h.ggufPre()
		if err != nil {
			return 0, err
		}
		texts := make([]string, len(merges))
		for i, k := range merges {
			texts[i] = h.pieces[k.a] + " " + h.pieces[k.b]
		}
		m.add(ggufModelKey, "gpt2")
		m.add(ggufPreKey, pre)
		m.add(ggufTokensKey, tokens)
		m.add(ggufTypesKey, types)
		m.add(ggufMergesKey, texts)
		return h.unk, nil
	}
	return m.hfSentencePiece(h, tokens, types, merges)
}

// hfSentencePiece writes a SentencePiece-like BPE (pieces with ▁ for
// spaces, merged in rank order) as a "llama" vocabulary: SentencePiece
// merges the adjacent pair whose result scores highest, so a merge's
// result scores minus its rank, and every other piece less than any merge.
func (m *metaKVs) hfSentencePiece(h *hfModel, tokens []string, types []int32, merges []mergeKey) (int, error) {
	if len(h.pre) > 1 || len(h.pre) == 1 && h.pre[0].kind != "metaspace" {
		return 0, errors.New("a BPE that is neither byte-level nor SentencePiece's (▁ for spaces) has no GGUF form lowbit writes")
	}
	prefix := false
	for _, s := range h.norm {
		if s.kind == "prepend" && s.a == spaceSymbol {
			prefix = true
		}
	}
	if len(h.pre) == 1 && h.pre[0].prepend != "never" {
		prefix = true
	}
	scores := make([]float32, len(tokens))
	for id := range scores {
		scores[id] = -float32(len(merges) + id)
	}
	for rank := len(merges) - 1; rank >= 0; rank-- {
		k := merges[rank]
		scores[h.vocab[h.pieces[k.a]+h.pieces[k.b]]] = -float32(rank)
	}
	if h.byteFB {
		for _, id := range h.byteIDs() {
			if id >= 0 {
				types[id] = spByte
			}
		}
	}
	if h.unk >= 0 {
		types[h.unk] = spUnknown
	}
	m.add(ggufModelKey, "llama")
	m.add(ggufPreKey, "default")
	m.add(ggufTokensKey, tokens)
	m.add(ggufScoresKey, scores)
	m.add(ggufTypesKey, types)
	m.add(ggufAddSpaceKey, prefix)
	return h.unk, nil
}

// mergeList lists the merges in rank order. Where several share a rank
// (a tiktoken vocabulary, whose every split of a token is a merge of the
// token's rank) it lists one per token instead: the split tiktoken's own
// merging of the token's bytes ends in, as a tokenizer.json of the same
// vocabulary lists it.
func (h *hfModel) mergeList() []mergeKey {
	type ranked struct {
		k mergeKey
		v mergeVal
	}
	all := make([]ranked, 0, len(h.merges))
	shared := false
	idOf := make(map[int32]int32, len(h.merges)) // rank -> the token it makes
	for k, v := range h.merges {
		all = append(all, ranked{k, v})
		_, dup := idOf[v.rank]
		shared = shared || dup
		idOf[v.rank] = v.id
	}
	if !shared {
		slices.SortFunc(all, func(a, b ranked) int { return int(a.v.rank - b.v.rank) })
		out := make([]mergeKey, len(all))
		for i, r := range all {
			out[i] = r.k
		}
		return out
	}
	ranks := make([]int32, 0, len(idOf))
	for r := range idOf {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	var out []mergeKey
	for _, rank := range ranks {
		if k, ok := h.lastMerge(int(idOf[rank]), rank); ok {
			out = append(out, k)
		}
	}
	return out
}

// lastMerge merges the characters of token id as tiktoken does (the
// adjacent pair of lowest rank first, ranks below rank only) and returns
// the last merge when two parts remain.
func (h *hfModel) lastMerge(id int, rank int32) (mergeKey, bool) {
	var parts []string
	for _, r := range h.pieces[id] {
		parts = append(parts, string(r))
	}
	for len(parts) > 2 {
		best, bestRank := -1, rank
		for i := 0; i+1 < len(parts); i++ {
			if k, ok := h.mergeOf(parts[i], parts[i+1]); ok && k.rank < bestRank {
				best, bestRank = i, k.rank
			}
		}
		if best < 0 {
			return mergeKey{}, false
		}
		parts = slices.Replace(parts, best, best+2, parts[best]+parts[best+1])
	}
	if len(parts) != 2 {
		return mergeKey{}, false
	}
	a, okA := h.vocab[parts[0]]
	b, okB := h.vocab[parts[1]]
	return mergeKey{int32(a), int32(b)}, okA && okB
}

// mergeOf is the merge of two tokens given by their text.
func (h *hfModel) mergeOf(a, b string) (mergeVal, bool) {
	ia, okA := h.vocab[a]
	ib, okB := h.vocab[b]
	if !okA || !okB {
		return mergeVal{}, false
	}
	v, ok := h.merges[mergeKey{int32(ia), int32(ib)}]
	return v, ok
}

// byteIDs is the id of each <0xXX> token, -1 where there is none.
func (h *hfModel) byteIDs() [256]int {
	var ids [256]int
	for v := range ids {
		ids[v] = -1
		if id, ok := h.vocab[fmt.Sprintf("<0x%02X>", v)]; ok {
			ids[v] = id
		}
	}
	return ids
}

// ggufPre names a byte-level BPE's pre-tokenizer as llama.cpp's
// tokenizer.ggml.pre does, for the patterns this package implements.
func (h *hfModel) ggufPre() (string, error) {
	nfc := len(h.norm) == 1 && h.norm[0].kind == "nfc"
	switch {
	case len(h.norm) > 0 && !nfc:
	case len(h.pre) == 1 && h.pre[0].kind == "bytelevel" && h.pre[0].useRegex && !h.pre[0].addPrefix && !nfc:
		return "gpt-2", nil
	case len(h.pre) == 2 && h.pre[0].kind == "split" && h.pre[0].behavior == "Isolated" && !h.pre[0].invert &&
		h.pre[1].kind == "bytelevel" && !h.pre[1].useRegex && !h.pre[1].addPrefix:
		switch h.pre[0].m {
		case wordMatcher{llama3: true, digits: 3}:
			if !nfc {
				return "llama-bpe", nil
			}
		case wordMatcher{llama3: true, digits: 1}:
			if nfc {
				return "qwen2", nil
			}
		}
	}
	return "", errors.New("the byte-level pre-tokenizer is not one GGUF names that lowbit knows (gpt-2, llama-bpe, qwen2)")
}

// metaKVs collects metadata, keeping the first error.
type metaKVs struct {
	list []gguf.KV
	err  error
}

func (m *metaKVs) add(key string, v any) {
	val, err := gguf.ValueOf(v)
	if err != nil {
		if m.err == nil {
			m.err = fmt.Errorf("tokenizer: gguf key %s: %w", key, err)
		}
		return
	}
	m.list = append(m.list, gguf.KV{Key: key, Value: val})
}
