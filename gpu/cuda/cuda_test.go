package cuda

import (
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsNoLowbit enforces the package's reason to exist: the runtime
// imports no lowbit package (tests included), so it stays reusable and
// lowbit's backend sits on it, never the other way round.
func TestImportsNoLowbit(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var module string
	for _, line := range strings.Split(string(mod), "\n") {
		if m, ok := strings.CutPrefix(line, "module "); ok {
			module = strings.TrimSpace(m)
		}
	}
	if module == "" {
		t.Fatal("go.mod names no module")
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	for _, f := range files {
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if p == module || strings.HasPrefix(p, module+"/") {
				t.Errorf("%s imports %s: package cuda must import no %s package", f, p, module)
			}
		}
	}
}

func TestSizeClass(t *testing.T) {
	tests := []struct{ in, want int64 }{
		{1, 512}, {512, 512}, {513, 1024}, {4096, 4096}, {4097, 5120}, {9000, 10240}, {1 << 20, 1 << 20}, {(1 << 20) + 1, 1<<20 + 1<<18},
	}
	for _, tc := range tests {
		if got := sizeClass(tc.in); got != tc.want {
			t.Errorf("sizeClass(%d) = %d, want %d", tc.in, got, tc.want)
		}
		if got := sizeClass(tc.in); got < tc.in || (tc.in > 4096 && float64(got) > 1.25*float64(tc.in)) {
			t.Errorf("sizeClass(%d) = %d wastes too much", tc.in, got)
		}
	}
}

func TestBufferSlice(t *testing.T) {
	b := Buffer{ptr: 1 << 20, size: 4096}
	tests := []struct {
		off, n   int64
		ptr      uint64
		wantSize int64
	}{
		{0, 4096, 1 << 20, 4096}, {512, 1024, 1<<20 + 512, 1024}, {4096, 0, 1<<20 + 4096, 0},
	}
	for _, tc := range tests {
		s := b.Slice(tc.off, tc.n)
		if s.Ptr() != tc.ptr || s.Size() != tc.wantSize {
			t.Errorf("Slice(%d, %d) = %#x+%d, want %#x+%d", tc.off, tc.n, s.Ptr(), s.Size(), tc.ptr, tc.wantSize)
		}
	}
}

// openOrSkip opens GPU 0 or skips the test where there is none (CI).
func openOrSkip(t *testing.T) *Device {
	t.Helper()
	d, err := Open(0)
	if errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) {
		t.Skipf("no CUDA driver or GPU here: %v", err)
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestOpenWithoutGPU(t *testing.T) {
	d, err := Open(0)
	if err == nil {
		d.Close()
		t.Skip("a GPU is present")
	}
	if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open without a GPU: %v, want ErrNoDriver or ErrNoDevice", err)
	}
}

// TestDevice checks the runtime without kernels: memory, the pool, copies,
// mapped host memory behind an event, and Close.
func TestDevice(t *testing.T) {
	d := openOrSkip(t)
	if d.Name() == "" || d.TotalMem() <= 0 || d.Multiprocessors() <= 0 {
		t.Fatalf("device %s: %d bytes, %d SMs", d, d.TotalMem(), d.Multiprocessors())
	}
	if _, err := Open(99); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open(99) = %v, want ErrNoDevice", err)
	}
	b, err := d.Alloc(1000, MemScratch)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := d.CopyToDevice(b, src); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1000)
	if err := d.CopyFromDevice(got, b); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(src) {
		t.Fatal("device round trip changed the bytes")
	}
	if s := d.MemStats(); s.Scratch != 1024 {
		t.Errorf("scratch in use %d, want 1024", s.Scratch)
	}
	d.Free(b)
	if b2, err := d.Alloc(900, MemScratch); err != nil || b2.Ptr() != b.Ptr() {
		t.Errorf("pool did not reuse the freed block (%v)", err)
	}
	if err := d.CopyToDevice(b, make([]byte, 2000)); err == nil {
		t.Error("copy past a buffer's end was accepted")
	}
	if _, err := d.Alloc(1<<50, MemScratch); !IsOutOfMemory(err) {
		t.Errorf("a 1 PiB allocation gave %v, want out of memory", err)
	}

	// Mapped host memory: the device's writes (a memset here) are seen
	// by the host once the event behind them has passed.
	err = d.Do(func() error {
		h, err := d.AllocHostMapped(8)
		if err != nil {
			return err
		}
		defer d.FreeHostMapped(h)
		ev, err := d.NewEvent()
		if err != nil {
			return err
		}
		defer ev.Destroy()
		if err := d.Memset(h.Dev(), 0xab); err != nil {
			return err
		}
		if err := ev.Record(); err != nil {
			return err
		}
		if err := ev.Synchronize(); err != nil {
			return err
		}
		if v := *(*uint64)(h.Host()); v != 0xabababababababab {
			t.Errorf("mapped host memory holds %#x after the memset", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if bw, err := d.CopyBandwidth(64<<20, 3); err != nil || bw <= 0 {
		t.Errorf("CopyBandwidth = %g, %v", bw, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, err := d.Alloc(8, MemScratch); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close = %v, want ErrClosed", err)
	}
}
