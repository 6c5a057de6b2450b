package convert

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// tensorPlan is what the converter will do with one source tensor: its
// format and the stored parts it becomes.
type tensorPlan struct {
	name string
	// src is the checkpoint tensor holding it ("": name; lm_head.weight
	// for tied embeddings saved only under the head's name).
	src    string
	info   safetensors.TensorInfo
	role   model.Role
	format quantize.Format
	// fallbackFrom is the format asked for where the tensor cannot take it
	// (a block format whose blocks do not divide its rows) and takes format
	// instead; empty otherwise.
	fallbackFrom quantize.Format
	rows         int
	cols         int
	group        int
	parts        []partPlan
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
// in the architecture, and the stored arrays each becomes. It first checks
// the checkpoint against the configuration, so that nothing is quantized
// from a checkpoint that cannot make a working model: every tensor the
// architecture needs is there with the shape config.json implies, and every
// tensor there is one the architecture uses. Tensors that transformers
// itself ignores are left out, each with a note.
func planTensors(cfg model.Config, set *safetensors.Set, s settings) (plans []*tensorPlan, notes []string, err error) {
	names := set.Names()
	packed := packedBitNetScales(set)
	if err := checkTensors(cfg, set, packed); err != nil {
		return nil, nil, err
	}
	has := func(n string) bool { _, ok := set.Info(n); return ok }
	embedSrc := cfg.StoredAs("model.embed_tokens.weight", has)
	fallbacks := map[string][]string{} // tensors by the reason they fall back
	var whys []string
	for _, name := range names {
		info, _ := set.Info(name)
		if isPackedScale(name, packed) {
			continue
		}
		src := ""
		if name == embedSrc && name != "model.embed_tokens.weight" {
			name, src = "model.embed_tokens.weight", name // the tied table, stored as the head
		} else if why := ignored(cfg, name); why != "" {
			notes = append(notes, fmt.Sprintf("tensor %s left out: %s", name, why))
			continue
		}
		if scale, ok := packed[name]; ok {
			p, err := planPackedBitNet(cfg, name, info, scale, s)
			if err != nil {
				return nil, nil, err
			}
			plans = append(plans, p)
			continue
		}
		switch info.DType {
		case "F32", "F16", "BF16":
		default:
			return nil, nil, fmt.Errorf("tensor %s: dtype %s is not supported (lowbit reads F32, F16 and BF16 checkpoints)", name, info.DType)
		}
		p := &tensorPlan{name: name, src: src, info: info, role: cfg.TensorRole(name)}
		switch p.role {
		case model.RoleLinear:
			p.format = s.linear
			if s.target > 0 {
				p.format = mixPlaceholder // planMix chooses each one's
			}
		case model.RoleEmbedding:
			p.format = s.embedding
		case model.RoleOutput:
			p.format = s.output
		default:
			p.format = quantize.F32
		}
		if p.format.Quantized() {
			if len(info.Shape) != 2 {
				return nil, nil, fmt.Errorf("tensor %s: a %s weight must be 2-D, has shape %v", name, p.role, info.Shape)
			}
			p.rows, p.cols = int(info.Shape[0]), int(info.Shape[1])
			if p.rows == 0 || p.cols == 0 {
				return nil, nil, fmt.Errorf("tensor %s: empty weight of shape %v", name, info.Shape)
			}
			if f, why := p.format.FallbackFor(p.cols); f != p.format {
				p.fallbackFrom, p.format = p.format, f
				if fallbacks[why] == nil {
					whys = append(whys, why)
				}
				fallbacks[why] = append(fallbacks[why], name)
			}
			switch spec := p.format.Spec(); {
			case spec.TensorScale:
				p.group = 0
			case spec.BlockScales:
				p.group = spec.Block
			default:
				p.group = s.groupSize
				if p.role != model.RoleLinear {
					p.group = s.tableGroup(p.format)
				}
				if p.group == 0 {
					p.group = p.format.DefaultGroupSize()
				}
			}
		}
		p.parts = partsOf(p)
		plans = append(plans, p)
	}
	for _, why := range whys { // one note a reason: a model may have hundreds
		notes = append(notes, fmt.Sprintf("%s: %s", listSome(fallbacks[why]), why))
	}
	return plans, notes, nil
}

// checkTensors compares the checkpoint's tensors with what the configuration
// implies: missing tensors, wrong shapes, layers beyond num_hidden_layers
// and tensors the architecture does not use are each an error that names
// them. A packed BitNet weight's shape is checked when it is planned.
func checkTensors(cfg model.Config, set *safetensors.Set, packed map[string]string) error {
	var missing, shapes []string
	expected := map[string]bool{}
	has := func(n string) bool { _, ok := set.Info(n); return ok }
	for _, n := range cfg.ExpectedTensors() {
		expected[n] = true
		info, ok := set.Info(cfg.StoredAs(n, has))
		switch {
		case !ok:
			missing = append(missing, n)
		case packed[n] != "":
		case !slices.Equal(info.Shape, cfg.TensorShape(n)):
			shapes = append(shapes, fmt.Sprintf("%s is %v, not %v", n, info.Shape, cfg.TensorShape(n)))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the checkpoint lacks tensors the %s architecture needs: %s", cfg.Arch, listSome(missing))
	}
	if len(shapes) > 0 {
		return fmt.Errorf("tensor shapes disagree with config.json (hidden_size %d, intermediate_size %d, %d heads of %d, %d kv heads, vocab_size %d): %s",
			cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHeads, cfg.HeadDim, cfg.NumKVHeads, cfg.VocabSize, listSome(shapes))
	}
	var unused []string
	lastLayer := -1
	for _, n := range set.Names() {
		if expected[n] || isPackedScale(n, packed) || ignored(cfg, n) != "" {
			continue
		}
		if l, ok := layerOf(n); ok && l >= cfg.NumLayers {
			lastLayer = max(lastLayer, l)
			continue
		}
		unused = append(unused, n)
	}
	if lastLayer >= 0 {
		return fmt.Errorf("the checkpoint holds layers up to %d, but config.json's num_hidden_layers is %d", lastLayer, cfg.NumLayers)
	}
	if len(unused) > 0 {
		return fmt.Errorf("the checkpoint holds tensors the %s architecture does not use (lowbit would drop them and compute another model): %s", cfg.Arch, listSome(unused))
	}
	return nil
}

// ignored says why transformers itself leaves a checkpoint's tensor unused
// ("" when it does not): rotary frequency buffers that older checkpoints
// saved, and a stored head when config.json ties it to the embeddings.
func ignored(cfg model.Config, name string) string {
	switch {
	case strings.HasSuffix(name, "rotary_emb.inv_freq"):
		return "a rotary buffer, computed from config.json"
	case name == "lm_head.weight" && cfg.TieEmbeddings:
		return "config.json ties the output head to the token embeddings"
	}
	return ""
}

// layerOf is the layer index of a model.layers.N.* tensor name.
func layerOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	return l, err == nil && l >= 0
}

// listSome joins the first few names of a list and counts the rest.
func listSome(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}

// partsOf lists the stored arrays of a planned tensor, following
// ARCHITECTURE.md's naming: <name>.qweight, .scales, .mins, .scale, or the
// plain name for a float tensor; a block format's scales are inside its
// .qweight.
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
	switch s := p.format.Spec(); {
	case s.BlockScales:
	case s.TensorScale:
		parts = append(parts, partPlan{role: manifest.RoleScale, spec: safetensors.Spec{Name: p.name + ".scale", DType: "F32", Shape: []int64{1}}, bytes: 4})
	default:
		g := int64(shape.Groups())
		parts = append(parts, partPlan{role: manifest.RoleScales, spec: safetensors.Spec{Name: p.name + ".scales", DType: "F16", Shape: []int64{rows, g}}, bytes: rows * g * 2})
		if s.Mins {
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
