package convert

import (
	"bytes"
	"strings"
	"testing"
)

// TestBarEndsItsLine: a finished bar ends its line, so what is printed next
// starts on a line of its own, and sizes are in binary units.
func TestBarEndsItsLine(t *testing.T) {
	var b bytes.Buffer
	bar := newBar(&b, 3<<20, "quantize")
	bar.Add(1 << 20)
	bar.Add(2 << 20) // the total reached, and still redrawn:
	bar.Describe("quantize 2/2 tensors")
	bar.Finish()
	out := b.String()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("bar output %q does not end its line once", out)
	}
	if !strings.Contains(out, "MiB") {
		t.Errorf("bar output %q is not in binary units", out)
	}
}
