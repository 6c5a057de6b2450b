// Package npz writes numpy .npz archives (a zip of .npy arrays) so that
// numpy-based tools can read lowbit's tensors with np.load. It streams: each
// array goes straight from the caller's bytes into the zip.
package npz

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zip"
)

// Writer writes arrays into an .npz archive.
type Writer struct {
	zw       *zip.Writer
	compress bool
	names    map[string]bool
}

// NewWriter starts an archive on w; compress picks deflate over store.
func NewWriter(w io.Writer, compress bool) *Writer {
	return &Writer{zw: zip.NewWriter(w), compress: compress, names: map[string]bool{}}
}

var descrRE = regexp.MustCompile(`^[<>|][fiub][1248]$`)

// WriteArray adds name.npy holding data with numpy type descr (like "<f4",
// "<f2", "|u1", "|i1") and the given shape, in C order.
func (w *Writer) WriteArray(name, descr string, shape []int, data []byte) error {
	if name == "" || w.names[name] {
		return fmt.Errorf("npz: array name %q is empty or repeated", name)
	}
	if !descrRE.MatchString(descr) {
		return fmt.Errorf("npz: array %s: dtype descriptor %q is not supported", name, descr)
	}
	size, _ := strconv.Atoi(descr[2:])
	n := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("npz: array %s: negative dimension in %v", name, shape)
		}
		n *= d
	}
	if n*size != len(data) {
		return fmt.Errorf("npz: array %s: shape %v of %s needs %d bytes, got %d", name, shape, descr, n*size, len(data))
	}
	w.names[name] = true
	method := zip.Store
	if w.compress {
		method = zip.Deflate
	}
	f, err := w.zw.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: method})
	if err != nil {
		return fmt.Errorf("npz: %w", err)
	}
	if _, err := f.Write(Header(descr, shape)); err != nil {
		return fmt.Errorf("npz: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("npz: %w", err)
	}
	return nil
}

// Close finishes the archive (it does not close the underlying writer).
func (w *Writer) Close() error { return w.zw.Close() }

// Header is the .npy v1.0 header for an array: magic, version, and a Python
// dict literal padded with spaces and a newline so data starts at a multiple of 64.
func Header(descr string, shape []int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := "(" + strings.Join(dims, ", ") + ")"
	if len(shape) == 1 {
		tuple = "(" + dims[0] + ",)"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, tuple)
	total := 10 + len(dict) + 1
	pad := (64 - total%64) % 64
	hdr := []byte("\x93NUMPY\x01\x00")
	hl := len(dict) + pad + 1
	hdr = append(hdr, byte(hl), byte(hl>>8))
	hdr = append(hdr, dict...)
	hdr = append(hdr, strings.Repeat(" ", pad)...)
	return append(hdr, '\n')
}
