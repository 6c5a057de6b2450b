package npz

import (
	"archive/zip"
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestHeader(t *testing.T) {
	tests := []struct {
		descr string
		shape []int
		dict  string
	}{
		{"<f4", []int{2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
		{"|u1", []int{5}, "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }"},
		{"<f2", nil, "{'descr': '<f2', 'fortran_order': False, 'shape': (), }"},
	}
	for _, tc := range tests {
		h := Header(tc.descr, tc.shape)
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
	}
}

func TestWriteArrays(t *testing.T) {
	for _, compress := range []bool{false, true} {
		var buf bytes.Buffer
		w := NewWriter(&buf, compress)
		data := []byte{1, 2, 3, 4, 5, 6, 7, 8}
		if err := w.WriteArray("a.weight", "<f4", []int{2}, data); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteArray("b", "|u1", []int{2, 4}, data); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteArray("b", "|u1", []int{8}, data); err == nil {
			t.Error("repeated name accepted")
		}
		if err := w.WriteArray("c", "<f4", []int{3}, data); err == nil {
			t.Error("size mismatch accepted")
		}
		if err := w.WriteArray("d", "<c8", []int{1}, data); err == nil {
			t.Error("unsupported descr accepted")
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatal(err)
		}
		if len(zr.File) != 2 || zr.File[0].Name != "a.weight.npy" || zr.File[1].Name != "b.npy" {
			t.Fatalf("files %v", zr.File)
		}
		for _, f := range zr.File {
			rc, _ := f.Open()
			b, _ := io.ReadAll(rc)
			hl := int(b[8]) | int(b[9])<<8
			if !bytes.Equal(b[10+hl:], data) {
				t.Errorf("%s: data differs", f.Name)
			}
		}
	}
}
