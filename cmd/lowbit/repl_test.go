package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/term"

	"lowbit/internal/fixture"
	"lowbit/internal/ptytest"
	"lowbit/internal/testmodels"
)

// asLowbit set in the environment makes this test binary run lowbit's main:
// the tests on a terminal re-execute it as the program under test.
const asLowbit = "LOWBIT_TEST_AS_LOWBIT"

func TestMain(m *testing.M) {
	if os.Getenv(asLowbit) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startLowbit runs lowbit args on a new pseudo-terminal, its controlling
// terminal, so Ctrl-C typed there is SIGINT as in a shell.
func startLowbit(t *testing.T, args ...string) *ptytest.Terminal {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), asLowbit+"=1")
	return ptytest.Start(t, cmd, 200, 50)
}

// chatFixture writes a tiny model with a chat template whose context may
// hold maxPositions tokens. Its vocabulary has no '>', so a reply never
// looks like the prompt.
func chatFixture(t *testing.T, maxPositions int) string {
	t.Helper()
	dir := t.TempDir()
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["max_position_embeddings"] = maxPositions
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return withChatTemplate(t, dir)
}

// nextTurn waits for the JSON object of the next reply (--json) and the
// prompt after it.
func nextTurn(t *testing.T, term *ptytest.Terminal) runJSON {
	t.Helper()
	out := strings.ReplaceAll(term.Expect("\r\n}\r\n"), "\r", "")
	term.Expect(">>> ")
	var res runJSON
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
		t.Fatalf("a turn's JSON: %v in %q", err, out)
	}
	return res
}

// TestChatTerminal drives the chat through a pseudo-terminal: commands,
// line editing and history, multi-line messages, Ctrl-C at the prompt, and
// the cache reused from turn to turn.
func TestChatTerminal(t *testing.T) {
	dir := chatFixture(t, 512)
	const system = "You are a helpful assistant who tells short stories about dogs and cats."
	term := startLowbit(t, "run", dir, "--device", "cpu", "--temp", "0", "-n", "4", "--json", "--system", system)
	term.Expect("chat started; /help lists the commands, Ctrl-D or /exit ends")
	term.Expect(">>> ")

	term.Type("/help\r")
	for _, want := range []string{"/reset, /clear", "/system <text>", "/exit, /bye", `between """ and """`} {
		term.Expect(want)
	}
	term.Expect(">>> ")
	term.Type("/nope\r")
	term.Expect("lowbit: unknown command /nope; /help lists the commands")
	term.Expect(">>> ")

	term.Type("when the dog\r")
	first := nextTurn(t, term)
	// Up recalls the line; the second turn prefills only what the cache lacks.
	term.Type("\x1b[A")
	term.Expect("when the dog")
	term.Type("\r")
	second := nextTurn(t, term)
	if first.Prompt != "when the dog" || second.Prompt != "when the dog" || second.Stats.PromptTokens >= first.Stats.PromptTokens/2 {
		t.Errorf("turns %q (%d tokens prefilled), %q (%d): want the same message, the second prefilling less than half",
			first.Prompt, first.Stats.PromptTokens, second.Prompt, second.Stats.PromptTokens)
	}

	cases := []struct{ name, keys, want string }{
		{"editing keys", "ac\x1b[Db\x1b[HX\x1b[FY\x01Z\x05 w1 w2\x17w3\r", "ZXabcY w1 w3"},
		{"Ctrl-U", "junk\x15the cat\r", "the cat"},
		{"backslash continues", "first\\\rsecond\r", "first\nsecond"},
		{"block", "\"\"\"\rline one\r/not a command\rline three\"\"\"\r", "line one\n/not a command\nline three"},
		{"one-line block", "\"\"\"/etc is a directory\"\"\"\r", "/etc is a directory"},
		{"pasted lines", "\x1b[200~pasted one\rpasted two\x1b[201~ and typed\r", "pasted one\npasted two and typed"},
	}
	for _, c := range cases {
		term.Type(c.keys)
		if got := nextTurn(t, term); got.Prompt != c.want {
			t.Errorf("%s: sent %q, want %q", c.name, got.Prompt, c.want)
		}
	}

	// Ctrl-C drops the line typed so far, which stays out of the history.
	term.Type("abandoned\x03")
	term.Expect(">>> ")
	term.Type("\x1b[A")
	if got := term.Expect("pasted two and typed"); strings.Contains(got, "abandoned") {
		t.Errorf("Up after a line dropped by Ctrl-C shows %q", got)
	}
	term.Type("\x15")

	// After /reset the first message gets the first reply again.
	term.Type("/reset\r")
	term.Expect("lowbit: history cleared")
	term.Expect(">>> ")
	term.Type("when the dog\r")
	if again := nextTurn(t, term); again.Text != first.Text {
		t.Errorf("after /reset the reply is %q, the first was %q", again.Text, first.Text)
	}
	term.Type("/system Be brief.\r")
	term.Expect("lowbit: system message set; history cleared")
	term.Expect(">>> ")
	// A message beyond the context is refused, and the chat goes on.
	term.Type(strings.Repeat("dog ", 150) + "\r")
	term.Expect("but the context holds 512: /reset to start over, or raise --ctx (the model reads up to 512)")
	term.Expect(">>> ")

	// Ctrl-C on an empty line says how to leave; a second one leaves.
	term.Type("\x03")
	term.Expect("(Ctrl-C again, Ctrl-D or /exit ends the chat)")
	term.Expect(">>> ")
	term.Type("\x03")
	if code, rest := term.Wait(); code != 0 {
		t.Errorf("exit code %d after Ctrl-C twice; the terminal shows:\n%s", code, rest)
	}
	if strings.Contains(term.Output(), `"prompt": "abandoned`) {
		t.Errorf("a line dropped by Ctrl-C was sent:\n%s", term.Output())
	}
}

// TestChatTerminalCtrlCStopsReply checks that Ctrl-C while a reply streams
// stops that reply and the chat goes on, and that this works each time.
func TestChatTerminalCtrlCStopsReply(t *testing.T) {
	// A context this long takes the model many seconds to fill: the reply
	// is still streaming when Ctrl-C comes.
	const positions = 1 << 16
	dir := chatFixture(t, positions)
	term := startLowbit(t, "run", dir, "--device", "cpu", "--temp", "0", "-n", "0", "--ctx", "65536")
	term.Expect(">>> ")
	for _, msg := range []string{"when the dog", "the cat"} {
		term.Type(msg + "\r")
		term.Expect(msg + "\r\n")
		term.Next(20) // the reply is streaming
		term.Type("\x03")
		term.Expect(">>> ")
	}
	term.Type("\x04")
	code, _ := term.Wait()
	if out := term.Output(); code != 0 || strings.Contains(out, "canceled") || strings.Contains(out, "signal") {
		t.Errorf("exit code %d; the terminal shows:\n%s", code, out)
	}
}

// TestChatTerminalEnds checks each way to end a chat: the user's exit 0,
// SIGTERM at the prompt (where the chat waits on the terminal) exits 1.
func TestChatTerminalEnds(t *testing.T) {
	dir := chatFixture(t, 256)
	cases := []struct {
		name, keys string
		signal     os.Signal
		code       int
		say        string
	}{
		{"/exit", "/exit\r", nil, 0, ""},
		{"/bye", "/bye\r", nil, 0, ""},
		{"/quit", "/quit\r", nil, 0, ""},
		{"Ctrl-D", "\x04", nil, 0, ""},
		{"Ctrl-C twice", "\x03\x03", nil, 0, ""},
		{"Ctrl-C clearing a line, then twice", "typed\x03\x03\x03", nil, 0, ""},
		{"SIGTERM", "", syscall.SIGTERM, 1, "lowbit: terminated signal received"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			term := startLowbit(t, "run", dir, "--device", "cpu", "--temp", "0", "-n", "4")
			term.Expect(">>> ")
			term.Type(c.keys)
			if c.signal != nil {
				term.Signal(c.signal)
			}
			if code, rest := term.Wait(); code != c.code || !strings.Contains(rest, c.say) {
				t.Errorf("exit code %d, want %d with %q; the terminal shows:\n%s", code, c.code, c.say, rest)
			}
		})
	}
}

// TestRunTerminalCompletion checks that on a terminal the prompt is printed
// before its completion, so the user reads the whole text, and that an
// error or Ctrl-C after it starts on a line of its own.
func TestRunTerminalCompletion(t *testing.T) {
	long := chatFixture(t, 1<<16)
	cases := []struct {
		name   string
		dir    func(t *testing.T) string
		args   []string
		ctrlC  bool // type Ctrl-C once the completion streams
		expect string
		code   int
	}{
		{"completion", func(t *testing.T) string { return testmodels.Path(t, "stories260K-hf") },
			[]string{"Once", "upon", "a", "-n", "8"}, false, "Once upon a time, there was a little", 0},
		{"prompt beyond the context", func(*testing.T) string { return long },
			[]string{"when the dog", "--ctx", "8"}, false, "when the dog\r\nlowbit: the prompt is 9 tokens but the context holds 8: raise --ctx", 1},
		{"Ctrl-C", func(*testing.T) string { return long },
			[]string{"when the dog", "-n", "0", "--ctx", "65536"}, true, "\r\nlowbit: interrupt signal received", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			term := startLowbit(t, append([]string{"run", c.dir(t), "--device", "cpu", "--temp", "0"}, c.args...)...)
			if c.ctrlC {
				term.Next(40)
				term.Type("\x03")
			}
			term.Expect(c.expect)
			if code, rest := term.Wait(); code != c.code {
				t.Errorf("exit code %d, want %d; the terminal shows:\n%s", code, c.code, rest)
			}
		})
	}
}

// scriptedLines is a lineReader that returns its lines in turn.
type scriptedLines []struct {
	line string
	err  error
}

func (s *scriptedLines) readLine(string) (string, error) {
	if len(*s) == 0 {
		return "", io.EOF
	}
	l := (*s)[0]
	*s = (*s)[1:]
	return l.line, l.err
}

func TestReadMessage(t *testing.T) {
	type l = struct {
		line string
		err  error
	}
	cases := []struct {
		name  string
		lines scriptedLines
		msg   string
		multi bool
		err   error
	}{
		{"a line, trimmed", scriptedLines{{"  hi there ", nil}}, "hi there", false, nil},
		{"a command", scriptedLines{{"/reset", nil}}, "/reset", false, nil},
		{"continued", scriptedLines{{`a\`, nil}, {`b\`, nil}, {"c", nil}}, "a\nb\nc", true, nil},
		{"block", scriptedLines{{`"""`, nil}, {"/x", nil}, {"", nil}, {`y"""`, nil}}, "/x\n\ny", true, nil},
		{"block on one line", scriptedLines{{`"""/x"""`, nil}}, "/x", true, nil},
		{"block with a first line", scriptedLines{{`"""a`, nil}, {`b"""`, nil}}, "a\nb", true, nil},
		{"pasted", scriptedLines{{"p1", term.ErrPasteIndicator}, {"p2", term.ErrPasteIndicator}, {"", nil}}, "p1\np2", true, nil},
		{"Ctrl-C in a block", scriptedLines{{`"""`, nil}, {"a", nil}, {"", errInterrupted}}, "\na\n", false, errInterrupted},
		{"Ctrl-C on an empty line", scriptedLines{{"", errInterrupted}}, "", false, errInterrupted},
		{"Ctrl-D", scriptedLines{{"", io.EOF}}, "", false, io.EOF},
		{"Ctrl-D in a block", scriptedLines{{`"""`, nil}}, "", false, io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg, multi, err := readMessage(&c.lines)
			if msg != c.msg || multi != c.multi || !errors.Is(err, c.err) {
				t.Errorf("got %q %v %v, want %q %v %v", msg, multi, err, c.msg, c.multi, c.err)
			}
		})
	}
}

// TestKeyReader checks that Ctrl-C becomes an Enter flagged as an
// interrupt, read on its own, and that the history keeps out the lines it
// ended, blank lines and repeats.
func TestKeyReader(t *testing.T) {
	k := &keyReader{ctx: context.Background(), r: strings.NewReader("ab\x03cd\x03\x03")}
	var got []string
	buf := make([]byte, 16)
	for {
		n, err := k.Read(buf)
		if err == io.EOF {
			break
		}
		read := string(buf[:n])
		if k.interrupted {
			read += "(interrupt)"
			k.interrupted = false
		}
		got = append(got, read)
	}
	if want := "ab|\r(interrupt)|cd|\r(interrupt)|\r(interrupt)"; strings.Join(got, "|") != want {
		t.Errorf("reads %q, want %q", strings.Join(got, "|"), want)
	}

	h := &lineHistory{keys: k}
	k.interrupted = true
	h.Add("dropped")
	k.interrupted = false
	for _, line := range []string{"a", " ", "a", "b", "a"} {
		h.Add(line)
	}
	if h.Len() != 3 || h.At(0) != "a" || h.At(1) != "b" || h.At(2) != "a" {
		t.Errorf("history %q, want [a b a]", h.lines)
	}
}

// FuzzKeyReader checks that the keys pass through unchanged but for each
// Ctrl-C, which becomes an Enter read alone and flagged, whatever the bytes
// and however the reads split them.
func FuzzKeyReader(f *testing.F) {
	f.Add([]byte("ab\x03cd\x03\x03"), uint8(3))
	f.Add([]byte("\x1b[A\r\x03"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		k := &keyReader{ctx: context.Background(), r: strings.NewReader(string(data))}
		buf := make([]byte, int(size)%8+1)
		var got []byte
		for {
			n, err := k.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.interrupted && (n != 1 || buf[0] != '\r') {
				t.Fatalf("an interrupt read %q", buf[:n])
			}
			if k.interrupted {
				got = append(got, keyCtrlC)
				k.interrupted = false
				continue
			}
			if bytes.IndexByte(buf[:n], keyCtrlC) >= 0 {
				t.Fatalf("a Ctrl-C passed through in %q", buf[:n])
			}
			got = append(got, buf[:n]...)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("read %q, want %q", got, data)
		}
	})
}

// FuzzReadMessage checks that any lines make messages without a panic,
// and that only a message of several lines holds a newline.
func FuzzReadMessage(f *testing.F) {
	f.Add("hi\n\"\"\"\na\\\nb\"\"\"\nc\\")
	f.Add("\"\"\"\"\"\"\n\\\n\"\"\"")
	f.Fuzz(func(t *testing.T, text string) {
		var lines scriptedLines
		for _, line := range strings.Split(text, "\n") {
			lines = append(lines, struct {
				line string
				err  error
			}{line, nil})
		}
		for range len(lines) + 1 {
			msg, multi, err := readMessage(&lines)
			if err != nil {
				return
			}
			if !multi && strings.Contains(msg, "\n") {
				t.Fatalf("one-line message %q", msg)
			}
		}
		t.Fatalf("%d lines left after as many messages as lines", len(lines))
	})
}
