package tokenizer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Byte-level BPE vocabularies shipped without a tokenizer.json: Meta's tiktoken
// tokenizer.model (Llama 3) and vocab.json + merges.txt (GPT-2, Qwen2/2.5/3). Both become
// the hfModel that the tokenizer.json of the same model would give, so encoding follows
// the tokenizers crate as that one does.

// Limits of these files, many times the real ones (a few MB each, tokens of at most a
// few hundred bytes). A token's length bounds the work of deriving its merges (each split
// is a lookup).
const (
	maxTiktokenSize    = 16 << 20
	maxTiktokenToken   = 256
	maxVocabJSONSize   = 64 << 20
	maxMergesTextSize  = 64 << 20
	llama3RankCount    = 128000
	llama3SpecialCount = 256
)

// llama3Specials are the special tokens Llama 3 puts after the 128000 ranks of its
// tokenizer.model, in id order from 128000, as Meta's reference tokenizer defines them
// (github.com/meta-llama/llama-models, models/llama3/tokenizer.py: special_tokens, then
// <|reserved_special_token_N|> from N = 2 up to 256 tokens in all).
func llama3Specials() []string {
	s := []string{
		"<|begin_of_text|>",
		"<|end_of_text|>",
		"<|reserved_special_token_0|>",
		"<|reserved_special_token_1|>",
		"<|finetune_right_pad_id|>",
		"<|step_id|>",
		"<|start_header_id|>",
		"<|end_header_id|>",
		"<|eom_id|>",
		"<|eot_id|>",
		"<|python_tag|>",
		"<|image|>",
	}
	for i := 2; len(s) < llama3SpecialCount; i++ {
		s = append(s, fmt.Sprintf("<|reserved_special_token_%d|>", i))
	}
	return s
}

// looksLikeTiktoken reports whether a tokenizer.model starts with a tiktoken line
// ("base64 rank"); a SentencePiece model is protobuf and starts with a field tag.
func looksLikeTiktoken(b []byte) bool {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	tok, rank, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\r")), []byte(" "))
	if !ok || len(tok) == 0 || len(rank) == 0 {
		return false
	}
	for _, c := range tok {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	return rank[0] >= '0' && rank[0] <= '9'
}

// parseTiktoken reads Llama 3's tiktoken tokenizer.model. Its pre-tokenizer pattern and
// special tokens live in Meta's code, not in the file, so other tiktoken files (other
// rank counts) are refused. The special tokens are added (tokenizer_config.json's
// added_tokens_decoder, whose names of the reserved tokens differ between Llama 3
// releases), else Meta's.
func parseTiktoken(b []byte, added []hfAdded) (*hfModel, error) {
	tokens, err := parseTiktokenRanks(b)
	if err != nil {
		return nil, err
	}
	if len(tokens) != llama3RankCount {
		return nil, fmt.Errorf("%d ranks: only Llama 3's tiktoken file (%d ranks) is known", len(tokens), llama3RankCount)
	}
	if len(added) == 0 {
		for i, s := range llama3Specials() {
			added = append(added, hfAdded{ID: llama3RankCount + i, Content: s, Special: true})
		}
	}
	m, err := tiktokenModel(tokens, added, wordMatcher{llama3: true, digits: 3})
	if err != nil {
		return nil, err
	}
	m.bos, m.addBOS = llama3RankCount, true // <|begin_of_text|>
	return m, nil
}

// parseTiktokenRanks reads a tiktoken file: one "base64-token rank" per line, the ranks
// 0..n-1 each once, every single byte a token. It returns the tokens by rank.
func parseTiktokenRanks(b []byte) ([]string, error) {
	if len(b) > maxTiktokenSize {
		return nil, fmt.Errorf("%d bytes is over the %d MiB limit of a tiktoken file", len(b), maxTiktokenSize>>20)
	}
	lines := strings.Split(string(b), "\n")
	n := 0
	for _, l := range lines {
		if strings.TrimSuffix(l, "\r") != "" {
			n++
		}
	}
	tokens := make([]string, n) // rank -> token bytes
	rankOf := make(map[string]int, n)
	for i, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		if l == "" {
			continue
		}
		tok, rank, err := parseTiktokenLine(l, n)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if tokens[rank] != "" {
			return nil, fmt.Errorf("line %d: rank %d given twice", i+1, rank)
		}
		if r, dup := rankOf[tok]; dup {
			return nil, fmt.Errorf("line %d: token %q already has rank %d", i+1, tok, r)
		}
		tokens[rank] = tok
		rankOf[tok] = rank
	}
	for c := 0; c < 256; c++ {
		if _, ok := rankOf[string([]byte{byte(c)})]; !ok {
			return nil, fmt.Errorf("no token for the byte 0x%02X (every byte needs one)", c)
		}
	}
	return tokens, nil
}

// tiktokenModel is the byte-level BPE of tiktoken ranks (tokens by rank), with the
// added tokens and the pre-tokenizer pattern.
func tiktokenModel(tokens []string, added []hfAdded, pattern matcher) (*hfModel, error) {
	b2u, _ := bytesToUnicode()
	vocab := make(map[string]int, len(tokens))
	rankOf := make(map[string]int, len(tokens))
	for rank, tok := range tokens {
		vocab[byteLevelString(&b2u, tok)] = rank
		rankOf[tok] = rank
	}
	m, err := newHFModel(vocab, added)
	if err != nil {
		return nil, err
	}
	// tiktoken merges the adjacent pair whose concatenation has the lowest rank: BPE
	// with a merge for every split of every token into two tokens, ranked by the token.
	for rank, tok := range tokens {
		for k := 1; k < len(tok); k++ {
			a, okA := rankOf[tok[:k]]
			c, okC := rankOf[tok[k:]]
			if okA && okC {
				m.merges[mergeKey{int32(a), int32(c)}] = mergeVal{int32(rank), int32(rank)}
			}
		}
	}
	// tiktoken takes a word that is a token whole, as tokenizers' ignore_merges does.
	m.ignoreMg = true
	m.setByteLevel(pattern, false)
	m.finish()
	return m, nil
}

func parseTiktokenLine(l string, ranks int) (string, int, error) {
	enc, num, ok := strings.Cut(l, " ")
	if !ok || strings.Contains(num, " ") {
		return "", 0, fmt.Errorf("%.40q is not \"base64-token rank\"", l)
	}
	tok, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(tok) == 0 {
		return "", 0, fmt.Errorf("token %.40q is not base64 of one or more bytes", enc)
	}
	if len(tok) > maxTiktokenToken {
		return "", 0, fmt.Errorf("token of %d bytes is over the %d-byte limit", len(tok), maxTiktokenToken)
	}
	rank, err := strconv.Atoi(num)
	if err != nil || rank < 0 || rank >= ranks {
		return "", 0, fmt.Errorf("rank %.20q is not a number in 0..%d (the file has %d tokens)", num, ranks-1, ranks)
	}
	return string(tok), rank, nil
}

// byteLevelString is tok in GPT-2's byte-to-rune alphabet, as byte-level vocabularies write tokens.
func byteLevelString(b2u *[256]rune, tok string) string {
	var sb strings.Builder
	for i := 0; i < len(tok); i++ {
		sb.WriteRune(b2u[tok[i]])
	}
	return sb.String()
}

// setByteLevel gives m the byte-level pipeline: words split by the pattern, then mapped
// to GPT-2's byte alphabet. A nil pattern is GPT-2's own (tokenizers' ByteLevel with
// use_regex); nfc normalizes the text first (Qwen2).
func (m *hfModel) setByteLevel(pattern matcher, nfc bool) {
	m.norm, m.pre = nil, nil
	if nfc {
		m.norm = []normStep{{kind: "nfc"}}
	}
	if pattern == nil {
		m.pre = []preStep{{kind: "bytelevel", useRegex: true, m: wordMatcher{}}}
	} else {
		m.pre = []preStep{{kind: "split", m: pattern, behavior: "Isolated"}, {kind: "bytelevel"}}
	}
	m.dec = []decStep{{kind: "bytelevel"}}
}

// vocabMergesFlavor is what tokenizer_config.json's tokenizer_class says about a
// vocab.json + merges.txt vocabulary: its pre-tokenizer pattern and normalizer, as
// transformers' GPT2Tokenizer and Qwen2Tokenizer set them.
func vocabMergesFlavor(class string) (pattern matcher, nfc bool, err error) {
	switch strings.TrimSuffix(class, "Fast") {
	case "", "GPT2Tokenizer":
		return nil, false, nil
	case "Qwen2Tokenizer":
		return wordMatcher{llama3: true, digits: 1}, true, nil
	}
	return nil, false, fmt.Errorf("tokenizer_class %q is not supported with vocab.json + merges.txt (only GPT2Tokenizer and Qwen2Tokenizer)", class)
}

// parseVocabJSON reads vocab.json: token -> id.
func parseVocabJSON(b []byte, added []hfAdded) (*hfModel, error) {
	var vocab map[string]int
	if err := json.Unmarshal(b, &vocab); err != nil {
		return nil, err
	}
	if vocab == nil {
		return nil, errors.New("not an object of token: id")
	}
	return newHFModel(vocab, added)
}

// parseMergesText adds the merges of merges.txt to m: one "a b" per line, ranked in
// order, an optional "#version" first line and blank lines skipped (as transformers reads it).
func (m *hfModel) parseMergesText(b []byte) error {
	rank := 0
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || (i == 0 && strings.HasPrefix(l, "#version")) {
			continue
		}
		a, c, ok := strings.Cut(l, " ")
		if !ok || a == "" || c == "" || strings.Contains(c, " ") {
			return fmt.Errorf("line %d: %.40q is not two tokens separated by a space", i+1, l)
		}
		if err := m.addMerge(a, c, rank); err != nil {
			return fmt.Errorf("line %d: merge %w", i+1, err)
		}
		rank++
	}
	return nil
}

// addedTokens reads tokenizer_config.json's added_tokens_decoder (id -> token), the
// special and added tokens of a vocabulary that has no tokenizer.json to list them.
func (c *tokenizerConfig) addedTokens() ([]hfAdded, error) {
	if len(c.AddedTokensDecoder) == 0 || string(c.AddedTokensDecoder) == "null" {
		return nil, nil
	}
	var dec map[string]hfAdded
	if err := json.Unmarshal(c.AddedTokensDecoder, &dec); err != nil {
		return nil, fmt.Errorf("added_tokens_decoder: %w", err)
	}
	var out []hfAdded
	for k, a := range dec {
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("added_tokens_decoder: key %.20q is not an id", k)
		}
		a.ID = id
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
