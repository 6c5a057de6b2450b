package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"golang.org/x/term"

	"lowbit/chat"
)

// chatHelp is what /help prints.
const chatHelp = `Commands:
  /help, /?           this list
  /reset, /clear      forget the conversation (the system message stays)
  /system <text>      set the system message and start over (/system alone removes it)
  /exit, /bye         end the chat (so do Ctrl-D, and Ctrl-C twice on an empty line)
Keys: Up/Down recall earlier lines; Left/Right, Home/End, Ctrl-A/E move; Ctrl-U/W delete;
Ctrl-C stops a reply (it is not kept) or clears the line.
Several lines: end a line with \ to go on, or put them between """ and """ (a message
that begins with / goes in such a block).
`

// chatTerminal chats on the terminal in until the user ends it. SIGINT (Ctrl-C
// while a reply streams, the terminal then being in its usual mode) stops
// only that reply; at the prompt the terminal is raw and Ctrl-C is a key.
func (g *generation) chatTerminal(ctx context.Context, in *os.File, conv *chat.Conversation) error {
	ed := newLineEditor(ctx, in, g.errw)
	defer ed.close()
	// main's signal context would end the command at the first SIGINT; the
	// chat takes SIGINT over for its whole life, so that a Ctrl-C between
	// replies is never the default action either.
	signal.Reset(os.Interrupt)
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)

	fmt.Fprintln(g.errw, "lowbit: chat started; /help lists the commands, Ctrl-D or /exit ends")
	lastWasEmptyCtrlC := false
	for {
		msg, multi, err := readMessage(ed)
		switch {
		case errors.Is(err, errInterrupted):
			if msg != "" {
				lastWasEmptyCtrlC = false
				continue
			}
			if lastWasEmptyCtrlC {
				return nil
			}
			lastWasEmptyCtrlC = true
			fmt.Fprintln(g.errw, "(Ctrl-C again, Ctrl-D or /exit ends the chat)")
			continue
		case errors.Is(err, io.EOF):
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case err != nil:
			return err
		}
		lastWasEmptyCtrlC = false
		if msg == "" {
			continue
		}
		if !multi && strings.HasPrefix(msg, "/") {
			if g.command(msg, conv) {
				return nil
			}
			continue
		}
		res, stopped, err := g.interruptible(ctx, interrupts, func(ctx context.Context) (chat.Result, error) {
			return g.reply(ctx, conv, msg)
		})
		var tooLong *chat.TooLongError
		switch {
		case stopped: // after the reply so far and the ^C the terminal echoed
			fmt.Fprintln(g.out)
		case errors.As(err, &tooLong):
			fmt.Fprintln(g.errw, "lowbit:", g.explain(ctx, err, true))
		case err != nil:
			return g.explain(ctx, err, true)
		default:
			if err := g.finish(res, msg); err != nil {
				return err
			}
		}
	}
}

// interruptible runs one reply under a context that SIGINT cancels;
// stopped reports that it did, which ends the reply but not the chat.
func (g *generation) interruptible(ctx context.Context, interrupts chan os.Signal, reply func(context.Context) (chat.Result, error)) (res chat.Result, stopped bool, err error) {
	select {
	case <-interrupts: // one that came at the prompt does not stop this reply
	default:
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-interrupts:
			cancel()
		case <-done:
		}
	}()
	res, err = reply(rctx)
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		return res, true, nil
	}
	return res, false, err
}

// command runs a /command; true ends the chat.
func (g *generation) command(line string, conv *chat.Conversation) (exit bool) {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/exit", "/bye", "/quit":
		return true
	case "/help", "/?":
		fmt.Fprint(g.errw, chatHelp)
	case "/reset", "/clear":
		if conv == nil {
			fmt.Fprintln(g.errw, "lowbit: no history to forget: without a chat template each message is completed alone")
			break
		}
		conv.Reset()
		fmt.Fprintln(g.errw, "lowbit: history cleared")
	case "/system":
		switch {
		case conv == nil:
			fmt.Fprintln(g.errw, "lowbit: the model has no chat template, so there is no system message to set")
		case arg == "":
			conv.SetSystem("")
			fmt.Fprintln(g.errw, "lowbit: system message removed; history cleared")
		default:
			conv.SetSystem(arg)
			fmt.Fprintln(g.errw, "lowbit: system message set; history cleared")
		}
	default:
		fmt.Fprintf(g.errw, "lowbit: unknown command %s; /help lists the commands\n", name)
	}
	return false
}

// errInterrupted is a line ended by Ctrl-C: what was typed is dropped.
var errInterrupted = errors.New("interrupted")

// lineReader reads one line after a prompt (errInterrupted at Ctrl-C,
// io.EOF at Ctrl-D on an empty line, term.ErrPasteIndicator with a line
// that was pasted whole).
type lineReader interface {
	readLine(prompt string) (string, error)
}

// readMessage reads one message: a line; lines joined by a \ at their
// end; the lines of a """ block; or pasted lines with the typed line that
// ends them. multi reports a message of several lines, which is never a
// command. At errInterrupted, msg is what was typed, to be dropped.
func readMessage(ed lineReader) (msg string, multi bool, err error) {
	var sb strings.Builder
	inBlock := false
	prompt := ">>> "
	for {
		line, err := ed.readLine(prompt)
		prompt = "... "
		switch {
		case errors.Is(err, errInterrupted):
			return sb.String() + line, false, err
		case errors.Is(err, term.ErrPasteIndicator):
			sb.WriteString(line)
			sb.WriteByte('\n')
			continue
		case err != nil:
			return "", false, err
		}
		switch {
		case inBlock:
			before, closed := strings.CutSuffix(line, `"""`)
			sb.WriteString(before)
			if closed {
				return strings.Trim(sb.String(), "\n"), true, nil
			}
			sb.WriteByte('\n')
		case sb.Len() == 0 && strings.HasPrefix(line, `"""`):
			rest := line[len(`"""`):]
			if before, closed := strings.CutSuffix(rest, `"""`); closed {
				return before, true, nil
			}
			inBlock = true
			sb.WriteString(rest)
			sb.WriteByte('\n')
		case strings.HasSuffix(line, `\`):
			sb.WriteString(strings.TrimSuffix(line, `\`))
			sb.WriteByte('\n')
		default:
			sb.WriteString(line)
			return strings.TrimSpace(sb.String()), sb.Len() > len(line), nil
		}
	}
}

// lineEditor reads lines from a terminal with editing and history
// (golang.org/x/term's Terminal). The terminal is raw only while a line is
// read, so Ctrl-C is a key at the prompt and SIGINT while a reply streams.
type lineEditor struct {
	fd   int
	term *term.Terminal
	keys *keyReader
}

// newLineEditor edits lines typed on in, echoing them to out; ctx ends a
// wait for keys.
func newLineEditor(ctx context.Context, in *os.File, out io.Writer) *lineEditor {
	keys := &keyReader{ctx: ctx, r: in}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{keys, out}, "")
	t.History = &lineHistory{keys: keys}
	// Pasted lines arrive marked, so that they make one message.
	t.SetBracketedPasteMode(true)
	return &lineEditor{fd: int(in.Fd()), term: t, keys: keys}
}

// close turns the marking of pasted text off again.
func (e *lineEditor) close() { e.term.SetBracketedPasteMode(false) }

// readLine reads one line after prompt, the terminal raw meanwhile.
func (e *lineEditor) readLine(prompt string) (string, error) {
	if w, h, err := term.GetSize(e.fd); err == nil && w > 0 && h > 0 {
		e.term.SetSize(w, h)
	}
	state, err := term.MakeRaw(e.fd)
	if err != nil {
		return "", fmt.Errorf("the terminal: %w", err)
	}
	defer term.Restore(e.fd, state)
	e.term.SetPrompt(prompt)
	line, err := e.term.ReadLine()
	if e.keys.interrupted {
		e.keys.interrupted = false
		return line, errInterrupted
	}
	return line, err
}

// keyCtrlC is the byte Ctrl-C types on a raw terminal.
const keyCtrlC = 3

// keyReader passes the terminal's keys on to term.Terminal, which reads
// Ctrl-C as the end of input (like Ctrl-D) and leaves the line in place.
// A Ctrl-C becomes an Enter flagged as interrupted instead: the line ends,
// is known to be dropped, and stays out of the history. A read ends at the
// end of ctx too (SIGTERM at the prompt), though the terminal gives nothing.
type keyReader struct {
	ctx         context.Context
	r           io.Reader
	inFlight    chan keys // the read under way, nil when none
	pending     []byte    // read from r, not passed on yet
	interrupted bool      // the last line ended at a Ctrl-C
}

// keys are what one read of the terminal gave.
type keys struct {
	b   []byte
	err error
}

func (k *keyReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(k.pending) == 0 {
		if k.inFlight == nil {
			// A read of a terminal cannot be called off: it runs on its
			// own, and is left behind only when ctx ends the chat.
			k.inFlight = make(chan keys, 1)
			go func(r io.Reader, done chan<- keys) {
				b := make([]byte, 256)
				n, err := r.Read(b)
				done <- keys{b[:n], err}
			}(k.r, k.inFlight)
		}
		select {
		case got := <-k.inFlight:
			k.inFlight = nil
			if len(got.b) == 0 {
				return 0, got.err
			}
			k.pending = got.b
		case <-k.ctx.Done():
			return 0, context.Cause(k.ctx)
		}
	}
	if k.pending[0] == keyCtrlC {
		k.pending = k.pending[1:]
		k.interrupted = true
		p[0] = '\r'
		return 1, nil
	}
	// Up to the next Ctrl-C, so the Enter it becomes ends a read.
	n := len(k.pending)
	if i := bytes.IndexByte(k.pending, keyCtrlC); i >= 0 {
		n = i
	}
	n = copy(p, k.pending[:n])
	k.pending = k.pending[n:]
	return n, nil
}

// maxHistory bounds the lines Up can recall.
const maxHistory = 1000

// lineHistory is the lines typed so far, newest first, without lines
// dropped by Ctrl-C, blank lines and a line repeating the one before.
type lineHistory struct {
	keys  *keyReader
	lines []string // oldest first
}

func (h *lineHistory) Add(line string) {
	if h.keys.interrupted || strings.TrimSpace(line) == "" || (len(h.lines) > 0 && h.lines[len(h.lines)-1] == line) {
		return
	}
	if len(h.lines) == maxHistory {
		h.lines = append(h.lines[:0], h.lines[1:]...)
	}
	h.lines = append(h.lines, line)
}

func (h *lineHistory) Len() int { return len(h.lines) }

func (h *lineHistory) At(i int) string { return h.lines[len(h.lines)-1-i] }
