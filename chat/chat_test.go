package chat

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"lowbit/internal/fixture"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/tokenizer"
)

// pieceTok is a tokenizer whose ids are fixed strings, to drive the stream.
type pieceTok []string

func (p pieceTok) Encode(string, bool) ([]int, error) { return nil, nil }
func (p pieceTok) Decode(ids []int) string {
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(p.Piece(id))
	}
	return sb.String()
}
func (p pieceTok) Piece(id int) string {
	if id < 0 || id >= len(p) {
		return ""
	}
	return p[id]
}
func (p pieceTok) VocabSize() int { return len(p) }
func (p pieceTok) BOS() int       { return -1 }
func (p pieceTok) EOS() int       { return -1 }
func (p pieceTok) EOSIDs() []int  { return nil }

func TestStreamStopStrings(t *testing.T) {
	tok := pieceTok{"Hello", " wor", "ld", "\n", "\n", "Next", "é"[:1], "é"[1:], "!"}
	cases := []struct {
		name    string
		ids     []int
		stops   []string
		text    string
		stopped bool
		sentMax string // what may have been written before the end
	}{
		{"no stops", []int{0, 1, 2}, nil, "Hello world", false, "Hello world"},
		{"stop inside one token", []int{0, 1, 2, 3}, []string{"wor"}, "Hello ", true, "Hello "},
		{"stop across tokens", []int{0, 1, 2, 3, 4, 5}, []string{"\n\n"}, "Hello world", true, "Hello world"},
		{"prefix that is not a stop", []int{0, 3, 5}, []string{"\n\n"}, "Hello\nNext", false, "Hello\nNext"},
		{"earliest of two stops", []int{0, 1, 2}, []string{"ld", "o w"}, "Hell", true, "Hell"},
		{"split UTF-8 character", []int{0, 6, 7, 8}, []string{"é!"}, "Hello", true, "Hello"},
		{"empty stop ignored", []int{0}, []string{""}, "Hello", false, "Hello"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			s := newStream(tok, nil, c.stops, &out)
			for _, id := range c.ids {
				if !s.token(id) {
					break
				}
				// Nothing written may ever be retracted: it is a prefix of the final text.
				if !strings.HasPrefix(c.text, out.String()) {
					t.Fatalf("wrote %q, not a prefix of %q", out.String(), c.text)
				}
			}
			if !s.stopped {
				if err := s.flush(); err != nil {
					t.Fatal(err)
				}
			}
			if s.stopped != c.stopped || s.text.String() != c.text || out.String() != c.text {
				t.Errorf("stopped %v text %q written %q; want %v %q", s.stopped, s.text.String(), out.String(), c.stopped, c.text)
			}
		})
	}
}

func TestHeldBack(t *testing.T) {
	for _, c := range []struct {
		text  string
		stops []string
		want  int
	}{
		{"abc", []string{"cd"}, 1},
		{"abc", []string{"bcd", "cd"}, 2},
		{"abc", []string{"xyz"}, 0},
		{"", []string{"abc"}, 0},
		{"ab", []string{"ab"}, 0}, // a whole stop is found by the search, not held
		{"xa", []string{"ab"}, 1},
	} {
		if got := heldBack(c.text, c.stops); got != c.want {
			t.Errorf("heldBack(%q, %q) = %d, want %d", c.text, c.stops, got, c.want)
		}
	}
}

// stories loads the real stories260K model and its tokenizer.
func stories(t *testing.T, dir string) (*model.Model, tokenizer.Tokenizer) {
	t.Helper()
	m, err := model.Load(context.Background(), dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

func TestCompleteMatchesGolden(t *testing.T) {
	dir := testmodels.Path(t, "stories260K-hf")
	golden, err := os.ReadFile(testmodels.Path(t, "stories260K/expected_greedy_200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	m, tok := stories(t, dir)
	s, err := m.NewSession(model.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(s, tok)
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	res, err := r.Complete(context.Background(), "Once upon a time", Options{MaxTokens: 48}, &streamed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != streamed.String() || res.Stop != StopMaxTokens || res.Stats.GeneratedTokens != 48 {
		t.Fatalf("result %+v, streamed %q", res, streamed.String())
	}
	if !strings.HasPrefix(string(golden), "Once upon a time"+res.Text) {
		t.Errorf("greedy completion %q is not the golden text's continuation %q", res.Text, golden[:200])
	}
	// A stop string cuts the text where it begins and ends generation.
	res, err = r.Complete(context.Background(), "Once upon a time", Options{MaxTokens: 48, Stop: []string{"Lily"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != StopString || strings.Contains(res.Text, "Lily") || !strings.HasPrefix(string(golden), "Once upon a time"+res.Text+"Lily") {
		t.Errorf("stop at Lily: %+v", res)
	}
	// A prompt longer than the context is refused with the lengths.
	_, err = r.Complete(context.Background(), strings.Repeat("Once upon a time ", 200), Options{MaxTokens: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "context holds 512") {
		t.Errorf("long prompt: %v", err)
	}
}

// newRunner loads the model in dir and pairs a fresh session with its tokenizer.
func newRunner(t *testing.T, dir string) *Runner {
	t.Helper()
	m, tok := stories(t, dir)
	s, err := m.NewSession(model.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(s, tok)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCompletionKeepsLeadingSpace checks that a completion is exactly what
// follows the prompt in the decoding of the whole sequence: the first
// token's leading space is kept, with SentencePiece (stories260K) and with
// a tokenizer.json whose decoder strips the text's first space (the fixture).
func TestCompletionKeepsLeadingSpace(t *testing.T) {
	fixtureDir := t.TempDir()
	if err := fixture.Llama().Write(fixtureDir); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name               string
		dir                func(t *testing.T) string
		prompt, wantPrefix string
	}{
		{"sentencepiece", func(t *testing.T) string { return testmodels.Path(t, "stories260K-hf") }, "Once upon a", " time, there was"},
		{"tokenizer.json", func(*testing.T) string { return fixtureDir }, "when the dog", " s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRunner(t, c.dir(t))
			var streamed strings.Builder
			res, err := r.Complete(context.Background(), c.prompt, Options{MaxTokens: 12}, &streamed)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := r.tok.Encode(c.prompt, tokenizer.AddBOS(r.tok))
			if err != nil {
				t.Fatal(err)
			}
			whole := r.tok.Decode(append(slices.Clone(ids), res.Stats.Tokens...))
			if want := strings.TrimPrefix(whole, r.tok.Decode(ids)); res.Text != want || streamed.String() != want {
				t.Errorf("text %q, streamed %q; want what follows the prompt in %q", res.Text, streamed.String(), whole)
			}
			if !strings.HasPrefix(res.Text, c.wantPrefix) {
				t.Errorf("text %q does not begin with %q", res.Text, c.wantPrefix)
			}
		})
	}
}

// TestConversationReusesCache checks that a second turn prefills only the
// tokens the cache lacks, and replies exactly as a fresh session would.
func TestConversationReusesCache(t *testing.T) {
	dir := testmodels.Path(t, "stories260K-hf")
	m, tok := stories(t, dir)
	tpl := testTemplate(t)
	newConv := func() *Conversation { return newConversation(t, m, tok, "Tell stories.", 0) }
	ctx := context.Background()
	opts := Options{MaxTokens: 12}
	c := newConv()
	first, err := c.Send(ctx, "Once upon a time", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Send(ctx, "The dog ran", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := tpl.Render(c.Messages()[:4], true)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tokenizer.EncodeRendered(tok, prompt)
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != tok.BOS() || slices.Contains(ids[1:], tok.BOS()) {
		t.Errorf("rendered prompt ids %v: want BOS once, first", ids[:8])
	}
	if second.Stats.PromptTokens >= len(ids)/2 {
		t.Errorf("second turn prefilled %d of %d tokens; the cache was not reused", second.Stats.PromptTokens, len(ids))
	}
	if got := c.Messages(); len(got) != 5 || got[2].Role != "assistant" || got[2].Content != strings.TrimSpace(first.Text) {
		t.Errorf("history %+v", got)
	}
	// The same history in a fresh session gives the same greedy reply.
	fresh := newConv()
	fresh.msgs = c.Messages()[:3]
	again, err := fresh.Send(ctx, "The dog ran", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Text != second.Text || again.Stats.PromptTokens != len(ids) {
		t.Errorf("fresh session replied %q after %d prompt tokens; cached %q (%d tokens in all)", again.Text, again.Stats.PromptTokens, second.Text, len(ids))
	}
	c.Reset()
	if got := c.Messages(); len(got) != 1 || got[0].Role != "system" {
		t.Errorf("after Reset: %+v", got)
	}
}

// testTemplate is a plain chat template: "role: content" lines after BOS.
func testTemplate(t *testing.T) *tokenizer.ChatTemplate {
	t.Helper()
	tpl, err := tokenizer.NewChatTemplate("{% for m in messages %}{{ bos_token if loop.first }}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}", "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// newConversation starts a chat with m in a fresh session of ctxLen
// positions (0: the model's).
func newConversation(t *testing.T, m *model.Model, tok tokenizer.Tokenizer, system string, ctxLen int) *Conversation {
	t.Helper()
	s, err := m.NewSession(model.SessionOptions{Context: ctxLen})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(s, tok)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConversation(r, testTemplate(t), system)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cancelAfter cancels a context once it has been written n times: a user
// stopping a reply while it streams.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
	text   strings.Builder
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.text.Write(p)
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return len(p), nil
}

// TestConversationTurns checks what each turn leaves in the history: a
// reply cut short by its context leaves none of the turn (and the next turn
// still reuses the cache), a conversation beyond the context is a
// TooLongError, and SetSystem starts over under the new system message.
func TestConversationTurns(t *testing.T) {
	dir := t.TempDir()
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	m, tok := stories(t, dir)
	opts := Options{MaxTokens: 40}
	c := newConversation(t, m, tok, "Be brief.", 256)
	first, err := c.Send(context.Background(), "when the dog", Options{MaxTokens: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := c.Messages()

	ctx, cancel := context.WithCancel(context.Background())
	stopped := &cancelAfter{n: 3, cancel: cancel}
	if _, err := c.Send(ctx, "the cat", opts, stopped); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled reply: got %v, want context.Canceled", err)
	}
	if got := c.Messages(); !slices.Equal(got, before) || stopped.text.Len() == 0 {
		t.Errorf("after a cancelled reply (%q streamed) the history is %+v, want %+v", stopped.text.String(), got, before)
	}
	again, err := c.Send(context.Background(), "the cat", Options{MaxTokens: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Stats.PromptTokens >= first.Stats.PromptTokens {
		t.Errorf("the turn after a cancelled reply prefilled %d tokens, the first turn %d: the cache was not reused", again.Stats.PromptTokens, first.Stats.PromptTokens)
	}

	var tooLong *TooLongError
	if _, err := c.Send(context.Background(), strings.Repeat("the cat sat on the mat ", 40), opts, nil); !errors.As(err, &tooLong) || !tooLong.Conversation || tooLong.Context != 256 {
		t.Errorf("conversation beyond the context: got %v", err)
	}
	if got := c.Messages(); len(got) != 5 {
		t.Errorf("a turn beyond the context changed the history: %+v", got)
	}

	c.SetSystem("Be kind.")
	if got := c.Messages(); len(got) != 1 || got[0] != (tokenizer.Message{Role: "system", Content: "Be kind."}) {
		t.Errorf("after SetSystem: %+v", got)
	}
	c.SetSystem("")
	if got := c.Messages(); len(got) != 0 {
		t.Errorf("after SetSystem(\"\"): %+v", got)
	}
}

func TestTrimLeft(t *testing.T) {
	cases := []struct {
		writes []string
		want   string
	}{
		{[]string{" Hello", " world"}, "Hello world"},
		{[]string{"\n", " ", "\u3000Hi", " there "}, "Hi there "},
		{[]string{"", "  "}, ""},
		{[]string{"é ", " x"}, "é  x"},
	}
	for _, c := range cases {
		var out strings.Builder
		w := &trimLeft{w: &out}
		for _, s := range c.writes {
			if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", s, n, err)
			}
		}
		if out.String() != c.want {
			t.Errorf("writes %q gave %q, want %q", c.writes, out.String(), c.want)
		}
	}
}

func TestNewConversationWithoutTemplate(t *testing.T) {
	if _, err := NewConversation(nil, nil, ""); err != ErrNoTemplate {
		t.Errorf("got %v, want ErrNoTemplate", err)
	}
}

func TestRunnerRejectsLargerTokenizer(t *testing.T) {
	dir := testmodels.Path(t, "stories260K-hf")
	m, _ := stories(t, dir)
	s, err := m.NewSession(model.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	big := make(pieceTok, m.Config.VocabSize+1)
	if _, err := NewRunner(s, big); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("got %v", err)
	}
}

// TestLogprobsText checks that OnLogprobs gets one report per generated
// token, before the writer gets its text, that the tokens' texts make up
// the completion, and that the greedy choice heads its step's top tokens
// with the same text and log-probability.
func TestLogprobsText(t *testing.T) {
	dir := t.TempDir()
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, dir)
	var streamed, reported strings.Builder
	var lps []TokenLogprobs
	opts := Options{MaxTokens: 10, TopLogprobs: 4, OnLogprobs: func(lp TokenLogprobs) {
		if !strings.HasPrefix(reported.String(), streamed.String()) {
			t.Errorf("the writer got %q before the logprobs of %q", streamed.String(), reported.String())
		}
		lps = append(lps, lp)
		reported.WriteString(lp.Token)
	}}
	res, err := r.Complete(context.Background(), "when the dog", opts, &streamed)
	if err != nil {
		t.Fatal(err)
	}
	if len(lps) != res.Stats.GeneratedTokens || reported.String() != res.Text {
		t.Fatalf("%d reports for %d tokens, their texts %q for the text %q", len(lps), res.Stats.GeneratedTokens, reported.String(), res.Text)
	}
	for i, lp := range lps {
		if len(lp.Top) != 4 || lp.Top[0] != (Logprob{lp.Token, lp.Logprob}) || lp.Logprob > 0 {
			t.Errorf("token %d: %+v", i, lp)
		}
	}
}
