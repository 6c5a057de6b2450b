package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"lowbit/half"
	"lowbit/internal/safefile"
)

// IndexFile names the shard index of a sharded checkpoint.
const IndexFile = "model.safetensors.index.json"

// Set is a model's weights: one model.safetensors, or the shards listed by
// model.safetensors.index.json, seen as one collection of tensors.
type Set struct {
	files  []*File
	byName map[string]*File
	names  []string
}

// OpenDir opens the weights of a HuggingFace model directory.
func OpenDir(dir string) (*Set, error) {
	idxPath := filepath.Join(dir, IndexFile)
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(idxPath); err == nil {
		return openIndex(dir, idxPath)
	}
	if _, err := os.Stat(single); err == nil {
		f, err := Open(single)
		if err != nil {
			return nil, err
		}
		return newSet([]*File{f})
	}
	// Other single-file names (e.g. adapter or custom) are taken when unambiguous.
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(matches) == 1 {
		f, err := Open(matches[0])
		if err != nil {
			return nil, err
		}
		return newSet([]*File{f})
	}
	if len(matches) > 1 {
		return nil, fmt.Errorf("safetensors: %s holds %d .safetensors files but no %s to say which belong together", dir, len(matches), IndexFile)
	}
	if bins, _ := filepath.Glob(filepath.Join(dir, "pytorch_model*.bin")); len(bins) > 0 {
		return nil, fmt.Errorf("safetensors: %s has only PyTorch .bin weights (%s); lowbit reads safetensors (convert them with transformers' save_pretrained(safe_serialization=True))", dir, filepath.Base(bins[0]))
	}
	return nil, fmt.Errorf("safetensors: %s has no model.safetensors nor %s", dir, IndexFile)
}

// MaxIndexSize bounds model.safetensors.index.json: a few megabytes for the
// largest checkpoints (one line per tensor), so a corrupt or hostile one is
// refused instead of read without bound.
const MaxIndexSize = 64 << 20

// openIndex opens every shard an index names and checks the index against them.
func openIndex(dir, idxPath string) (*Set, error) {
	b, err := safefile.ReadFile(idxPath, MaxIndexSize)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	shardOf, err := parseIndex(b)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", idxPath, err)
	}
	shards := make([]string, 0, len(shardOf))
	for s := range shardOf {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	var files []*File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, s := range shards {
		p := filepath.Join(dir, s)
		if _, err := os.Stat(p); err != nil {
			closeAll()
			sort.Strings(shardOf[s])
			return nil, fmt.Errorf("safetensors: shard %s (holding %s, per %s) is missing", s, shardOf[s][0], IndexFile)
		}
		f, err := Open(p)
		if err != nil {
			closeAll()
			return nil, err
		}
		files = append(files, f)
		for _, name := range shardOf[s] {
			if _, ok := f.Info(name); !ok {
				closeAll()
				return nil, fmt.Errorf("safetensors: %s lists tensor %s in %s, which does not hold it", IndexFile, name, s)
			}
		}
	}
	set, err := newSet(files)
	if err != nil {
		closeAll()
		return nil, err
	}
	return set, nil
}

// parseIndex reads an index's weight_map into the tensors of each shard,
// refusing shard names that are not plain file names of the model directory
// (an absolute path, one with a directory, "/", "." or "..").
func parseIndex(b []byte) (map[string][]string, error) {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, err
	}
	if len(idx.WeightMap) == 0 {
		return nil, errors.New("weight_map is missing or empty")
	}
	shardOf := map[string][]string{}
	for tensor, shard := range idx.WeightMap {
		if shard == "" || shard == "." || shard == ".." || filepath.Base(shard) != shard || strings.ContainsAny(shard, "/\x00") {
			return nil, fmt.Errorf("tensor %q names shard %q, which is not a file name in the model directory", tensor, shard)
		}
		shardOf[shard] = append(shardOf[shard], tensor)
	}
	return shardOf, nil
}

func newSet(files []*File) (*Set, error) {
	s := &Set{files: files, byName: map[string]*File{}}
	for _, f := range files {
		for _, t := range f.Tensors() {
			if other, dup := s.byName[t.Name]; dup {
				return nil, fmt.Errorf("safetensors: tensor %s is in both %s and %s", t.Name, filepath.Base(other.Path()), filepath.Base(f.Path()))
			}
			s.byName[t.Name] = f
			s.names = append(s.names, t.Name)
		}
	}
	sort.Strings(s.names)
	return s, nil
}

// Names lists every tensor, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Info describes a tensor.
func (s *Set) Info(name string) (TensorInfo, bool) {
	f, ok := s.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Data returns a tensor's bytes (a slice of its file's mapping).
func (s *Set) Data(name string) ([]byte, error) {
	f, ok := s.byName[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: no tensor %q in the model", name)
	}
	return f.Data(name)
}

// Files lists the paths of the files that make up the set.
func (s *Set) Files() []string {
	p := make([]string, len(s.files))
	for i, f := range s.files {
		p[i] = f.Path()
	}
	return p
}

// Close unmaps every file.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// ToFloat32 decodes F32, F16, BF16 or F64 little-endian bytes into dst,
// which must hold exactly the number of elements.
func ToFloat32(dt DType, src []byte, dst []float32) error {
	sz := dt.Size()
	switch dt {
	case "F32", "F16", "BF16", "F64":
	default:
		return fmt.Errorf("safetensors: cannot convert %s to float32", dt)
	}
	if len(src) != sz*len(dst) {
		return fmt.Errorf("safetensors: %d bytes of %s do not hold %d elements", len(src), dt, len(dst))
	}
	switch dt {
	case "F32":
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case "F16":
		for i := range dst {
			dst[i] = half.Float16(binary.LittleEndian.Uint16(src[2*i:])).Float32()
		}
	case "BF16":
		for i := range dst {
			dst[i] = half.BFloat16(binary.LittleEndian.Uint16(src[2*i:])).Float32()
		}
	case "F64":
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	}
	return nil
}

// FromFloat32 encodes float32 values as little-endian F32, F16 or BF16 bytes,
// the inverse of ToFloat32 (rounding to nearest even for the 16-bit types). A
// finite value the 16-bit type would round to infinity is an error naming
// the element, not a silent Inf in the file.
func FromFloat32(dt DType, src []float32) ([]byte, error) {
	overflow := func(i int, v float32, max string) error {
		return fmt.Errorf("safetensors: element %d, %g, is beyond the largest %s (%s)", i, v, dt, max)
	}
	switch dt {
	case "F16":
		b := make([]byte, 2*len(src))
		for i, v := range src {
			h := half.FromFloat32(v)
			if h&0x7fff == 0x7c00 && !math.IsInf(float64(v), 0) {
				return nil, overflow(i, v, "65504")
			}
			binary.LittleEndian.PutUint16(b[2*i:], uint16(h))
		}
		return b, nil
	case "BF16":
		b := make([]byte, 2*len(src))
		for i, v := range src {
			h := half.BFromFloat32(v)
			if h&0x7fff == 0x7f80 && !math.IsInf(float64(v), 0) {
				return nil, overflow(i, v, "3.3895314e+38")
			}
			binary.LittleEndian.PutUint16(b[2*i:], uint16(h))
		}
		return b, nil
	case "F32":
		b := make([]byte, 4*len(src))
		for i, v := range src {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b, nil
	}
	return nil, fmt.Errorf("safetensors: cannot encode float32 as %s", dt)
}
