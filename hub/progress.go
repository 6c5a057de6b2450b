package hub

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress draws, on a terminal, one bar per file in flight and one for
// the whole snapshot (bytes, rate, ETA), redrawn in place a few times a
// second; finished files scroll up as one line each. A nil *progress
// draws nothing, so callers need no checks.
type progress struct {
	w     io.Writer
	total *progressbar.ProgressBar
	line  *lineBuf

	mu       sync.Mutex
	active   []*fileBar
	finished []string
	drawn    int // lines of the last frame, to move back over

	stop, stopped chan struct{}
}

// fileBar is one file's bar; its bytes also count toward the total.
type fileBar struct {
	p    *progress
	bar  *progressbar.ProgressBar
	line *lineBuf
	path string
	size int64
}

// lineBuf keeps the latest line a progressbar rendered into it.
type lineBuf struct {
	mu   sync.Mutex
	text string
}

func (l *lineBuf) Write(b []byte) (int, error) {
	s := string(b)
	if i := strings.LastIndexByte(s, '\r'); i >= 0 {
		s = s[i+1:]
	}
	if s = strings.TrimRight(s, " "); s != "" {
		l.mu.Lock()
		l.text = s
		l.mu.Unlock()
	}
	return len(b), nil
}

func (l *lineBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text
}

func newBar(w io.Writer, size int64, desc string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true), progressbar.OptionUseIECUnits(true), progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(25), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(true), progressbar.OptionSetRenderBlankState(true))
}

// newProgress starts drawing to w (nil: returns nil, which draws nothing).
func newProgress(w io.Writer, total int64, desc string) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, line: &lineBuf{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	p.total = newBar(p.line, total, desc)
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.stopped)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			p.draw(true)
			return
		case <-t.C:
			p.draw(false)
		}
	}
}

// draw moves back over the last frame and writes the finished lines, the
// bars of files in flight and the total bar.
func (p *progress) draw(last bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn)
	}
	b.WriteString("\r")
	for _, s := range p.finished {
		b.WriteString(s + "\x1b[K\n")
	}
	p.finished = p.finished[:0]
	p.drawn = 0
	// Bars render only when bytes arrive; bring stalled ones up to date.
	p.total.RenderBlank()
	for _, f := range p.active {
		f.bar.RenderBlank()
	}
	if !last {
		for _, f := range p.active {
			b.WriteString(f.line.String() + "\x1b[K\n")
			p.drawn++
		}
	}
	b.WriteString(p.line.String() + "\x1b[K\n\x1b[J")
	p.drawn++
	io.WriteString(p.w, b.String())
}

// close draws the last frame and stops.
func (p *progress) close() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.stopped
}

// file starts a bar for one file.
func (p *progress) file(path string, size int64) *fileBar {
	if p == nil {
		return nil
	}
	f := &fileBar{p: p, line: &lineBuf{}, path: path, size: size}
	desc := path
	if len(desc) > 32 {
		desc = "…" + desc[len(desc)-31:]
	}
	f.bar = newBar(f.line, size, fmt.Sprintf("%-32s", desc))
	p.mu.Lock()
	p.active = append(p.active, f)
	p.mu.Unlock()
	return f
}

// add counts n bytes of the file (and of the total).
func (f *fileBar) add(n int64) {
	if f == nil || n == 0 {
		return
	}
	f.bar.Add64(n)
	f.p.total.Add64(n)
}

// done removes the file's bar, leaving a line that says how it ended.
func (f *fileBar) done(err error) {
	if f == nil {
		return
	}
	p := f.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, a := range p.active {
		if a == f {
			p.active = append(p.active[:i], p.active[i+1:]...)
			break
		}
	}
	status := "done"
	if err != nil {
		status = "failed"
	}
	p.finished = append(p.finished, fmt.Sprintf("%s %s (%s)", status, f.path, formatBytes(f.size)))
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.2f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
