package convert

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// BitNet's packed checkpoint (microsoft/bitnet-b1.58-2B-4T) stores each
// ternary linear as transformers' integrations/bitnet.py packs it: a uint8
// tensor [out/4, in] whose byte [p, c] holds the codes t+1 of output rows
// p, p+P, p+2P and p+3P (P = out/4) at column c in bits 0-1, 2-3, 4-5 and
// 6-7, beside a one-element "<name>_scale" tensor. The scale's meaning
// depends on the linear class the checkpoint's quantization_config names:
// BitLinear (linear_class "bitlinear", the default and what 2B-4T loads
// into) computes y = (t·x_q) / (weight_scale * act_scale), so a weight is
// t / weight_scale; AutoBitLinear in offline mode ("autobitlinear")
// multiplies, so a weight is t * weight_scale. unpackBitNet turns such a
// tensor into lowbit's tq2 with the same ternary codes and per-tensor scale,
// which is the model conversion of the bf16 master weights produces (the
// absmean scale S with W = S*t).

// bitnetValuesPerByte is transformers' VALUES_PER_ITEM.
const bitnetValuesPerByte = 4

// bitnetScale returns tq2's per-tensor scale S (a weight is S*t) from a
// packed checkpoint's weight_scale under linearClass.
func bitnetScale(name string, weightScale float32, linearClass string) (float32, error) {
	if !(weightScale > 0) || math.IsInf(float64(weightScale), 0) {
		return 0, fmt.Errorf("tensor %s_scale: weight scale %v is not a positive finite number", name, weightScale)
	}
	switch linearClass {
	case "", "bitlinear":
		return 1 / weightScale, nil
	case "autobitlinear":
		return weightScale, nil
	}
	return 0, fmt.Errorf("tensor %s: quantization_config linear_class %q is not bitlinear or autobitlinear", name, linearClass)
}

// unpackBitNet converts one packed BitNet linear, packed [packedRows, cols]
// bytes, into a tq2 tensor of 4*packedRows rows whose weights are S*t.
func unpackBitNet(ctx context.Context, name string, packed []byte, packedRows, cols int, weightScale float32, linearClass string) (*quantize.Tensor, error) {
	if packedRows <= 0 || cols <= 0 || len(packed) != packedRows*cols {
		return nil, fmt.Errorf("tensor %s: %d packed bytes do not make a [%d, %d] uint8 matrix", name, len(packed), packedRows, cols)
	}
	s, err := bitnetScale(name, weightScale, linearClass)
	if err != nil {
		return nil, err
	}
	rows := packedRows * bitnetValuesPerByte
	t := make([]float32, rows*cols)
	for p := 0; p < packedRows; p++ {
		for c, b := range packed[p*cols : (p+1)*cols] {
			for i := 0; i < bitnetValuesPerByte; i++ {
				code := b >> (2 * i) & 3
				if code == 3 {
					return nil, fmt.Errorf("tensor %s: byte [%d, %d] = %#02x holds code 3, not a ternary value", name, p, c, b)
				}
				t[(i*packedRows+p)*cols+c] = float32(code) - 1
			}
		}
	}
	// The codes are the values themselves at scale 1; S is set after.
	q, err := quantize.Quantize(ctx, quantize.TQ2, t, rows, cols, quantize.Options{TensorScale: 1})
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	q.Scale = s
	return q, nil
}

// packBitNet is transformers' pack_weights for a ternary matrix t [rows,
// cols] with rows a multiple of 4: the inverse of unpackBitNet's layout.
func packBitNet(t []int8, rows, cols int) ([]byte, error) {
	if rows <= 0 || rows%bitnetValuesPerByte != 0 || cols <= 0 || len(t) != rows*cols {
		return nil, fmt.Errorf("pack: %d values do not make a [%d, %d] matrix with rows a multiple of %d", len(t), rows, cols, bitnetValuesPerByte)
	}
	pr := rows / bitnetValuesPerByte
	out := make([]byte, pr*cols)
	for r := 0; r < rows; r++ {
		i, p := r/pr, r%pr
		for c := 0; c < cols; c++ {
			v := t[r*cols+c]
			if v < -1 || v > 1 {
				return nil, fmt.Errorf("pack: value %d at [%d, %d] is not ternary", v, r, c)
			}
			out[p*cols+c] |= byte(v+1) << (2 * i)
		}
	}
	return out, nil
}

// bitnetLinearClass reads quantization_config.linear_class from a
// config.json ("" when absent, which means BitLinear).
func bitnetLinearClass(configJSON []byte) string {
	var c struct {
		Q struct {
			LinearClass string `json:"linear_class"`
		} `json:"quantization_config"`
	}
	_ = json.Unmarshal(configJSON, &c) // the config parsed once already; absent means BitLinear
	return c.Q.LinearClass
}

// bitnetScaleSuffix names a packed weight's scale tensor: "<weight>_scale".
const bitnetScaleSuffix = "_scale"

// packedBitNetScales maps each packed BitNet weight of set (a U8 tensor
// with a "<name>_scale" sibling) to its scale tensor's name.
func packedBitNetScales(set *safetensors.Set) map[string]string {
	have := map[string]bool{}
	for _, n := range set.Names() {
		have[n] = true
	}
	out := map[string]string{}
	for _, n := range set.Names() {
		if info, _ := set.Info(n); info.DType == "U8" && have[n+bitnetScaleSuffix] {
			out[n] = n + bitnetScaleSuffix
		}
	}
	return out
}

// isPackedScale reports whether name is the scale of a packed weight.
func isPackedScale(name string, packed map[string]string) bool {
	base, ok := strings.CutSuffix(name, bitnetScaleSuffix)
	return ok && packed[base] == name
}

// planPackedBitNet plans a packed linear: tq2 of [4*packedRows, cols],
// its codes and scale taken as they are.
func planPackedBitNet(cfg model.Config, name string, info safetensors.TensorInfo, scaleName string, s settings) (*tensorPlan, error) {
	p := &tensorPlan{name: name, info: info, role: cfg.TensorRole(name), format: quantize.TQ2, packedScale: scaleName}
	if p.role != model.RoleLinear {
		return nil, fmt.Errorf("tensor %s: packed BitNet weights are linear weights, this is a %s tensor", name, p.role)
	}
	if s.linear != quantize.TQ2 {
		return nil, fmt.Errorf("tensor %s: a packed BitNet checkpoint is ternary; convert it with --bits ternary (asked for %s)", name, s.name())
	}
	if len(info.Shape) != 2 || info.Shape[0] <= 0 || info.Shape[1] <= 0 {
		return nil, fmt.Errorf("tensor %s: packed weight of shape %v, want [out/4, in]", name, info.Shape)
	}
	p.rows, p.cols = int(info.Shape[0])*bitnetValuesPerByte, int(info.Shape[1])
	if want := cfg.TensorShape(name); len(want) == 2 && (int64(p.rows) != want[0] || int64(p.cols) != want[1]) {
		return nil, fmt.Errorf("tensor %s: packed shape %v unpacks to [%d, %d], the config says %v", name, info.Shape, p.rows, p.cols, want)
	}
	p.parts = partsOf(p)
	return p, nil
}

// convertPackedBitNet writes a packed linear as tq2: the same ternary codes,
// S from its weight_scale (bitnetScale), no quantization error.
func convertPackedBitNet(ctx context.Context, set *safetensors.Set, w *safetensors.Writer, p *tensorPlan, s settings, bar progressBar) (manifest.Tensor, error) {
	e := manifest.Tensor{Name: p.name, Shape: []int64{int64(p.rows), int64(p.cols)}, Format: string(p.format), SourceDType: string(p.info.DType)}
	raw, err := set.Data(p.name)
	if err != nil {
		return e, err
	}
	sinfo, _ := set.Info(p.packedScale)
	sraw, err := set.Data(p.packedScale)
	if err != nil {
		return e, err
	}
	if sinfo.NumElements() != 1 {
		return e, fmt.Errorf("tensor %s: %d values, a weight scale has one", p.packedScale, sinfo.NumElements())
	}
	ws := make([]float32, 1)
	if err := safetensors.ToFloat32(sinfo.DType, sraw, ws); err != nil {
		return e, fmt.Errorf("tensor %s: %w", p.packedScale, err)
	}
	q, err := unpackBitNet(ctx, p.name, raw, p.rows/bitnetValuesPerByte, p.cols, ws[0], s.bitnetLinearClass)
	if err != nil {
		return e, err
	}
	parts := make(map[string]*partWriter, len(p.parts))
	for _, pp := range p.parts {
		parts[pp.role] = &partWriter{w: w, name: pp.spec.Name, h: sha256.New()}
	}
	if err := parts[manifest.RoleQWeight].write(q.Data); err != nil {
		return e, fmt.Errorf("tensor %s: %w", p.name, err)
	}
	if err := parts[manifest.RoleScale].write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(q.Scale))); err != nil {
		return e, fmt.Errorf("tensor %s: %w", p.name, err)
	}
	zero := 0.0 // the checkpoint's weights are represented exactly
	e.RelL2Error = &zero
	bar.Add(len(raw))
	return finish(e, p, parts)
}

// validationReference is the float source the model check compares the
// converted model with: none ("") for a packed BitNet checkpoint, whose
// ternary weights the lowbit model holds exactly (there is no float model
// to compare with, and the packed directory is not loadable as one).
func validationReference(srcDir string, plans []*tensorPlan) string {
	for _, p := range plans {
		if p.packedScale != "" {
			return ""
		}
	}
	return srcDir
}
