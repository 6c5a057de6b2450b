package npz

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// npyDict matches the exact header dict numpy writes for a C-order array.
var npyDict = regexp.MustCompile(`^\{'descr': '([<>|][a-z][0-9])', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \} *\n$`)

// parseNpy reads a .npy v1.0 file strictly: magic, version, a 64-aligned
// header of the exact dict form, and the data after it.
func parseNpy(b []byte) (descr string, shape []int, data []byte, err error) {
	if len(b) < 10 || string(b[:8]) != "\x93NUMPY\x01\x00" {
		return "", nil, nil, fmt.Errorf("bad magic or version %q", b[:min(len(b), 8)])
	}
	hl := int(b[8]) | int(b[9])<<8
	if 10+hl > len(b) || (10+hl)%64 != 0 {
		return "", nil, nil, fmt.Errorf("header length %d: data at %d is out of range or not 64-aligned", hl, 10+hl)
	}
	m := npyDict.FindStringSubmatch(string(b[10 : 10+hl]))
	if m == nil {
		return "", nil, nil, fmt.Errorf("header %q is not in numpy's form", b[10:10+hl])
	}
	tuple := m[2]
	if tuple != "" {
		parts := strings.Split(tuple, ", ")
		if len(parts) == 1 {
			// A 1-tuple is written "(n,)".
			if !strings.HasSuffix(parts[0], ",") {
				return "", nil, nil, fmt.Errorf("1-d shape %q lacks its trailing comma", tuple)
			}
			parts[0] = strings.TrimSuffix(parts[0], ",")
		}
		for _, p := range parts {
			d, err := strconv.Atoi(p)
			if err != nil {
				return "", nil, nil, fmt.Errorf("shape %q: %w", tuple, err)
			}
			shape = append(shape, d)
		}
	}
	return m[1], shape, b[10+hl:], nil
}

func TestHeader(t *testing.T) {
	tests := []struct {
		descr string
		shape []int
		dict  string
	}{
		{"<f4", []int{2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
		{"|u1", []int{5}, "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }"},
		{"<f2", nil, "{'descr': '<f2', 'fortran_order': False, 'shape': (), }"},
		{"|i1", []int{0, 7, 1}, "{'descr': '|i1', 'fortran_order': False, 'shape': (0, 7, 1), }"},
	}
	for _, tc := range tests {
		h, err := Header(tc.descr, tc.shape)
		if err != nil {
			t.Fatal(err)
		}
		if len(h)%64 != 0 {
			t.Errorf("%v: header of %d bytes is not 64-aligned", tc.shape, len(h))
		}
		if string(h[:8]) != "\x93NUMPY\x01\x00" || int(h[8])|int(h[9])<<8 != len(h)-10 {
			t.Errorf("%v: bad magic or length", tc.shape)
		}
		if got := strings.TrimRight(string(h[10:]), " \n"); got != tc.dict {
			t.Errorf("dict %q, want %q", got, tc.dict)
		}
		if h[len(h)-1] != '\n' {
			t.Error("header does not end in a newline")
		}
		descr, shape, _, err := parseNpy(h)
		if err != nil || descr != tc.descr || fmt.Sprint(shape) != fmt.Sprint(tc.shape) {
			t.Errorf("parsed back %q %v %v", descr, shape, err)
		}
	}
	if _, err := Header("<f4", make([]int, 30000)); err == nil {
		t.Error("header over 65535 bytes accepted")
	}
}

func TestWriteArrays(t *testing.T) {
	type array struct {
		name, descr string
		shape       []int
		data        []byte
	}
	big := make([]byte, 3*1000*4)
	for i := range big {
		big[i] = byte(i * 7)
	}
	arrays := []array{
		{"a.weight", "<f4", []int{2}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"b", "|u1", []int{2, 4}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"one", "<f4", []int{1}, []byte{0, 0, 0x80, 0x3f}},
		{"scalar", "<f2", nil, []byte{0x00, 0x3c}},
		{"empty", "|i1", []int{0, 3}, nil},
		{"layers/0/w", "<f4", []int{3, 1000}, big},
	}
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprint("compress=", compress), func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, compress)
			for _, a := range arrays {
				if err := w.WriteArray(a.name, a.descr, a.shape, a.data); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			if err != nil {
				t.Fatal(err)
			}
			if len(zr.File) != len(arrays) {
				t.Fatalf("%d files, want %d", len(zr.File), len(arrays))
			}
			for i, f := range zr.File {
				a := arrays[i]
				if f.Name != a.name+".npy" {
					t.Errorf("file %d is %s, want %s.npy", i, f.Name, a.name)
				}
				wantMethod := zip.Store
				if compress {
					wantMethod = zip.Deflate
				}
				if f.Method != wantMethod {
					t.Errorf("%s: method %d, want %d", f.Name, f.Method, wantMethod)
				}
				rc, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				descr, shape, data, err := parseNpy(b)
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				if descr != a.descr || fmt.Sprint(shape) != fmt.Sprint(a.shape) || !bytes.Equal(data, a.data) {
					t.Errorf("%s: read back %q %v (%d bytes), want %q %v (%d bytes)", f.Name, descr, shape, len(data), a.descr, a.shape, len(a.data))
				}
			}
		})
	}
}

func TestWriteArrayErrors(t *testing.T) {
	tests := []struct {
		name, arr, descr string
		shape            []int
		size             int
		want             string
	}{
		{"repeated", "x", "|u1", []int{1}, 1, "twice"},
		{"size mismatch", "c", "<f4", []int{3}, 8, "needs 12 bytes"},
		{"complex", "d", "<c8", []int{1}, 8, "not supported"},
		{"float8", "d", "<f1", []int{1}, 1, "not supported"},
		{"bad order", "d", "=f4", []int{1}, 4, "not supported"},
		{"negative", "d", "<f4", []int{-1}, 0, "negative"},
		{"overflow", "d", "<f8", []int{1 << 62, 4}, 0, "too large"},
		{"empty name", "", "|u1", []int{1}, 1, "invalid array name"},
		{"escape", "../x", "|u1", []int{1}, 1, "invalid array name"},
		{"absolute", "/x", "|u1", []int{1}, 1, "invalid array name"},
		{"backslash", `a\b`, "|u1", []int{1}, 1, "invalid array name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWriter(io.Discard, false)
			if err := w.WriteArray("x", "|u1", []int{1}, []byte{1}); err != nil {
				t.Fatal(err)
			}
			err := w.WriteArray(tc.arr, tc.descr, tc.shape, make([]byte, tc.size))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
