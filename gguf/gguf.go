// Package gguf reads GGUF files, versions 2 and 3: the single-file format in
// which llama.cpp, Ollama and LM Studio carry models, and in which most
// quantized models travel on the Hub. lowbit reads it so that it can run and
// validate the quants people already use, and check the files it exports.
//
// A GGUF file comes from outside, so the reader trusts none of it. Every
// count, length and offset is checked against the size of the file and
// against the limits below before anything is allocated for it; the memory
// all metadata may take together is bounded too. Tensor data must lie inside
// the file, aligned, and no two tensors may overlap. A file that breaks a
// rule is refused with an error naming the byte offset, key or tensor at
// fault, never with a panic.
//
// The reader parses the header, the metadata and the tensor directory; it
// reads tensor data only when asked, through an io.ReaderAt, so opening a
// file of many gigabytes costs only its header.
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"sort"
	"strings"

	"lowbit/internal/safefile"
)

// Limits on what a file may declare. Each is far above what real models
// need (a vocabulary of 262144 tokens, a few hundred merges lists and
// templates, a thousand or so tensors) and low enough that a hostile header
// cannot make the reader allocate without bound.
const (
	// MaxFileSize bounds the files Open accepts: the largest single GGUF
	// files are a few hundred GiB.
	MaxFileSize = 1 << 40
	// MaxTensors bounds the tensor count of the header.
	MaxTensors = 1 << 16
	// MaxKV bounds the metadata key count of the header.
	MaxKV = 1 << 16
	// MaxNameLen bounds a key or tensor name (the specification allows
	// keys of up to 65535 bytes).
	MaxNameLen = 1<<16 - 1
	// MaxStringLen bounds a string value (a chat template, a whole
	// tokenizer.json).
	MaxStringLen = 64 << 20
	// MaxArrayLen bounds the element count of an array (a vocabulary, its
	// merges).
	MaxArrayLen = 1 << 24
	// MaxArrayDepth bounds arrays nested in arrays.
	MaxArrayDepth = 4
	// MaxDims is the most dimensions a tensor has in ggml.
	MaxDims = 4
	// MaxMetadataBytes bounds the memory the metadata and tensor
	// directory may take together, counted as they are declared.
	MaxMetadataBytes = 1 << 30
	// DefaultAlignment is the alignment of tensor data in a file without
	// general.alignment.
	DefaultAlignment = 32
)

// AlignmentKey is the key that sets the alignment of tensor data.
const AlignmentKey = "general.alignment"

// headerSize is the fixed part: magic, version, tensor count, KV count.
const headerSize = 4 + 4 + 8 + 8

// Sizes of the smallest possible entries, used to refuse a count the rest
// of the file cannot hold before anything is allocated for it.
const (
	minKVSize     = 8 + 4 + 1         // empty key, type, a one-byte value
	minTensorSize = 8 + 4 + 4 + 8     // empty name, no dims, type, offset
	stringMem     = 16                // a Go string header
	valueMem      = 8 + 16            // a Value: two types and an interface
	tensorMem     = 16 + 24 + 4 + 3*8 // a TensorInfo without its name and dims
)

// TensorInfo describes one tensor of the directory.
type TensorInfo struct {
	Name string
	// Dims are in ggml's order: Dims[0] is the length of a row, the
	// dimension that varies fastest, so a PyTorch shape [out, in] is
	// Dims [in, out].
	Dims []int64
	Type GGMLType
	// Offset is where the data starts, counted from the data section.
	Offset int64
	// Size is the bytes of data, from the dims and the type's blocks.
	Size int64
}

// Elements is the number of weights: the product of the dims.
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Shape is the dims in PyTorch's order (the slowest-varying first), as
// safetensors writes them.
func (t TensorInfo) Shape() []int64 {
	s := slices.Clone(t.Dims)
	slices.Reverse(s)
	return s
}

// File is a parsed GGUF file. Its methods but Close may be called
// concurrently.
type File struct {
	r          io.ReaderAt
	closer     io.Closer
	size       int64
	version    uint32
	alignment  int64
	dataOffset int64
	keys       []string
	kv         map[string]Value
	tensors    []TensorInfo
	byName     map[string]int
}

// IsFile says whether path names a GGUF file rather than a model directory:
// a regular file (links followed) whose name ends in .gguf. Model and
// tokenizer loaders ask it to tell the two apart.
func IsFile(path string) bool {
	if !strings.HasSuffix(strings.ToLower(path), ".gguf") {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// Open reads the header, metadata and tensor directory of the GGUF file at
// path. Anything but a regular file (a FIFO, a device, a symlink to
// /dev/zero) is refused before it is read. The file stays open for tensor
// data until Close.
func Open(path string) (*File, error) {
	f, st, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.Size() > MaxFileSize {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %w: %d bytes is over the %d-byte limit", path, safefile.ErrTooLarge, st.Size(), int64(MaxFileSize))
	}
	gf, err := parse(f, st.Size(), MaxMetadataBytes)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	gf.closer = f
	return gf, nil
}

// Read parses a GGUF file of size bytes read through r, which must stay
// readable while the File is used. Close does not close r.
func Read(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("gguf: negative size %d", size)
	}
	f, err := parse(r, size, MaxMetadataBytes)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	return f, nil
}

// Close closes the file Open opened; tensor data cannot be read afterwards.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// Version is the file's GGUF version, 2 or 3.
func (f *File) Version() uint32 { return f.version }

// Alignment is the alignment of tensor data: general.alignment, or 32.
func (f *File) Alignment() int64 { return f.alignment }

// DataOffset is where the data section starts in the file.
func (f *File) DataOffset() int64 { return f.dataOffset }

// Size is the size of the file in bytes.
func (f *File) Size() int64 { return f.size }

// Tensors lists the tensor directory in file order (a copy).
func (f *File) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(f.tensors))
	for i, t := range f.tensors {
		t.Dims = slices.Clone(t.Dims)
		out[i] = t
	}
	return out
}

// Info describes a tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	t := f.tensors[i]
	t.Dims = slices.Clone(t.Dims)
	return t, true
}

// Tensor describes a tensor and returns a reader of exactly its bytes.
func (f *File) Tensor(name string) (TensorInfo, *io.SectionReader, error) {
	t, ok := f.Info(name)
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("gguf: no tensor %q", name)
	}
	return t, io.NewSectionReader(f.r, f.dataOffset+t.Offset, t.Size), nil
}

// TensorData reads a tensor's bytes into memory.
func (f *File) TensorData(name string) ([]byte, error) {
	t, sr, err := f.Tensor(name)
	if err != nil {
		return nil, err
	}
	b := make([]byte, t.Size)
	if _, err := io.ReadFull(sr, b); err != nil {
		return nil, fmt.Errorf("gguf: tensor %q: reading %d bytes at byte %d: %w", name, t.Size, f.dataOffset+t.Offset, err)
	}
	return b, nil
}

// reader reads the file's front matter in order, knowing its offset, the
// bytes left, and the memory the metadata may still take.
type reader struct {
	br     *bufio.Reader
	off    int64
	size   int64
	limit  int64 // the memory budget at the start
	budget int64 // what is left of it
	buf    [8]byte
}

// errAt places an error at a byte offset of the file.
func errAt(off int64, format string, args ...any) error {
	return fmt.Errorf("at byte %d: "+format, append([]any{off}, args...)...)
}

// need checks that n more bytes lie in the file before they are read.
func (r *reader) need(n uint64, what string) error {
	if left := uint64(r.size - r.off); n > left {
		return errAt(r.off, "%s needs %d bytes but the %d-byte file has only %d left (truncated?)", what, n, r.size, left)
	}
	return nil
}

// charge takes n bytes of memory from the budget before they are allocated.
func (r *reader) charge(n uint64, what string) error {
	if n > uint64(r.budget) {
		return errAt(r.off, "%s would take the metadata over its %d-byte memory limit", what, r.limit)
	}
	r.budget -= int64(n)
	return nil
}

func (r *reader) read(p []byte, what string) error {
	if err := r.need(uint64(len(p)), what); err != nil {
		return err
	}
	if _, err := io.ReadFull(r.br, p); err != nil {
		return errAt(r.off, "reading %s: %w", what, err)
	}
	r.off += int64(len(p))
	return nil
}

func (r *reader) u8(what string) (uint8, error) {
	err := r.read(r.buf[:1], what)
	return r.buf[0], err
}

func (r *reader) u16(what string) (uint16, error) {
	err := r.read(r.buf[:2], what)
	return binary.LittleEndian.Uint16(r.buf[:2]), err
}

func (r *reader) u32(what string) (uint32, error) {
	err := r.read(r.buf[:4], what)
	return binary.LittleEndian.Uint32(r.buf[:4]), err
}

func (r *reader) u64(what string) (uint64, error) {
	err := r.read(r.buf[:8], what)
	return binary.LittleEndian.Uint64(r.buf[:8]), err
}

// str reads a length-prefixed string of at most limit bytes.
func (r *reader) str(what string, limit uint64) (string, error) {
	start := r.off
	n, err := r.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > limit {
		return "", errAt(start, "%s of %d bytes is over the %d-byte limit", what, n, limit)
	}
	if err := r.need(n, what); err != nil {
		return "", err
	}
	if err := r.charge(stringMem+n, what); err != nil {
		return "", err
	}
	b := make([]byte, n)
	if err := r.read(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

// parse reads and checks the front matter of a file of size bytes, its
// metadata taking at most budget bytes of memory (a parameter so that tests
// can reach the limit without allocating a gigabyte).
func parse(ra io.ReaderAt, size, budget int64) (*File, error) {
	if size < headerSize {
		return nil, fmt.Errorf("file of %d bytes is too short for a GGUF header (%d bytes)", size, headerSize)
	}
	r := &reader{
		br:     bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 64<<10),
		size:   size,
		limit:  budget,
		budget: budget,
	}
	var magic [4]byte
	if err := r.read(magic[:], "magic"); err != nil {
		return nil, err
	}
	if string(magic[:]) != "GGUF" {
		return nil, fmt.Errorf("not a GGUF file: it starts with %q, not \"GGUF\"", magic[:])
	}
	version, err := r.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, errors.New("GGUF version 1 is not supported (only 2 and 3): convert the model again with a current llama.cpp")
	case bits.ReverseBytes32(version) == 2 || bits.ReverseBytes32(version) == 3:
		return nil, fmt.Errorf("big-endian GGUF (version %d) is not supported", bits.ReverseBytes32(version))
	default:
		return nil, fmt.Errorf("unknown GGUF version %d (only 2 and 3 are supported)", version)
	}
	nTensors, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64("metadata key count")
	if err != nil {
		return nil, err
	}
	if nTensors > MaxTensors {
		return nil, errAt(8, "tensor count %d is over the limit of %d", nTensors, MaxTensors)
	}
	if nKV > MaxKV {
		return nil, errAt(16, "metadata key count %d is over the limit of %d", nKV, MaxKV)
	}
	if err := r.need(nKV*minKVSize+nTensors*minTensorSize, fmt.Sprintf("%d keys and %d tensors", nKV, nTensors)); err != nil {
		return nil, err
	}

	f := &File{
		r:         ra,
		size:      size,
		version:   version,
		alignment: DefaultAlignment,
		keys:      make([]string, 0, nKV),
		kv:        make(map[string]Value, nKV),
		tensors:   make([]TensorInfo, 0, nTensors),
		byName:    make(map[string]int, nTensors),
	}
	for range nKV {
		if err := f.readKV(r); err != nil {
			return nil, err
		}
	}
	for range nTensors {
		if err := f.readTensorInfo(r); err != nil {
			return nil, err
		}
	}
	if err := f.placeData(r.off); err != nil {
		return nil, err
	}
	return f, nil
}

// readKV reads one metadata key and its value.
func (f *File) readKV(r *reader) error {
	start := r.off
	key, err := r.str("key", MaxNameLen)
	if err != nil {
		return err
	}
	if key == "" {
		return errAt(start, "empty key")
	}
	if _, dup := f.kv[key]; dup {
		return errAt(start, "key %q appears twice", key)
	}
	typeOff := r.off
	typ, err := r.u32(fmt.Sprintf("type of key %q", key))
	if err != nil {
		return err
	}
	if ValueType(typ) > TypeFloat64 {
		return errAt(typeOff, "key %q: unknown value type %d", key, typ)
	}
	v, err := readValue(r, ValueType(typ), 0)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	if key == AlignmentKey {
		a, ok := v.v.(uint32)
		if !ok {
			return errAt(start, "key %q holds %s, not a uint32", key, article(v.describe()))
		}
		if a == 0 || a&(a-1) != 0 {
			return errAt(start, "key %q is %d, not a power of two", key, a)
		}
		f.alignment = int64(a)
	}
	f.keys = append(f.keys, key)
	f.kv[key] = v
	return nil
}

// readValue reads a value of type typ; depth counts the arrays it is in.
func readValue(r *reader, typ ValueType, depth int) (Value, error) {
	start := r.off
	what := typ.String()
	v := Value{typ: typ}
	var err error
	switch typ {
	case TypeUint8:
		v.v, err = r.u8(what)
	case TypeInt8:
		var x uint8
		x, err = r.u8(what)
		v.v = int8(x)
	case TypeUint16:
		v.v, err = r.u16(what)
	case TypeInt16:
		var x uint16
		x, err = r.u16(what)
		v.v = int16(x)
	case TypeUint32:
		v.v, err = r.u32(what)
	case TypeInt32:
		var x uint32
		x, err = r.u32(what)
		v.v = int32(x)
	case TypeUint64:
		v.v, err = r.u64(what)
	case TypeInt64:
		var x uint64
		x, err = r.u64(what)
		v.v = int64(x)
	case TypeFloat32:
		var x uint32
		x, err = r.u32(what)
		v.v = math.Float32frombits(x)
	case TypeFloat64:
		var x uint64
		x, err = r.u64(what)
		v.v = math.Float64frombits(x)
	case TypeBool:
		var x uint8
		if x, err = r.u8(what); err == nil && x > 1 {
			err = errAt(start, "bool is %d, not 0 or 1", x)
		}
		v.v = x == 1
	case TypeString:
		v.v, err = r.str("string", MaxStringLen)
	case TypeArray:
		return readArray(r, depth)
	default:
		return Value{}, errAt(start, "unknown value type %d", uint32(typ))
	}
	if err != nil {
		return Value{}, err
	}
	return v, nil
}

// readArray reads an array's element type, count and elements, checking
// the count against the limits, the bytes left and the memory budget
// before the elements are allocated.
func readArray(r *reader, depth int) (Value, error) {
	start := r.off
	if depth >= MaxArrayDepth {
		return Value{}, errAt(start, "arrays nested more than %d deep", MaxArrayDepth)
	}
	et, err := r.u32("array element type")
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	n, err := r.u64("array length")
	if err != nil {
		return Value{}, err
	}
	desc := fmt.Sprintf("array of %d %s", n, elem)
	if n > MaxArrayLen {
		return Value{}, errAt(start, "%s is over the limit of %d elements", desc, MaxArrayLen)
	}
	minSize, mem := elem.fixedSize(), elem.fixedSize()
	switch elem {
	case TypeString:
		minSize, mem = 8, stringMem
	case TypeArray:
		minSize, mem = 4+8, valueMem
	}
	if minSize == 0 {
		return Value{}, errAt(start, "array of unknown value type %d", et)
	}
	if err := r.need(n*uint64(minSize), desc); err != nil {
		return Value{}, err
	}
	if err := r.charge(n*uint64(mem), desc); err != nil {
		return Value{}, err
	}
	v := Value{typ: TypeArray, elem: elem}
	switch elem {
	case TypeUint8:
		v.v, err = readInts(r, n, func(x uint64) uint8 { return uint8(x) })
	case TypeInt8:
		v.v, err = readInts(r, n, func(x uint64) int8 { return int8(x) })
	case TypeUint16:
		v.v, err = readInts(r, n, func(x uint64) uint16 { return uint16(x) })
	case TypeInt16:
		v.v, err = readInts(r, n, func(x uint64) int16 { return int16(x) })
	case TypeUint32:
		v.v, err = readInts(r, n, func(x uint64) uint32 { return uint32(x) })
	case TypeInt32:
		v.v, err = readInts(r, n, func(x uint64) int32 { return int32(x) })
	case TypeUint64:
		v.v, err = readInts(r, n, func(x uint64) uint64 { return x })
	case TypeInt64:
		v.v, err = readInts(r, n, func(x uint64) int64 { return int64(x) })
	case TypeFloat32:
		v.v, err = readInts(r, n, func(x uint64) float32 { return math.Float32frombits(uint32(x)) })
	case TypeFloat64:
		v.v, err = readInts(r, n, math.Float64frombits)
	case TypeBool:
		a := make([]bool, n)
		for i := range a {
			x, err := r.u8("bool")
			if err != nil {
				return Value{}, err
			}
			if x > 1 {
				return Value{}, errAt(r.off-1, "element %d of a bool array is %d, not 0 or 1", i, x)
			}
			a[i] = x == 1
		}
		v.v = a
	case TypeString:
		a := make([]string, n)
		for i := range a {
			if a[i], err = r.str("string", MaxStringLen); err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
		}
		v.v = a
	case TypeArray:
		a := make([]Value, n)
		for i := range a {
			if a[i], err = readArray(r, depth+1); err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
		}
		v.v = a
	}
	if err != nil {
		return Value{}, err
	}
	return v, nil
}

// readInts reads n little-endian numbers of the element size of T, whose
// bits conv turns into a T.
func readInts[T any](r *reader, n uint64, conv func(uint64) T) ([]T, error) {
	var zero T
	size := binary.Size(zero)
	a := make([]T, n)
	for i := range a {
		if err := r.read(r.buf[:size], "array element"); err != nil {
			return nil, err
		}
		var x uint64
		for j := size - 1; j >= 0; j-- {
			x = x<<8 | uint64(r.buf[j])
		}
		a[i] = conv(x)
	}
	return a, nil
}

// readTensorInfo reads one entry of the tensor directory and works out the
// size of its data.
func (f *File) readTensorInfo(r *reader) error {
	start := r.off
	name, err := r.str("tensor name", MaxNameLen)
	if err != nil {
		return err
	}
	if name == "" {
		return errAt(start, "empty tensor name")
	}
	if _, dup := f.byName[name]; dup {
		return errAt(start, "tensor %q appears twice", name)
	}
	fail := func(format string, args ...any) error {
		return errAt(start, "tensor %q: "+format, append([]any{name}, args...)...)
	}
	nd, err := r.u32(fmt.Sprintf("dim count of tensor %q", name))
	if err != nil {
		return err
	}
	if nd > MaxDims {
		return fail("%d dims, more than ggml's %d", nd, MaxDims)
	}
	if err := r.charge(tensorMem+8*uint64(nd), "tensor "+name); err != nil {
		return err
	}
	t := TensorInfo{Name: name, Dims: make([]int64, nd)}
	elems := uint64(1)
	for i := range t.Dims {
		d, err := r.u64(fmt.Sprintf("dim %d of tensor %q", i, name))
		if err != nil {
			return err
		}
		hi, lo := bits.Mul64(elems, d)
		if d > math.MaxInt64 || hi != 0 || lo > math.MaxInt64 {
			return fail("dims %v overflow a 64-bit count", append(t.Dims[:i:i], int64(d)))
		}
		t.Dims[i], elems = int64(d), lo
	}
	typ, err := r.u32(fmt.Sprintf("type of tensor %q", name))
	if err != nil {
		return err
	}
	t.Type = GGMLType(typ)
	if !t.Type.Known() {
		return fail("unknown ggml type %d", typ)
	}
	off, err := r.u64(fmt.Sprintf("data offset of tensor %q", name))
	if err != nil {
		return err
	}
	if off > uint64(r.size) {
		return fail("data offset %d is past the end of the %d-byte file", off, r.size)
	}
	t.Offset = int64(off)
	if nd > 0 && t.Dims[0]%t.Type.BlockSize() != 0 {
		return fail("rows of %d are not a whole number of %s blocks of %d", t.Dims[0], t.Type, t.Type.BlockSize())
	}
	if t.Size, err = t.Type.Bytes(int64(elems)); err != nil {
		return fail("%v", err)
	}
	f.byName[name] = len(f.tensors)
	f.tensors = append(f.tensors, t)
	return nil
}

// placeData sets the start of the data section (the end of the directory,
// rounded up to the alignment) and checks that every tensor's data is
// aligned, inside the file, and overlaps no other tensor's.
func (f *File) placeData(end int64) error {
	f.dataOffset = (end + f.alignment - 1) / f.alignment * f.alignment
	if len(f.tensors) == 0 {
		return nil
	}
	if f.dataOffset > f.size {
		return fmt.Errorf("the data section would start at byte %d, past the end of the %d-byte file", f.dataOffset, f.size)
	}
	room := f.size - f.dataOffset
	for _, t := range f.tensors {
		if t.Offset%f.alignment != 0 {
			return fmt.Errorf("tensor %q: data offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.alignment)
		}
		if t.Offset > room || t.Size > room-t.Offset {
			return fmt.Errorf("tensor %q: %d bytes at data offset %d (byte %d of the file) run past the end of the %d-byte file (truncated?)",
				t.Name, t.Size, t.Offset, f.dataOffset+t.Offset, f.size)
		}
	}
	order := make([]int, len(f.tensors))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return f.tensors[order[i]].Offset < f.tensors[order[j]].Offset })
	var prev *TensorInfo
	for _, i := range order {
		t := &f.tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return fmt.Errorf("tensor %q: bytes [%d, %d) of the data section overlap tensor %q at [%d, %d)",
				t.Name, t.Offset, t.Offset+t.Size, prev.Name, prev.Offset, prev.Offset+prev.Size)
		}
		prev = t
	}
	return nil
}
