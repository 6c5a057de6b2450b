package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"lowbit/gguf"
	"lowbit/internal/safefile"
)

// Load reads the tokenizer of the model in dir: tokenizer.json when present, else
// tokenizer.model (SentencePiece, or Llama 3's tiktoken file), else vocab.json with
// merges.txt. BOS, EOS, the end-of-generation ids and add_bos come from
// tokenizer_config.json, special_tokens_map.json and generation_config.json when they
// say so, else from the tokenizer itself. A GGUF file (a path ending in .gguf) in
// place of dir is read by LoadGGUF.
func Load(dir string) (Tokenizer, error) {
	if gguf.IsFile(dir) {
		return loadGGUFPath(dir)
	}
	cfg, err := readTokenizerConfig(dir)
	if err != nil {
		return nil, err
	}
	t, err := loadVocabulary(dir, cfg)
	if err != nil {
		return nil, err
	}
	gen, err := readGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	sp := t.(interface{ base() *specials }).base()
	idOf := func(s string) int {
		if s == "" {
			return -1
		}
		for id := 0; id < t.VocabSize(); id++ { // once per load; vocabularies are < 1M
			if t.Piece(id) == s {
				return id
			}
		}
		return -1
	}
	if id := idOf(cfg.tokenString("bos_token")); id >= 0 {
		sp.bos = id
	} else if len(gen.bos) > 0 && gen.bos[0] < t.VocabSize() {
		sp.bos = gen.bos[0]
	}
	if id := idOf(cfg.tokenString("eos_token")); id >= 0 {
		sp.eos = id
	} else if len(gen.eos) > 0 && gen.eos[0] < t.VocabSize() {
		sp.eos = gen.eos[0]
	}
	if cfg.AddBOS != nil {
		sp.addBOS = *cfg.AddBOS && sp.bos >= 0
	} else if _, isSP := t.(*spModel); isSP {
		sp.addBOS = sp.bos >= 0 // LlamaTokenizer's default
	}
	ids := defaultEOSIDs(t, sp.eos)
	for _, id := range gen.eos {
		if id < t.VocabSize() && !containsInt(ids, id) {
			ids = append(ids, id)
		}
	}
	sp.eosIDs = ids
	return t, nil
}

// loadVocabulary reads the first vocabulary file of dir that Load looks for.
func loadVocabulary(dir string, cfg *tokenizerConfig) (Tokenizer, error) {
	jsonPath, modelPath := filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer.model")
	vocabPath, mergesPath := filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt")
	switch {
	case fileExists(jsonPath):
		return LoadHFJSON(jsonPath)
	case fileExists(modelPath):
		return loadTokenizerModel(modelPath, cfg)
	case fileExists(vocabPath) && fileExists(mergesPath):
		return loadVocabMerges(dir, cfg)
	}
	return nil, fmt.Errorf("tokenizer: %s has none of tokenizer.json, tokenizer.model, vocab.json with merges.txt", dir)
}

// loadTokenizerModel reads a tokenizer.model: SentencePiece protobuf or tiktoken text.
func loadTokenizerModel(path string, cfg *tokenizerConfig) (Tokenizer, error) {
	b, err := safefile.ReadFile(path, maxSentencePieceSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if looksLikeTiktoken(b) {
		added, err := cfg.addedTokens()
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", filepath.Join(filepath.Dir(path), "tokenizer_config.json"), err)
		}
		m, err := parseTiktoken(b, added)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: tiktoken: %w", path, err)
		}
		return m, nil
	}
	m, err := parseSentencePiece(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return m, nil
}

// loadVocabMerges reads vocab.json and merges.txt, with the added tokens and the
// tokenizer class of tokenizer_config.json.
func loadVocabMerges(dir string, cfg *tokenizerConfig) (Tokenizer, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	pattern, nfc, err := vocabMergesFlavor(cfg.TokenizerClass)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	added, err := cfg.addedTokens()
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	vocabPath, mergesPath := filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt")
	vb, err := safefile.ReadFile(vocabPath, maxVocabJSONSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	m, err := parseVocabJSON(vb, added)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s (with %s's added tokens): %w", vocabPath, cfgPath, err)
	}
	mb, err := safefile.ReadFile(mergesPath, maxMergesTextSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err := m.parseMergesText(mb); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", mergesPath, err)
	}
	m.setByteLevel(pattern, nfc)
	if pattern == nil && cfg.AddPrefixSpace {
		m.pre[0].addPrefix = true
	}
	m.finish()
	return m, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// tokenizerConfig is tokenizer_config.json merged with special_tokens_map.json.
type tokenizerConfig struct {
	AddBOS       *bool           `json:"add_bos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
	// For vocab.json + merges.txt, which say neither.
	TokenizerClass     string          `json:"tokenizer_class"`
	AddPrefixSpace     bool            `json:"add_prefix_space"`
	AddedTokensDecoder json.RawMessage `json:"added_tokens_decoder"`
	tokens             map[string]string
}

// Size limits of the files a tokenizer is read from: far above any real one
// (even a 256k-token tokenizer.json is tens of MB), so that a corrupt or hostile
// file is refused, naming it, instead of read without bound.
const (
	maxConfigSize        = 16 << 20 // tokenizer_config.json, special_tokens_map.json, generation_config.json, chat_template.jinja
	maxHFJSONSize        = 256 << 20
	maxSentencePieceSize = 64 << 20
)

func readTokenizerConfig(dir string) (*tokenizerConfig, error) {
	cfg := &tokenizerConfig{tokens: map[string]string{}}
	for _, name := range []string{"special_tokens_map.json", "tokenizer_config.json"} {
		path := filepath.Join(dir, name)
		b, err := safefile.ReadFile(path, maxConfigSize)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if err := cfg.merge(name, b); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
		}
	}
	return cfg, nil
}

// merge adds the tokens of one file (named name) to c; tokenizer_config.json
// also gives add_bos_token and the chat template.
func (c *tokenizerConfig) merge(name string, b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, k := range []string{"bos_token", "eos_token"} {
		if v, ok := raw[k]; ok {
			s, err := tokenContent(v)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			if s != "" {
				c.tokens[k] = s
			}
		}
	}
	if name == "tokenizer_config.json" {
		return json.Unmarshal(b, c)
	}
	return nil
}

// tokenContent reads a token given as "text" or as {"content": "text", ...} (or null).
func tokenContent(v json.RawMessage) (string, error) {
	var s *string
	if err := json.Unmarshal(v, &s); err == nil {
		if s == nil {
			return "", nil
		}
		return *s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(v, &obj); err != nil {
		return "", errors.New("neither a string nor an object with content")
	}
	return obj.Content, nil
}

func (c *tokenizerConfig) tokenString(k string) string { return c.tokens[k] }

// chatTemplate returns the template text: a string, or the "default" of a list of named ones.
func (c *tokenizerConfig) chatTemplate() (string, error) {
	if len(c.ChatTemplate) == 0 || string(c.ChatTemplate) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(c.ChatTemplate, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(c.ChatTemplate, &named); err != nil {
		return "", errors.New("neither a string nor a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New("no template named \"default\"")
}

type generationConfig struct{ bos, eos []int }

// readGenerationConfig reads bos_token_id and eos_token_id (an id or a list of ids).
func readGenerationConfig(dir string) (generationConfig, error) {
	path := filepath.Join(dir, "generation_config.json")
	b, err := safefile.ReadFile(path, maxConfigSize)
	if errors.Is(err, os.ErrNotExist) {
		return generationConfig{}, nil
	}
	if err != nil {
		return generationConfig{}, fmt.Errorf("tokenizer: %w", err)
	}
	g, err := parseGenerationConfig(b)
	if err != nil {
		return g, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return g, nil
}

// parseGenerationConfig reads generation_config.json; negative ids mean none.
func parseGenerationConfig(b []byte) (generationConfig, error) {
	var g generationConfig
	var raw struct {
		BOS json.RawMessage `json:"bos_token_id"`
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return g, err
	}
	ids := func(v json.RawMessage, field string) ([]int, error) {
		if len(v) == 0 || string(v) == "null" {
			return nil, nil
		}
		var one int
		if err := json.Unmarshal(v, &one); err == nil {
			if one < 0 {
				return nil, nil
			}
			return []int{one}, nil
		}
		var many []int
		if err := json.Unmarshal(v, &many); err != nil {
			return nil, fmt.Errorf("%s is neither an id nor a list of ids", field)
		}
		var out []int
		for _, id := range many {
			if id >= 0 {
				out = append(out, id)
			}
		}
		return out, nil
	}
	var err error
	if g.bos, err = ids(raw.BOS, "bos_token_id"); err != nil {
		return g, err
	}
	g.eos, err = ids(raw.EOS, "eos_token_id")
	return g, err
}
