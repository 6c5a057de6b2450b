package manifest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"path/filepath"

	"lowbit/half"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// Dir is an open lowbit model directory: its manifest and its stored
// tensors, checked against each other as they are read.
type Dir struct {
	Path     string
	Manifest *Manifest
	files    map[string]*safetensors.File
}

// Open reads dir/manifest.json and maps the files it names, checking that
// every part is where the manifest says, with the dtype and shape it says.
// Checksums are verified when a tensor is loaded.
func Open(dir string) (*Dir, error) {
	m, err := Read(dir)
	if err != nil {
		return nil, err
	}
	d := &Dir{Path: dir, Manifest: m, files: map[string]*safetensors.File{}}
	for _, t := range m.Tensors {
		for _, p := range t.Parts {
			f, err := d.file(p.File)
			if err != nil {
				d.Close()
				return nil, err
			}
			info, ok := f.Info(p.Tensor)
			if !ok {
				d.Close()
				return nil, fmt.Errorf("%s: manifest names tensor %s, which %s lacks", dir, p.Tensor, p.File)
			}
			begin, end := f.DataOffset()+info.Begin, f.DataOffset()+info.End
			if string(info.DType) != p.DType || fmt.Sprint(info.Shape) != fmt.Sprint(p.Shape) || begin != p.Offsets[0] || end != p.Offsets[1] {
				d.Close()
				return nil, fmt.Errorf("%s: tensor %s in %s is %s %v at [%d, %d), the manifest says %s %v at %v",
					dir, p.Tensor, p.File, info.DType, info.Shape, begin, end, p.DType, p.Shape, p.Offsets)
			}
		}
	}
	return d, nil
}

func (d *Dir) file(name string) (*safetensors.File, error) {
	if f, ok := d.files[name]; ok {
		return f, nil
	}
	f, err := safetensors.Open(filepath.Join(d.Path, name))
	if err != nil {
		return nil, err
	}
	d.files[name] = f
	return f, nil
}

// Close unmaps the files.
func (d *Dir) Close() error {
	for _, f := range d.files {
		f.Close()
	}
	d.files = nil
	return nil
}

// Has says whether the model holds a tensor.
func (d *Dir) Has(name string) bool {
	_, ok := d.Manifest.Tensor(name)
	return ok
}

// part returns a part's bytes after checking its sha256.
func (d *Dir) part(t *Tensor, role string) ([]byte, *Part, error) {
	p, ok := t.Part(role)
	if !ok {
		return nil, nil, fmt.Errorf("%s: tensor %s has no %s part", d.Path, t.Name, role)
	}
	f, err := d.file(p.File)
	if err != nil {
		return nil, nil, err
	}
	b, err := f.Data(p.Tensor)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != p.SHA256 {
		return nil, nil, fmt.Errorf("%s: tensor %s: checksum mismatch (the file was changed or is corrupt)", d.Path, p.Tensor)
	}
	return b, p, nil
}

// Weight loads a quantized weight as a quantize.Tensor (its bytes stay in the mapping).
func (d *Dir) Weight(name string) (*quantize.Tensor, error) {
	t, ok := d.Manifest.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %s in the manifest", d.Path, name)
	}
	f, err := quantize.ParseFormat(t.Format)
	if err != nil || !f.Quantized() || len(t.Shape) != 2 {
		return nil, fmt.Errorf("%s: tensor %s of format %q and shape %v is not a quantized matrix", d.Path, name, t.Format, t.Shape)
	}
	q := &quantize.Tensor{Format: f, Rows: int(t.Shape[0]), Cols: int(t.Shape[1]), GroupSize: t.GroupSize}
	if q.Data, _, err = d.part(t, RoleQWeight); err != nil {
		return nil, err
	}
	switch {
	case f.Spec().BlockScales:
		// The scales are inside the blocks.
	case f.Spec().TensorScale:
		b, _, err := d.part(t, RoleScale)
		if err != nil {
			return nil, err
		}
		if len(b) != 4 {
			return nil, fmt.Errorf("%s: tensor %s: scale has %d bytes, want 4", d.Path, name, len(b))
		}
		q.Scale = math.Float32frombits(binary.LittleEndian.Uint32(b))
	default:
		b, _, err := d.part(t, RoleScales)
		if err != nil {
			return nil, err
		}
		q.Scales = halves(b)
		if f.Spec().Mins {
			if b, _, err = d.part(t, RoleMins); err != nil {
				return nil, err
			}
			q.Mins = halves(b)
		}
	}
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", d.Path, name, err)
	}
	if err := q.CheckBlocks(); err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", d.Path, name, err)
	}
	return q, nil
}

func halves(b []byte) []half.Float16 {
	h := make([]half.Float16, len(b)/2)
	for i := range h {
		h[i] = half.Float16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return h
}

// Float32 loads a float tensor (F32, F16 or BF16 as stored) as float32.
func (d *Dir) Float32(name string) ([]float32, []int64, error) {
	t, ok := d.Manifest.Tensor(name)
	if !ok {
		return nil, nil, fmt.Errorf("%s: no tensor %s in the manifest", d.Path, name)
	}
	b, p, err := d.part(t, RoleData)
	if err != nil {
		return nil, nil, err
	}
	dt := safetensors.DType(p.DType)
	if dt.Size() == 0 {
		return nil, nil, fmt.Errorf("%s: tensor %s: unknown dtype %s", d.Path, name, p.DType)
	}
	out := make([]float32, len(b)/dt.Size())
	if err := safetensors.ToFloat32(dt, b, out); err != nil {
		return nil, nil, fmt.Errorf("%s: tensor %s: %w", d.Path, name, err)
	}
	return out, t.Shape, nil
}
