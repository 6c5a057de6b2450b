// Package npz writes numpy .npz archives (a zip of .npy arrays) so that
// numpy-based tools can read lowbit's tensors with np.load. It streams: each
// array goes straight from the caller's bytes into the zip.
package npz

import (
	"fmt"
	"io"
	"math"
	"math/bits"
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

// descrSizes lists the numpy type descriptors lowbit writes (any byte order)
// and their element sizes.
var descrSizes = map[string]int{
	"f2": 2, "f4": 4, "f8": 8,
	"i1": 1, "i2": 2, "i4": 4, "i8": 8,
	"u1": 1, "u2": 2, "u4": 4, "u8": 8,
	"b1": 1,
}

// elemSize is the element size of a descriptor such as "<f4" or "|u1", 0 if
// it is not supported.
func elemSize(descr string) int {
	if len(descr) != 3 || !strings.ContainsRune("<>|", rune(descr[0])) {
		return 0
	}
	return descrSizes[descr[1:]]
}

// WriteArray adds name.npy holding data with numpy type descr (like "<f4",
// "<f2", "|u1", "|i1") and the given shape, in C order.
func (w *Writer) WriteArray(name, descr string, shape []int, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if w.names[name] {
		return fmt.Errorf("npz: array %s written twice", name)
	}
	size := elemSize(descr)
	if size == 0 {
		return fmt.Errorf("npz: array %s: dtype descriptor %q is not supported", name, descr)
	}
	n := uint64(size)
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("npz: array %s: negative dimension in %v", name, shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return fmt.Errorf("npz: array %s: shape %v is too large", name, shape)
		}
		n = lo
	}
	if n != uint64(len(data)) {
		return fmt.Errorf("npz: array %s: shape %v of %s needs %d bytes, got %d", name, shape, descr, n, len(data))
	}
	hdr, err := Header(descr, shape)
	if err != nil {
		return fmt.Errorf("npz: array %s: %w", name, err)
	}
	w.names[name] = true
	method := zip.Store
	if w.compress {
		method = zip.Deflate
	}
	f, err := w.zw.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: method})
	if err != nil {
		return fmt.Errorf("npz: array %s: %w", name, err)
	}
	if _, err := f.Write(hdr); err != nil {
		return fmt.Errorf("npz: array %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("npz: array %s: %w", name, err)
	}
	return nil
}

// checkName refuses names that would make a zip entry escape the archive's
// folder when unpacked (absolute, "..", backslashes) or that are empty.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("npz: invalid array name %q", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." || part == "." || part == "" {
			return fmt.Errorf("npz: invalid array name %q", name)
		}
	}
	return nil
}

// Close finishes the archive (it does not close the underlying writer).
func (w *Writer) Close() error {
	if err := w.zw.Close(); err != nil {
		return fmt.Errorf("npz: %w", err)
	}
	return nil
}

// Header is the .npy v1.0 header for an array: magic, version, and a Python
// dict literal padded with spaces and a newline so data starts at a multiple
// of 64. Version 1.0 stores the header length in 16 bits, hence the error.
func Header(descr string, shape []int) ([]byte, error) {
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
	hl := len(dict) + pad + 1
	if hl > math.MaxUint16 {
		return nil, fmt.Errorf("npy header of %d bytes exceeds the 65535 of format 1.0", hl)
	}
	hdr := []byte("\x93NUMPY\x01\x00")
	hdr = append(hdr, byte(hl), byte(hl>>8))
	hdr = append(hdr, dict...)
	hdr = append(hdr, strings.Repeat(" ", pad)...)
	return append(hdr, '\n'), nil
}
