package ptytest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStart checks that the program sees a terminal of the given size,
// reads what is typed (the terminal echoes it, cooked), and that Ctrl-C
// typed there is SIGINT to the program, its terminal being its controlling
// terminal.
func TestStart(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	script := `trap 'echo interrupted; exit 3' INT
test -t 0 && test -t 1 && echo "terminal $(stty size)"
read line; echo "read:$line"
while :; do sleep 0.05; done`
	term := Start(t, exec.Command(sh, "-c", script), 100, 30)
	if got := term.Next(len("terminal")); got != "terminal" {
		t.Errorf("Next gave %q", got)
	}
	term.Expect(" 30 100")
	term.Type("hello\r")
	if got := term.Expect("read:hello"); !strings.Contains(got, "hello\r\n") {
		t.Errorf("typed line not echoed: %q", got)
	}
	term.Type("\x03")
	term.Expect("interrupted")
	if code, _ := term.Wait(); code != 3 {
		t.Errorf("exit code %d, want 3 (the INT trap's)", code)
	}
	if !strings.Contains(term.Output(), "read:hello\n") {
		t.Errorf("Output() %q", term.Output())
	}
}
