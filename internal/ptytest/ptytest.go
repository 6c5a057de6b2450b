// Package ptytest runs a program on a pseudo-terminal for tests of what it
// does only on a terminal: line editing in raw mode, Ctrl-C as SIGINT,
// output that differs from a pipe's. It opens /dev/ptmx with ioctls (no
// cgo), makes the terminal the child's controlling terminal, as a shell
// does, and bounds every wait with a deadline so that a bug fails the test
// instead of hanging it.
package ptytest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Timeout bounds each wait for output or for the program's exit.
const Timeout = 20 * time.Second

// Terminal is the test's side of a pseudo-terminal (its master): what the
// test writes is typed at the program's terminal, and what the program
// writes to its terminal is read here.
type Terminal struct {
	t      testing.TB
	master *os.File
	cmd    *exec.Cmd
	exited chan struct{}
	out    []byte // everything read from the program so far
	seen   int    // bytes of out that Expect has already passed
}

// Start runs cmd with a new pseudo-terminal of cols×rows as its stdin,
// stdout, stderr and controlling terminal (in a session of its own, so that
// Ctrl-C typed on the terminal signals cmd alone). It skips t where the
// system has no pseudo-terminals; the program is killed when t ends.
func Start(t testing.TB, cmd *exec.Cmd, cols, rows int) *Terminal {
	t.Helper()
	master, slave, err := open(cols, rows)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		master.Close()
		slave.Close()
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	// The child holds the slave now; once it exits, reads of the master
	// end (EIO) instead of waiting for a writer that is gone.
	slave.Close()
	term := &Terminal{t: t, master: master, cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(term.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-term.exited:
		default:
			cmd.Process.Kill()
			<-term.exited
		}
		master.Close()
	})
	return term
}

// open returns a new pseudo-terminal's master and slave.
func open(cols, rows int) (master, slave *os.File, err error) {
	// os.OpenFile puts the descriptor in the runtime's poller, so reads
	// of the master take deadlines.
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var n int
	err = control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("unlocking: %w", err)
		}
		var err error
		if n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN); err != nil {
			return fmt.Errorf("its number: %w", err)
		}
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("/dev/ptmx: %w", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// control runs f on f's descriptor without taking it out of the poller
// (os.File.Fd would make it blocking and drop deadlines).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Type writes keys to the terminal, as a user typing them.
func (p *Terminal) Type(keys string) {
	p.t.Helper()
	if _, err := p.master.Write([]byte(keys)); err != nil {
		p.t.Fatalf("typing %q: %v", keys, err)
	}
}

// Signal sends sig to the program, as kill(1) would.
func (p *Terminal) Signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signalling the program: %v", err)
	}
}

// Expect waits until the program has written want after what earlier
// Expects matched, and returns the output from there up to the end of want.
// It fails the test, showing the output, when want does not come within
// Timeout or the program ends first.
func (p *Terminal) Expect(want string) string {
	p.t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		if i := bytes.Index(p.out[p.seen:], []byte(want)); i >= 0 {
			got := string(p.out[p.seen : p.seen+i+len(want)])
			p.seen += i + len(want)
			return got
		}
		if err := p.read(deadline); err != nil {
			p.t.Fatalf("waiting for %q: %v; the terminal shows after the last match:\n%s", want, err, p.out[p.seen:])
		}
	}
}

// Next waits until the program has written n bytes after what earlier
// calls passed, and returns them: output whose text is not known, such as a
// model's reply. It fails the test as Expect does.
func (p *Terminal) Next(n int) string {
	p.t.Helper()
	deadline := time.Now().Add(Timeout)
	for len(p.out)-p.seen < n {
		if err := p.read(deadline); err != nil {
			p.t.Fatalf("waiting for %d bytes: %v; the terminal shows after the last match:\n%s", n, err, p.out[p.seen:])
		}
	}
	got := string(p.out[p.seen : p.seen+n])
	p.seen += n
	return got
}

// read appends what the program writes next to p.out.
func (p *Terminal) read(deadline time.Time) error {
	if err := p.master.SetReadDeadline(deadline); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := p.master.Read(buf)
	p.out = append(p.out, buf[:n]...)
	if errors.Is(err, syscall.EIO) {
		return errors.New("the program closed the terminal")
	}
	return err
}

// Wait waits for the program to exit and returns its exit code and the
// output it wrote after the last Expect; it fails the test after Timeout.
func (p *Terminal) Wait() (code int, rest string) {
	p.t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		err := p.read(deadline)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.t.Fatalf("the program did not exit within %v; the terminal shows after the last match:\n%s", Timeout, p.out[p.seen:])
		}
		break // the terminal is closed: the program is gone or going
	}
	select {
	case <-p.exited:
	case <-time.After(time.Until(deadline)):
		p.t.Fatalf("the program closed its terminal but did not exit within %v", Timeout)
	}
	rest = string(p.out[p.seen:])
	p.seen = len(p.out)
	return p.cmd.ProcessState.ExitCode(), rest
}

// Output is everything the program has written so far, with the
// terminal's carriage returns removed, for messages.
func (p *Terminal) Output() string {
	return strings.ReplaceAll(string(p.out), "\r", "")
}
