package chat

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

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
			s := newStream(tok, c.stops, &out)
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

// TestConversationReusesCache checks that a second turn prefills only the
// tokens the cache lacks, and replies exactly as a fresh session would.
func TestConversationReusesCache(t *testing.T) {
	dir := testmodels.Path(t, "stories260K-hf")
	m, tok := stories(t, dir)
	tpl, err := tokenizer.NewChatTemplate("{% for m in messages %}{{ bos_token if loop.first }}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}", "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	newConv := func() *Conversation {
		s, err := m.NewSession(model.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRunner(s, tok)
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewConversation(r, tpl, "Tell stories.")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
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
	ids, err := encodeRendered(tok, prompt)
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
