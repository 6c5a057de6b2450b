package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
)

// Spec declares a tensor to write.
type Spec struct {
	Name  string
	DType DType
	Shape []int64
}

// Writer writes a safetensors file whose header is planned up front, since
// every size is known before the data: tensors can then be written in any
// order, from several goroutines, and in pieces, so big models stream to disk.
type Writer struct {
	f       *os.File
	path    string // final name
	tmp     string // name while writing, renamed to path by Close
	dataOff int64
	infos   map[string]TensorInfo
	order   []string

	mu      sync.Mutex
	written map[string]int64 // bytes written per tensor
}

// Create plans the header (offsets in the order given), writes it and
// returns a writer for the data. The header is padded with spaces to a
// multiple of 8 bytes, as the reference implementation does. The file is
// written under a temporary name in the same folder and appears at path
// only when Close succeeds.
func Create(path string, specs []Spec, metadata map[string]string) (*Writer, error) {
	w := &Writer{path: path, infos: map[string]TensorInfo{}, written: map[string]int64{}}
	hdr := map[string]any{}
	if len(metadata) > 0 {
		hdr["__metadata__"] = metadata
	}
	var pos int64
	for _, s := range specs {
		if s.Name == "" || s.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: invalid tensor name %q", s.Name)
		}
		if _, dup := w.infos[s.Name]; dup {
			return nil, fmt.Errorf("safetensors: tensor %q declared twice", s.Name)
		}
		if s.DType.Size() == 0 {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", s.Name, s.DType)
		}
		shape := s.Shape
		if shape == nil {
			shape = []int64{}
		}
		t := TensorInfo{Name: s.Name, DType: s.DType, Shape: slices.Clone(shape), Begin: pos}
		size, err := byteSize(shape, s.DType.Size())
		if err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", s.Name, err)
		}
		if size > math.MaxInt64-pos {
			return nil, fmt.Errorf("safetensors: tensor %q: the file would exceed %d bytes", s.Name, int64(math.MaxInt64))
		}
		t.End = pos + size
		pos = t.End
		w.infos[s.Name] = t
		w.order = append(w.order, s.Name)
		hdr[s.Name] = map[string]any{"dtype": s.DType, "shape": shape, "data_offsets": [2]int64{t.Begin, t.End}}
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	w.f, w.tmp = f, f.Name()
	// CreateTemp makes the file private; weights are ordinary readable files.
	if err := f.Chmod(0o644); err != nil {
		w.Abort()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	buf := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	if _, err := f.Write(append(buf, js...)); err != nil {
		w.Abort()
		return nil, fmt.Errorf("safetensors: write header of %s: %w", path, err)
	}
	w.dataOff = int64(8 + len(js))
	if err := f.Truncate(w.dataOff + pos); err != nil {
		w.Abort()
		return nil, fmt.Errorf("safetensors: size %s: %w", path, err)
	}
	return w, nil
}

// Info describes a declared tensor (offsets within the data section).
func (w *Writer) Info(name string) (TensorInfo, bool) {
	t, ok := w.infos[name]
	return t, ok
}

// FileOffsets converts a tensor's data-section offsets to file offsets.
func (w *Writer) FileOffsets(t TensorInfo) (begin, end int64) {
	return w.dataOff + t.Begin, w.dataOff + t.End
}

// Write writes a whole tensor; the size must match its declaration.
func (w *Writer) Write(name string, data []byte) error {
	t, ok := w.infos[name]
	if !ok {
		return fmt.Errorf("safetensors: tensor %q was not declared", name)
	}
	if int64(len(data)) != t.End-t.Begin {
		return fmt.Errorf("safetensors: tensor %q: %d bytes given, %d declared", name, len(data), t.End-t.Begin)
	}
	return w.WriteAt(name, 0, data)
}

// WriteAt writes part of a tensor at offset off within it. Pieces may come
// in any order but must not overlap; safe for concurrent use.
func (w *Writer) WriteAt(name string, off int64, data []byte) error {
	t, ok := w.infos[name]
	if !ok {
		return fmt.Errorf("safetensors: tensor %q was not declared", name)
	}
	if off < 0 || off+int64(len(data)) > t.End-t.Begin {
		return fmt.Errorf("safetensors: tensor %q: write of %d bytes at %d runs past its %d bytes", name, len(data), off, t.End-t.Begin)
	}
	w.mu.Lock()
	if w.written[name]+int64(len(data)) > t.End-t.Begin {
		w.mu.Unlock()
		return fmt.Errorf("safetensors: tensor %q: written more than once (%d bytes declared)", name, t.End-t.Begin)
	}
	w.written[name] += int64(len(data))
	w.mu.Unlock()
	if _, err := w.f.WriteAt(data, w.dataOff+t.Begin+off); err != nil {
		return fmt.Errorf("safetensors: write %s to %s: %w", name, w.path, err)
	}
	return nil
}

// Close checks that every tensor was written in full, syncs and closes.
func (w *Writer) Close() error {
	var missing []string
	for _, name := range w.order {
		t := w.infos[name]
		if w.written[name] != t.End-t.Begin {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		w.Abort()
		return fmt.Errorf("safetensors: %s: %d tensors not fully written (first: %s)", w.path, len(missing), missing[0])
	}
	if err := w.f.Sync(); err != nil {
		w.Abort()
		return fmt.Errorf("safetensors: sync %s: %w", w.path, err)
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("safetensors: close %s: %w", w.path, err)
	}
	if err := os.Rename(w.tmp, w.path); err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// Abort closes and removes the partly written file; path is left untouched.
func (w *Writer) Abort() error {
	err := w.f.Close()
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	if rerr := os.Remove(w.tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// byteSize is the byte size of a tensor of the given shape, checked for
// negative dimensions and overflow.
func byteSize(shape []int64, elemSize int) (int64, error) {
	n := uint64(elemSize)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in %v", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n = lo
	}
	return int64(n), nil
}
