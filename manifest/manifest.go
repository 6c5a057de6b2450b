// Package manifest defines manifest.json, the record that makes a lowbit model
// directory self-describing: where it came from, how it was quantized, and for
// every tensor its format, where its bytes are, a checksum and the error the
// quantization cost. The converter writes it; the runtime and the validator
// read it and refuse a directory whose manifest and data disagree.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"lowbit/internal/atomicfile"
	"lowbit/internal/safefile"
)

// FileName is the manifest's name inside a model directory.
const FileName = "manifest.json"

// MaxSize bounds manifest.json: a few hundred bytes per tensor, a few
// megabytes for the largest models, so a corrupt or hostile one is refused
// instead of read without bound.
const MaxSize = 256 << 20

// FormatVersion is the manifest schema this lowbit writes and reads. A reader
// refuses other versions instead of guessing.
const FormatVersion = 1

// Manifest is the whole of manifest.json.
type Manifest struct {
	FormatVersion int    `json:"format_version"`
	LowbitVersion string `json:"lowbit_version"`
	// Source says which model and which files the directory was made from.
	Source Source `json:"source"`
	// Architecture is the normalized model configuration (model.Config as JSON).
	Architecture json.RawMessage `json:"architecture"`
	// Quantization holds the settings the converter ran with.
	Quantization Quantization `json:"quantization"`
	// Files lists the files of the directory (weights and copied files) with checksums.
	Files []File `json:"files"`
	// Tensors describes every tensor, in the order they are stored.
	Tensors []Tensor `json:"tensors"`
	// Summary totals sizes and errors for people reading the file.
	Summary Summary `json:"summary"`
	// Validation is what the converter's last stage found, so that a model
	// that was not checked says so (absent in manifests from before it).
	Validation *Validation `json:"validation,omitempty"`
}

// Validation summarizes the converter's checks of the model it wrote.
type Validation struct {
	// Status is PASS or FAIL, or NotValidated when no check ran.
	Status string `json:"status"`
	// KLDMean, Top1 and PPLRatio are the model check's figures against the
	// float source (absent when it did not run).
	KLDMean  *float64 `json:"kld_mean,omitempty"`
	Top1     *float64 `json:"top1,omitempty"`
	PPLRatio *float64 `json:"ppl_ratio,omitempty"`
	// NotChecked names each check that did not run, and why.
	NotChecked []string `json:"not_checked,omitempty"`
}

// NotValidated is the Validation status of a model no check ran on.
const NotValidated = "NOT VALIDATED"

func (v *Validation) check() error {
	if v == nil {
		return nil
	}
	switch v.Status {
	case "PASS", "FAIL", NotValidated:
	default:
		return fmt.Errorf("status %q is not PASS, FAIL or %s", v.Status, NotValidated)
	}
	for name, x := range map[string]*float64{"kld_mean": v.KLDMean, "top1": v.Top1, "ppl_ratio": v.PPLRatio} {
		if x != nil && (math.IsNaN(*x) || math.IsInf(*x, 0)) {
			return fmt.Errorf("%s %v is not a finite number", name, *x)
		}
	}
	return nil
}

// Source identifies the original model.
type Source struct {
	RepoID   string `json:"repo_id,omitempty"`
	Revision string `json:"revision,omitempty"`
	Commit   string `json:"commit,omitempty"`
	// Dir is the local directory the weights were read from.
	Dir   string `json:"dir,omitempty"`
	Files []File `json:"files"`
}

// File is one file with its size and sha256 (hex).
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Quantization records the converter's settings.
type Quantization struct {
	// Format is the format of linear weights (q1, q2, q4, q8, tq2, a block
	// format such as q4k, or a float format), or for a mix of formats its
	// name, mix<TargetBits> ("mix3.5"; each tensor's format is in its entry).
	Format          string `json:"format"`
	GroupSize       int    `json:"group_size,omitempty"`
	EmbeddingFormat string `json:"embedding_format"`
	OutputFormat    string `json:"output_format"`
	// Search says whether scales and clipping were searched to minimize squared error.
	Search         bool `json:"search"`
	AllowNonFinite bool `json:"allow_nonfinite,omitempty"`
	// TargetBits is a mix's target: the most bits per linear weight, on
	// average over their parameters (absent for one format).
	TargetBits float64 `json:"target_bits,omitempty"`
	// Calibration says what the search's error was weighted by (absent:
	// every input column alike, as before calibration existed).
	Calibration *Calibration `json:"calibration,omitempty"`
}

// Calibration records the calibration pass: the float model ran over a
// text, and each linear weight's search weighed the error of an input
// column by the mean square of that input.
type Calibration struct {
	// Source is the text: "built-in" (lowbit's own) or the file given.
	Source string `json:"source"`
	// SHA256 is the hex sha256 of the text.
	SHA256 string `json:"sha256"`
	// Tokens is how many tokens the model ran over.
	Tokens int `json:"tokens"`
	// Method names the statistics ("mean-square-activation+block-correlation").
	Method string `json:"method"`
	// Compensation names the error compensation the linear weights were
	// quantized with ("gptq"; absent: none).
	Compensation string `json:"compensation,omitempty"`
}

// String names the calibration as a conversion's label does: its method,
// and "+gptq" with compensation ("none" for no calibration).
func (c *Calibration) String() string {
	switch {
	case c == nil:
		return "none"
	case c.Compensation != "":
		return c.Method + "+" + c.Compensation
	}
	return c.Method
}

func (c *Calibration) check() error {
	if c == nil {
		return nil
	}
	switch {
	case c.Source == "":
		return errors.New("field source is empty")
	case !sha256Hex.MatchString(c.SHA256):
		return fmt.Errorf("sha256 %q is not 64 lowercase hex digits", c.SHA256)
	case c.Tokens <= 0:
		return fmt.Errorf("tokens %d is not positive", c.Tokens)
	case c.Method == "":
		return errors.New("field method is empty")
	}
	return nil
}

// Tensor describes one logical tensor (a weight as the original model names it).
type Tensor struct {
	Name        string  `json:"name"`
	Shape       []int64 `json:"shape"`
	Format      string  `json:"format"`
	GroupSize   int     `json:"group_size,omitempty"`
	SourceDType string  `json:"source_dtype,omitempty"`
	// FallbackFrom is the format the conversion asked for where the tensor
	// could not take it and took Format instead (a block format, q4k, for
	// a matrix whose rows are not whole blocks of it); empty otherwise.
	FallbackFrom string `json:"fallback_from,omitempty"`
	// Parts are the stored pieces: "data" for a float tensor; "qweight",
	// "scales", "mins" or "scale" for a quantized one ("qweight" alone for
	// a block format, whose scales are inside its blocks).
	Parts []Part `json:"parts"`
	// RelL2Error is ||dequantized - original|| / ||original|| (absent for float tensors kept as they were).
	RelL2Error *float64 `json:"rel_l2_error,omitempty"`
}

// Part is one stored array of a tensor: which stored tensor, in which file,
// at which byte range of that file, and its sha256.
type Part struct {
	Role   string  `json:"role"`
	Tensor string  `json:"tensor"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	File   string  `json:"file"`
	// Offsets are the [begin, end) byte offsets within the file.
	Offsets [2]int64 `json:"offsets"`
	SHA256  string   `json:"sha256"`
}

// Summary totals the directory.
type Summary struct {
	Parameters     int64   `json:"parameters"`
	SourceBytes    int64   `json:"source_bytes"`
	OutputBytes    int64   `json:"output_bytes"`
	BitsPerWeight  float64 `json:"bits_per_weight"`
	MeanRelL2Error float64 `json:"mean_rel_l2_error"`
	MaxRelL2Error  float64 `json:"max_rel_l2_error"`
	MaxErrorTensor string  `json:"max_error_tensor,omitempty"`
}

// Part roles.
const (
	RoleData    = "data"
	RoleQWeight = "qweight"
	RoleScales  = "scales"
	RoleMins    = "mins"
	RoleScale   = "scale"
)

var (
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
	knownRole = map[string]bool{RoleData: true, RoleQWeight: true, RoleScales: true, RoleMins: true, RoleScale: true}
)

// Parse decodes and checks a manifest. Unknown fields are refused, so a typo
// or a manifest from a newer lowbit is reported rather than ignored.
func Parse(data []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if dec.More() {
		return nil, errors.New("manifest: trailing data after the JSON object")
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Check verifies the manifest's internal consistency: version, names, shapes,
// part roles, offsets and checksum syntax. It does not read the data files.
func (m *Manifest) Check() error {
	if m.FormatVersion != FormatVersion {
		return fmt.Errorf("manifest: format_version %d is not supported (this lowbit reads version %d)", m.FormatVersion, FormatVersion)
	}
	if a := bytes.TrimSpace(m.Architecture); len(a) == 0 || a[0] != '{' || !json.Valid(a) {
		return errors.New("manifest: field architecture is missing or not a JSON object")
	}
	if m.Quantization.Format == "" {
		return errors.New("manifest: field quantization.format is missing")
	}
	if err := m.Validation.check(); err != nil {
		return fmt.Errorf("manifest: validation: %w", err)
	}
	if err := m.Quantization.Calibration.check(); err != nil {
		return fmt.Errorf("manifest: quantization.calibration: %w", err)
	}
	if t := m.Quantization.TargetBits; t != 0 && !(t > 0 && t <= 64) {
		return fmt.Errorf("manifest: field quantization.target_bits %v is not in (0, 64]", t)
	}
	for _, f := range m.Files {
		if err := checkFile(f); err != nil {
			return fmt.Errorf("manifest: files: %w", err)
		}
	}
	for _, f := range []struct {
		field string
		v     float64
	}{
		{"bits_per_weight", m.Summary.BitsPerWeight},
		{"mean_rel_l2_error", m.Summary.MeanRelL2Error},
		{"max_rel_l2_error", m.Summary.MaxRelL2Error},
	} {
		if !finiteNonNegative(f.v) {
			return fmt.Errorf("manifest: field summary.%s is %v, not a finite non-negative number", f.field, f.v)
		}
	}
	seen := make(map[string]bool, len(m.Tensors))
	stored := make(map[string]bool)
	for i, t := range m.Tensors {
		if t.Name == "" {
			return fmt.Errorf("manifest: tensors[%d]: field name is empty", i)
		}
		if seen[t.Name] {
			return fmt.Errorf("manifest: tensor %q is listed twice", t.Name)
		}
		seen[t.Name] = true
		if t.Format == "" {
			return fmt.Errorf("manifest: tensor %q: field format is empty", t.Name)
		}
		if err := checkShape(t.Shape); err != nil {
			return fmt.Errorf("manifest: tensor %q: shape: %w", t.Name, err)
		}
		if t.GroupSize < 0 {
			return fmt.Errorf("manifest: tensor %q: group_size %d is negative", t.Name, t.GroupSize)
		}
		if len(t.Parts) == 0 {
			return fmt.Errorf("manifest: tensor %q has no parts", t.Name)
		}
		if e := t.RelL2Error; e != nil && !finiteNonNegative(*e) {
			return fmt.Errorf("manifest: tensor %q: field rel_l2_error is %v, not a finite non-negative number", t.Name, *e)
		}
		roles := make(map[string]bool, len(t.Parts))
		for _, p := range t.Parts {
			if !knownRole[p.Role] {
				return fmt.Errorf("manifest: tensor %q: part role %q is not one of data, qweight, scales, mins, scale", t.Name, p.Role)
			}
			if roles[p.Role] {
				return fmt.Errorf("manifest: tensor %q: part %q appears twice", t.Name, p.Role)
			}
			roles[p.Role] = true
			if p.Tensor == "" || p.File == "" {
				return fmt.Errorf("manifest: tensor %q: part %q needs tensor and file", t.Name, p.Role)
			}
			if stored[p.Tensor] {
				return fmt.Errorf("manifest: stored tensor %q is used by two parts", p.Tensor)
			}
			stored[p.Tensor] = true
			if err := checkShape(p.Shape); err != nil {
				return fmt.Errorf("manifest: tensor %q part %q: shape: %w", t.Name, p.Role, err)
			}
			if p.Offsets[0] < 0 || p.Offsets[1] < p.Offsets[0] {
				return fmt.Errorf("manifest: tensor %q part %q: offsets %v are not a valid range", t.Name, p.Role, p.Offsets)
			}
			if !sha256Hex.MatchString(p.SHA256) {
				return fmt.Errorf("manifest: tensor %q part %q: sha256 %q is not 64 lowercase hex digits", t.Name, p.Role, p.SHA256)
			}
			if filepath.IsAbs(p.File) || p.File != filepath.Clean(p.File) || p.File == ".." || len(p.File) > 2 && p.File[:3] == "../" {
				return fmt.Errorf("manifest: tensor %q part %q: file %q must be a plain relative path inside the model directory", t.Name, p.Role, p.File)
			}
		}
		if roles[RoleData] && len(roles) > 1 {
			return fmt.Errorf("manifest: tensor %q mixes a data part with quantized parts", t.Name)
		}
		if !roles[RoleData] && !roles[RoleQWeight] {
			return fmt.Errorf("manifest: tensor %q has neither a data nor a qweight part", t.Name)
		}
	}
	return nil
}

// finiteNonNegative says whether v is a number JSON can carry that an error
// or a size can be: not NaN, not infinite, not negative.
func finiteNonNegative(v float64) bool { return v >= 0 && v <= math.MaxFloat64 }

func checkFile(f File) error {
	if f.Path == "" {
		return errors.New("a file has an empty path")
	}
	if f.Size < 0 {
		return fmt.Errorf("file %q: negative size", f.Path)
	}
	if !sha256Hex.MatchString(f.SHA256) {
		return fmt.Errorf("file %q: sha256 %q is not 64 lowercase hex digits", f.Path, f.SHA256)
	}
	return nil
}

func checkShape(shape []int64) error {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("negative dimension %d", d)
		}
		if d != 0 && n > math.MaxInt64/d {
			return errors.New("element count overflows")
		}
		n *= d
	}
	return nil
}

// Tensor returns the manifest entry of the named tensor.
func (m *Manifest) Tensor(name string) (*Tensor, bool) {
	for i := range m.Tensors {
		if m.Tensors[i].Name == name {
			return &m.Tensors[i], true
		}
	}
	return nil, false
}

// Part returns the tensor's part with the given role.
func (t *Tensor) Part(role string) (*Part, bool) {
	for i := range t.Parts {
		if t.Parts[i].Role == role {
			return &t.Parts[i], true
		}
	}
	return nil, false
}

// Marshal checks the manifest and encodes it as indented JSON with a
// trailing newline; the check names the tensor and field of a value JSON
// cannot carry (NaN, Inf) before the encoder fails without naming it.
func (m *Manifest) Marshal() ([]byte, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// Write stores the manifest in dir under a temporary name and renames it into
// place, so a reader never sees half a manifest.
func (m *Manifest) Write(dir string) error {
	b, err := m.Marshal()
	if err != nil {
		return err
	}
	err = atomicfile.Write(filepath.Join(dir, FileName), 0o644, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return nil
}

// ReadModelDir is Read for a directory that lowbit may replace or remove
// as a model of its own: the directory itself (a link to one is someone
// else's), holding a valid manifest.json.
func ReadModelDir(dir string) (*Manifest, error) {
	st, err := os.Lstat(dir)
	switch {
	case err != nil:
		return nil, err
	case st.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%s is not a directory but a symbolic link", dir)
	case !st.IsDir():
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	return Read(dir)
}

// Read loads and checks dir/manifest.json.
func Read(dir string) (*Manifest, error) {
	path := filepath.Join(dir, FileName)
	b, err := safefile.ReadFile(path, MaxSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not a lowbit model directory: %s is missing", dir, FileName)
		}
		return nil, fmt.Errorf("manifest: %w", err)
	}
	m, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Summarize fills m.Summary from the tensors and files.
func (m *Manifest) Summarize() {
	var s Summary
	var nErr int
	var sumErr float64
	var weightBits float64
	for _, t := range m.Tensors {
		n := int64(1)
		for _, d := range t.Shape {
			n *= d
		}
		s.Parameters += n
		for _, p := range t.Parts {
			weightBits += float64(p.Offsets[1]-p.Offsets[0]) * 8
		}
		if t.RelL2Error != nil {
			nErr++
			sumErr += *t.RelL2Error
			if *t.RelL2Error > s.MaxRelL2Error {
				s.MaxRelL2Error, s.MaxErrorTensor = *t.RelL2Error, t.Name
			}
		}
	}
	for _, f := range m.Source.Files {
		s.SourceBytes += f.Size
	}
	for _, f := range m.Files {
		s.OutputBytes += f.Size
	}
	if s.Parameters > 0 {
		s.BitsPerWeight = weightBits / float64(s.Parameters)
	}
	if nErr > 0 {
		s.MeanRelL2Error = sumErr / float64(nErr)
	}
	m.Summary = s
}

// SortFiles orders file lists by path so manifests compare and diff cleanly.
func (m *Manifest) SortFiles() {
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	sort.Slice(m.Source.Files, func(i, j int) bool { return m.Source.Files[i].Path < m.Source.Files[j].Path })
}
