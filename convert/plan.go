package convert

import (
	"fmt"
	"sort"
	"strings"

	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// tensorPlan is what the converter will do with one source tensor: its
// format and the stored parts it becomes.
type tensorPlan struct {
	name   string
	info   safetensors.TensorInfo
	role   model.Role
	format quantize.Format
	rows   int
	cols   int
	group  int
	parts  []partPlan
	// packedScale names the weight_scale tensor of a packed BitNet weight (bitnet.go).
	packedScale string
}

// partPlan is one stored array of a tensor.
type partPlan struct {
	role  string // manifest.Role*
	spec  safetensors.Spec
	bytes int64
}

// planTensors decides the format of every tensor of the source by its role
// in the architecture, and the stored arrays each becomes.
func planTensors(cfg model.Config, set *safetensors.Set, s settings) ([]*tensorPlan, error) {
	names := set.Names()
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
	}
	var missing []string
	for _, n := range cfg.ExpectedTensors() {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		more := ""
		if len(missing) > 5 {
			more = fmt.Sprintf(" and %d more", len(missing)-5)
			missing = missing[:5]
		}
		return nil, fmt.Errorf("the checkpoint lacks tensors the %s architecture needs: %s%s", cfg.Arch, strings.Join(missing, ", "), more)
	}

	var plans []*tensorPlan
	packed := packedBitNetScales(set)
	for _, name := range names {
		info, _ := set.Info(name)
		if isPackedScale(name, packed) {
			continue
		}
		if scale, ok := packed[name]; ok {
			p, err := planPackedBitNet(cfg, name, info, scale, s)
			if err != nil {
				return nil, err
			}
			plans = append(plans, p)
			continue
		}
		switch info.DType {
		case "F32", "F16", "BF16":
		default:
			return nil, fmt.Errorf("tensor %s: dtype %s is not supported (lowbit reads F32, F16 and BF16 checkpoints)", name, info.DType)
		}
		p := &tensorPlan{name: name, info: info, role: cfg.TensorRole(name)}
		switch p.role {
		case model.RoleLinear:
			p.format = s.linear
		case model.RoleEmbedding:
			p.format = s.embedding
		case model.RoleOutput:
			p.format = s.output
		default:
			p.format = quantize.F32
		}
		if p.format.Quantized() {
			if len(info.Shape) != 2 {
				return nil, fmt.Errorf("tensor %s: a %s weight must be 2-D, has shape %v", name, p.role, info.Shape)
			}
			p.rows, p.cols = int(info.Shape[0]), int(info.Shape[1])
			if p.rows == 0 || p.cols == 0 {
				return nil, fmt.Errorf("tensor %s: empty weight of shape %v", name, info.Shape)
			}
			p.group = s.groupSize
			if p.role != model.RoleLinear {
				p.group = s.tableGroup(p.format)
			}
			if p.group == 0 {
				p.group = p.format.DefaultGroupSize()
			}
			if p.format == quantize.TQ2 {
				p.group = 0
			}
		}
		p.parts = partsOf(p)
		plans = append(plans, p)
	}
	return plans, nil
}

// partsOf lists the stored arrays of a planned tensor, following
// ARCHITECTURE.md's naming: <name>.qweight, .scales, .mins, .scale, or the
// plain name for a float tensor.
func partsOf(p *tensorPlan) []partPlan {
	if !p.format.Quantized() {
		dt := safetensors.DType("F32")
		switch p.format {
		case quantize.F16:
			dt = "F16"
		case quantize.BF16:
			dt = "BF16"
		}
		n := p.info.NumElements()
		return []partPlan{{role: manifest.RoleData, spec: safetensors.Spec{Name: p.name, DType: dt, Shape: p.info.Shape}, bytes: n * int64(dt.Size())}}
	}
	shape := quantize.Tensor{Format: p.format, Rows: p.rows, Cols: p.cols, GroupSize: p.group}
	rows, rb := int64(p.rows), int64(shape.RowBytes())
	parts := []partPlan{{role: manifest.RoleQWeight, spec: safetensors.Spec{Name: p.name + ".qweight", DType: "U8", Shape: []int64{rows, rb}}, bytes: rows * rb}}
	switch p.format {
	case quantize.TQ2:
		parts = append(parts, partPlan{role: manifest.RoleScale, spec: safetensors.Spec{Name: p.name + ".scale", DType: "F32", Shape: []int64{1}}, bytes: 4})
	default:
		g := int64(shape.Groups())
		parts = append(parts, partPlan{role: manifest.RoleScales, spec: safetensors.Spec{Name: p.name + ".scales", DType: "F16", Shape: []int64{rows, g}}, bytes: rows * g * 2})
		if p.format == quantize.Q4 || p.format == quantize.Q2 {
			parts = append(parts, partPlan{role: manifest.RoleMins, spec: safetensors.Spec{Name: p.name + ".mins", DType: "F16", Shape: []int64{rows, g}}, bytes: rows * g * 2})
		}
	}
	return parts
}

// specsOf flattens the plans into the writer's header, in plan order.
func specsOf(plans []*tensorPlan) []safetensors.Spec {
	var specs []safetensors.Spec
	for _, p := range plans {
		for _, part := range p.parts {
			specs = append(specs, part.spec)
		}
	}
	return specs
}

// byWork orders plans largest first, so parallel workers finish together.
func byWork(plans []*tensorPlan) []*tensorPlan {
	out := append([]*tensorPlan(nil), plans...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].info.NumElements() > out[j].info.NumElements() })
	return out
}
