package gpu

import (
	"strings"
	"testing"

	"lowbit/quantize"
)

// TestUploadRefusesBlockFormats: GGUF's block formats have no kernels yet,
// and an upload says so, naming the format, before the device is touched.
func TestUploadRefusesBlockFormats(t *testing.T) {
	q := &quantize.Tensor{Format: quantize.Q4K, Rows: 1, Cols: 256, GroupSize: 256, Data: make([]byte, 144)}
	var d Device
	if _, err := d.Upload(q); err == nil || !strings.Contains(err.Error(), "q4k (a GGUF block format) has no GPU kernels") {
		t.Fatalf("err %v", err)
	}
}
