// Package safetensors reads and writes the safetensors format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header size, a JSON header naming every tensor's dtype, shape and byte
// range, then the tensor bytes. Files are memory-mapped, so a reader touches
// only the tensors it uses, and every rule of the format is checked on open:
// known dtypes, sizes that agree with shapes, offsets in range, contiguous and
// non-overlapping, covering the whole buffer.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"unicode/utf8"

	"lowbit/internal/safefile"
)

// MaxHeaderSize bounds the JSON header, as the reference implementation does
// (100 MB), so a corrupt size cannot make a reader allocate or parse gigabytes.
const MaxHeaderSize = 100_000_000

// DType is a tensor element type as the format spells it.
type DType string

// sizes of the dtypes the format defines.
var dtypeSizes = map[DType]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"U16": 2, "I16": 2, "F16": 2, "BF16": 2,
	"U32": 4, "I32": 4, "F32": 4,
	"U64": 8, "I64": 8, "F64": 8,
}

// Size is the element size in bytes, 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// TensorInfo locates one tensor: Begin and End are byte offsets within the
// data section (after the header).
type TensorInfo struct {
	Name       string
	DType      DType
	Shape      []int64
	Begin, End int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// header is a parsed and checked header.
type header struct {
	metadata map[string]string
	tensors  []TensorInfo // sorted by offset
	byName   map[string]int
	dataSize int64
}

// parseHeader checks a JSON header against the format's rules; dataSize is
// the number of bytes after the header (the whole data section).
func parseHeader(js []byte, dataSize int64) (*header, error) {
	if !utf8.Valid(js) {
		return nil, errors.New("header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("header is not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("header is not a JSON object")
	}
	h := &header{byName: map[string]int{}}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("header: %w", err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, fmt.Errorf("header: key %q appears twice", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&h.metadata); err != nil {
				return nil, fmt.Errorf("header: __metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var raw struct {
			DType       *DType        `json:"dtype"`
			Shape       []json.Number `json:"shape"`
			DataOffsets []json.Number `json:"data_offsets"`
		}
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		t, err := checkEntry(name, raw.DType, raw.Shape, raw.DataOffsets)
		if err != nil {
			return nil, err
		}
		h.tensors = append(h.tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("header: trailing data after the JSON object")
	}
	sort.SliceStable(h.tensors, func(i, j int) bool {
		a, b := h.tensors[i], h.tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	var pos int64
	for i, t := range h.tensors {
		if t.Begin != pos {
			if t.Begin < pos {
				return nil, fmt.Errorf("tensor %q: bytes [%d, %d) overlap the previous tensor, which ends at %d", t.Name, t.Begin, t.End, pos)
			}
			return nil, fmt.Errorf("tensor %q: starts at %d, leaving a hole after byte %d (the data must be contiguous)", t.Name, t.Begin, pos)
		}
		pos = t.End
		h.byName[t.Name] = i
	}
	if pos != dataSize {
		if pos > dataSize {
			return nil, fmt.Errorf("tensors end at byte %d, past the %d bytes of data (file truncated?)", pos, dataSize)
		}
		return nil, fmt.Errorf("tensors end at byte %d but the data section holds %d bytes", pos, dataSize)
	}
	h.dataSize = dataSize
	return h, nil
}

// checkEntry validates one tensor of the header.
func checkEntry(name string, dt *DType, shape, offsets []json.Number) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if dt == nil {
		return t, fmt.Errorf("tensor %q: field dtype is missing", name)
	}
	t.DType = *dt
	if t.DType.Size() == 0 {
		return t, fmt.Errorf("tensor %q: unknown dtype %q", name, t.DType)
	}
	if shape == nil {
		return t, fmt.Errorf("tensor %q: field shape is missing", name)
	}
	n := uint64(1)
	for _, s := range shape {
		d, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || d < 0 {
			return t, fmt.Errorf("tensor %q: shape %v has an invalid dimension %s", name, shape, s)
		}
		t.Shape = append(t.Shape, d)
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return t, fmt.Errorf("tensor %q: shape %v is too large", name, shape)
		}
		n = lo
	}
	if t.Shape == nil {
		t.Shape = []int64{}
	}
	if len(offsets) != 2 {
		return t, fmt.Errorf("tensor %q: data_offsets must be [begin, end]", name)
	}
	var err error
	if t.Begin, err = strconv.ParseInt(string(offsets[0]), 10, 64); err != nil || t.Begin < 0 {
		return t, fmt.Errorf("tensor %q: invalid data_offsets %v", name, offsets)
	}
	if t.End, err = strconv.ParseInt(string(offsets[1]), 10, 64); err != nil || t.End < t.Begin {
		return t, fmt.Errorf("tensor %q: invalid data_offsets %v (end before begin)", name, offsets)
	}
	hi, want := bits.Mul64(n, uint64(t.DType.Size()))
	if hi != 0 || want > math.MaxInt64 {
		return t, fmt.Errorf("tensor %q: shape %v of %s is too large", name, t.Shape, t.DType)
	}
	if want != uint64(t.End-t.Begin) {
		return t, fmt.Errorf("tensor %q: shape %v of %s needs %d bytes but data_offsets span %d", name, t.Shape, t.DType, want, t.End-t.Begin)
	}
	return t, nil
}

// File is an open, memory-mapped safetensors file.
type File struct {
	path    string
	data    []byte // whole file (mapped or read)
	unmap   func() error
	dataOff int64
	h       *header
}

// Open maps a safetensors file and checks its header. Anything but a regular
// file (a symlink to /dev/zero, a FIFO) is refused before it is read.
func Open(path string) (*File, error) {
	f, st, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	data, unmap, err := mapFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	sf, err := parse(path, data)
	if err != nil {
		unmap()
		return nil, err
	}
	sf.unmap = unmap
	return sf, nil
}

// parse checks the header of a whole file held in data.
func parse(path string, data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("safetensors: %s: file of %d bytes is too short for a header", path, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("safetensors: %s: header size %d exceeds the %d-byte limit", path, n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("safetensors: %s: header size %d runs past the end of the %d-byte file (truncated?)", path, n, len(data))
	}
	h, err := parseHeader(data[8:8+n], int64(len(data))-8-int64(n))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return &File{path: path, data: data, dataOff: 8 + int64(n), h: h, unmap: func() error { return nil }}, nil
}

// Path is the file's path.
func (f *File) Path() string { return f.path }

// Metadata is the header's __metadata__ (nil when absent).
func (f *File) Metadata() map[string]string { return maps.Clone(f.h.metadata) }

// Tensors lists the tensors in offset order (a copy the caller may keep).
func (f *File) Tensors() []TensorInfo { return slices.Clone(f.h.tensors) }

// Info describes a tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.h.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.h.tensors[i], true
}

// DataOffset is where the data section starts in the file.
func (f *File) DataOffset() int64 { return f.dataOff }

// Data returns a tensor's bytes, a slice of the mapping valid until Close.
func (f *File) Data(name string) ([]byte, error) {
	t, ok := f.Info(name)
	if !ok {
		return nil, fmt.Errorf("safetensors: %s has no tensor %q", f.path, name)
	}
	if f.data == nil && t.End > t.Begin {
		return nil, fmt.Errorf("safetensors: %s: tensor %q read after Close", f.path, name)
	}
	return f.data[f.dataOff+t.Begin : f.dataOff+t.End : f.dataOff+t.End], nil
}

// Close unmaps the file; slices from Data must not be used afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap, f.data = nil, nil
	return err
}
