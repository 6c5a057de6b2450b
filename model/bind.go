package model

import (
	"fmt"
	"strings"
)

// bind uploads the model's weights to the session's backend: the
// embedding, the final norm and head, and each layer's weights with its
// attention (window, rotation, q/k norms). Weights read by the same input
// go up together (q/k/v, gate/up), so a backend may join them.
func (s *Session) bind() error {
	m, c := s.m, s.cfg
	mats, err := s.upload("model.embed_tokens.weight")
	if err != nil {
		return err
	}
	s.embed = mats[0]
	if s.norm, err = s.uploadNorm("model.norm.weight"); err != nil {
		return err
	}
	if mats, err = s.be.Upload(m.Output()); err != nil {
		return fmt.Errorf("model: %s: upload the output head: %w", s.be.Name(), err)
	}
	s.output = mats[0]
	ropes := map[string]Mat{} // layers with the same rotation share it
	for l := range c.NumLayers {
		lm, err := s.bindLayer(l, ropes)
		if err != nil {
			return err
		}
		s.layers = append(s.layers, lm)
	}
	return nil
}

// bindLayer uploads layer l.
func (s *Session) bindLayer(l int, ropes map[string]Mat) (layerMats, error) {
	c := s.cfg
	p := fmt.Sprintf("model.layers.%d.", l)
	var lm layerMats
	var err error
	for _, n := range []struct {
		dst  *Norm
		name string
		when bool
	}{
		{&lm.attnNorm, "input_layernorm.weight", true},
		{&lm.ffnNorm, "post_attention_layernorm.weight", !c.SandwichNorms},
		{&lm.postAttn, "post_attention_layernorm.weight", c.SandwichNorms},
		{&lm.ffnNorm, "pre_feedforward_layernorm.weight", c.SandwichNorms},
		{&lm.postFfn, "post_feedforward_layernorm.weight", c.SandwichNorms},
		{&lm.attnSub, "self_attn.attn_sub_norm.weight", c.SubNorms},
		{&lm.ffnSub, "mlp.ffn_sub_norm.weight", c.SubNorms},
	} {
		if n.when {
			if *n.dst, err = s.uploadNorm(p + n.name); err != nil {
				return lm, err
			}
		}
	}
	w, err := s.m.layerWeights(l)
	if err != nil {
		return lm, err
	}
	mats, err := s.uploadWeights(p+"q/k/v", w.q, w.k, w.v)
	if err != nil {
		return lm, err
	}
	lm.wq, lm.wk, lm.wv = mats[0], mats[1], mats[2]
	if c.QKVBias {
		if mats, err = s.uploadWeights(p+"q/k/v biases", w.bq); err != nil {
			return lm, err
		}
		lm.bq = mats[0]
		if mats, err = s.uploadWeights(p+"q/k/v biases", w.bk); err != nil {
			return lm, err
		}
		lm.bk = mats[0]
		if mats, err = s.uploadWeights(p+"q/k/v biases", w.bv); err != nil {
			return lm, err
		}
		lm.bv = mats[0]
	}
	if mats, err = s.upload(p + "self_attn.o_proj.weight"); err != nil {
		return lm, err
	}
	lm.wo = mats[0]
	if mats, err = s.uploadWeights(p+"gate/up", w.gate, w.up); err != nil {
		return lm, err
	}
	lm.gate, lm.up = mats[0], mats[1]
	if mats, err = s.upload(p + "mlp.down_proj.weight"); err != nil {
		return lm, err
	}
	lm.down = mats[0]

	lm.attn = Attn{Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, Scale: c.AttnScale(),
		Window: c.Window(l), SoftCap: float32(c.AttnSoftCap)}
	if c.QKNorm {
		for _, n := range []struct {
			dst *Norm
			w   *Weight
		}{{&lm.attn.QNorm, w.qNorm}, {&lm.attn.KNorm, w.kNorm}} {
			if *n.dst, err = s.uploadNormWeight(p+"q/k norm", n.w); err != nil {
				return lm, err
			}
		}
	}
	if lm.attn.Rope, err = s.uploadRope(l, ropes); err != nil {
		return lm, err
	}
	return lm, nil
}

// upload uploads the named weights together.
func (s *Session) upload(names ...string) ([]Mat, error) {
	ws := make([]*Weight, len(names))
	for i, name := range names {
		w, ok := s.m.Weights[name]
		if !ok {
			return nil, fmt.Errorf("model: tensor %s is missing", name)
		}
		ws[i] = w
	}
	return s.uploadWeights(strings.Join(names, ", "), ws...)
}

// uploadWeights uploads ws together; what names them in an error.
func (s *Session) uploadWeights(what string, ws ...*Weight) ([]Mat, error) {
	mats, err := s.be.Upload(ws...)
	if err != nil {
		return nil, fmt.Errorf("model: %s: upload %s: %w", s.be.Name(), what, err)
	}
	return mats, nil
}

// uploadNorm uploads an RMSNorm's gains.
func (s *Session) uploadNorm(name string) (Norm, error) {
	w, ok := s.m.Weights[name]
	if !ok {
		return Norm{}, fmt.Errorf("model: tensor %s is missing", name)
	}
	return s.uploadNormWeight(name, w)
}

// uploadNormWeight uploads gains w, as 1 + w where the model stores them
// so (Gemma): the same float32 sum the norm would take each time.
func (s *Session) uploadNormWeight(what string, w *Weight) (Norm, error) {
	if s.cfg.NormPlusOne {
		g := make([]float32, len(w.F32))
		for i, v := range w.F32 {
			g[i] = 1 + v
		}
		w = FloatWeight(w.Rows, w.Cols, g)
	}
	mats, err := s.uploadWeights(what, w)
	if err != nil {
		return Norm{}, err
	}
	return Norm{W: mats[0], Eps: float32(s.cfg.RMSNormEps)}, nil
}

// uploadRope uploads layer l's rotation as Attn.Rope wants it: each of
// the HeadDim/2 pairs' frequency and factor, the pairs past a partial
// rotation (whose dimensions layerWeights moved there) not rotating. A
// layer without rotation gets none; layers that rotate alike share one.
func (s *Session) uploadRope(l int, ropes map[string]Mat) (Mat, error) {
	r := s.cfg.Rotary(l, s.ctx)
	if r.InvFreq == nil {
		return Mat{}, nil
	}
	half := s.cfg.HeadDim / 2
	t := make([]float32, 2*half)
	for j := range half {
		t[half+j] = 1
		if j < len(r.InvFreq) {
			t[j], t[half+j] = r.InvFreq[j], r.Factor
		}
	}
	key := fmt.Sprint(t)
	if m, ok := ropes[key]; ok {
		return m, nil
	}
	mats, err := s.uploadWeights("rotary frequencies", FloatWeight(1, 2*half, t))
	if err != nil {
		return Mat{}, err
	}
	ropes[key] = mats[0]
	return mats[0], nil
}

// layerParts are the weights of a layer's attention and MLP inputs as the
// forward pass reads them.
type layerParts struct {
	q, k, v, gate, up *Weight
	bq, bk, bv        *Weight // nil without biases
	qNorm, kNorm      *Weight // nil without q/k norms
}

// layerWeights are layer l's q, k, v, gate and up weights (with biases and
// q/k norms): Phi-3's joined matrices split into their rows, and, under a
// partial rotation, the rows of every head of q and k reordered so the
// rotated pairs are (i, i+HeadDim/2), the layout of a full rotation whose
// other pairs do not turn (their scores, sums over a head's dimensions,
// are the same in any order).
func (m *Model) layerWeights(l int) (layerParts, error) {
	c := m.Config
	p := fmt.Sprintf("model.layers.%d.", l)
	get := func(name string) (*Weight, error) {
		w, ok := m.Weights[p+name]
		if !ok {
			return nil, fmt.Errorf("model: tensor %s%s is missing", p, name)
		}
		return w, nil
	}
	var w layerParts
	var err error
	if c.Arch == "phi3" {
		qDim, kvDim := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
		qkv, err := get("self_attn.qkv_proj.weight")
		if err != nil {
			return w, err
		}
		gu, err := get("mlp.gate_up_proj.weight")
		if err != nil {
			return w, err
		}
		w.q, w.k, w.v = qkv.rows(0, qDim), qkv.rows(qDim, qDim+kvDim), qkv.rows(qDim+kvDim, qDim+2*kvDim)
		w.gate, w.up = gu.rows(0, c.IntermediateSize), gu.rows(c.IntermediateSize, 2*c.IntermediateSize)
	} else {
		for _, x := range []struct {
			dst  **Weight
			name string
		}{{&w.q, "self_attn.q_proj.weight"}, {&w.k, "self_attn.k_proj.weight"}, {&w.v, "self_attn.v_proj.weight"},
			{&w.gate, "mlp.gate_proj.weight"}, {&w.up, "mlp.up_proj.weight"}} {
			if *x.dst, err = get(x.name); err != nil {
				return w, err
			}
		}
	}
	for _, x := range []struct {
		dst  **Weight
		name string
		when bool
	}{
		{&w.bq, "self_attn.q_proj.bias", c.QKVBias}, {&w.bk, "self_attn.k_proj.bias", c.QKVBias},
		{&w.bv, "self_attn.v_proj.bias", c.QKVBias},
		{&w.qNorm, "self_attn.q_norm.weight", c.QKNorm}, {&w.kNorm, "self_attn.k_norm.weight", c.QKNorm},
	} {
		if x.when {
			if *x.dst, err = get(x.name); err != nil {
				return w, err
			}
		}
	}
	if rot := c.RotaryDim; rot > 0 && rot < c.HeadDim {
		perm := rotaryOrder(c.HeadDim, rot)
		w.q, w.k = permuteHeads(w.q, perm, c.NumHeads), permuteHeads(w.k, perm, c.NumKVHeads)
		if w.bq != nil {
			w.bq, w.bk = permuteHeads(w.bq, perm, c.NumHeads), permuteHeads(w.bk, perm, c.NumKVHeads)
		}
		if w.qNorm != nil {
			w.qNorm, w.kNorm = permuteHeads(w.qNorm, perm, 1), permuteHeads(w.kNorm, perm, 1)
		}
	}
	return w, nil
}

// rotaryOrder is the order of a head's dimensions under a partial
// rotation of rot of its hd: new dimension j is old dimension order[j], so
// that the rotated pairs (i, i+rot/2) become (i, i+hd/2) and the
// dimensions that do not rotate fill the rest of each half.
func rotaryOrder(hd, rot int) []int {
	half, r2, pass := hd/2, rot/2, (hd-rot)/2
	order := make([]int, hd)
	for j := range half {
		if j < r2 {
			order[j], order[half+j] = j, r2+j
		} else {
			order[j], order[half+j] = rot+(j-r2), rot+pass+(j-r2)
		}
	}
	return order
}

// permuteHeads reorders each of heads heads of w by order: the rows of a
// matrix [heads*hd, cols], or the values of a vector [1, heads*hd].
func permuteHeads(w *Weight, order []int, heads int) *Weight {
	hd := len(order)
	if w.Rows == 1 {
		out := make([]float32, len(w.F32))
		for h := range heads {
			for j, o := range order {
				out[h*hd+j] = w.F32[h*hd+o]
			}
		}
		return &Weight{Rows: 1, Cols: w.Cols, F32: out, Half: w.Half}
	}
	idx := make([]int, 0, w.Rows)
	for h := range heads {
		for _, o := range order {
			idx = append(idx, h*hd+o)
		}
	}
	return w.gather(idx)
}
