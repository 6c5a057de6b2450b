package convert

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"lowbit/half"
	"lowbit/manifest"
	"lowbit/model"
	"lowbit/quantize"
	"lowbit/safetensors"
)

// chunkElems bounds the float32 working set of one worker (16 MiB): big
// tensors are quantized a block of rows at a time, so memory does not grow
// with the model.
const chunkElems = 4 << 20

// writeTensors quantizes every planned tensor and streams it into one
// safetensors file, tensors in parallel across workers, each tensor in
// chunks of rows. It returns the manifest entries in plan order.
func writeTensors(ctx context.Context, set *safetensors.Set, plans []*tensorPlan, s settings, path string, progress io.Writer) ([]manifest.Tensor, error) {
	w, err := safetensors.Create(path, specsOf(plans), map[string]string{"format": "lowbit"})
	if err != nil {
		return nil, err
	}
	var total int64
	for _, p := range plans {
		total += p.info.End - p.info.Begin
	}
	bar := newBar(progress, total, fmt.Sprintf("quantize 0/%d tensors", len(plans)))
	var done atomic.Int64

	entries := make(map[string]manifest.Tensor, len(plans))
	results := make(chan manifest.Tensor, len(plans))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.workers)
	for _, p := range byWork(plans) {
		g.Go(func() error {
			e, err := convertTensor(gctx, set, w, p, s, bar)
			if err != nil {
				return err
			}
			results <- e
			bar.Describe(fmt.Sprintf("quantize %d/%d tensors", done.Add(1), len(plans)))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		w.Abort()
		return nil, err
	}
	close(results)
	for e := range results {
		entries[e.Name] = e
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	bar.Finish()
	ordered := make([]manifest.Tensor, 0, len(plans))
	for _, p := range plans {
		e := entries[p.name]
		for i := range e.Parts {
			info, _ := w.Info(e.Parts[i].Tensor)
			begin, end := w.FileOffsets(info)
			e.Parts[i].Offsets = [2]int64{begin, end}
		}
		ordered = append(ordered, e)
	}
	return ordered, nil
}

// partWriter streams one stored array: bytes go to the file at increasing
// offsets and through a sha256.
type partWriter struct {
	w    *safetensors.Writer
	name string
	off  int64
	h    hash.Hash
}

func (pw *partWriter) write(b []byte) error {
	if err := pw.w.WriteAt(pw.name, pw.off, b); err != nil {
		return err
	}
	pw.off += int64(len(b))
	pw.h.Write(b)
	return nil
}

// convertTensor quantizes (or converts to float) one tensor chunk by chunk.
func convertTensor(ctx context.Context, set *safetensors.Set, w *safetensors.Writer, p *tensorPlan, s settings, bar progressBar) (manifest.Tensor, error) {
	if p.packedScale != "" {
		return convertPackedBitNet(ctx, set, w, p, s, bar)
	}
	raw, err := set.Data(cmp.Or(p.src, p.name))
	if err != nil {
		return manifest.Tensor{}, err
	}
	e := manifest.Tensor{Name: p.name, Shape: p.info.Shape, Format: string(p.format), GroupSize: p.group, SourceDType: string(p.info.DType), FallbackFrom: string(p.fallbackFrom)}
	parts := make(map[string]*partWriter, len(p.parts))
	for _, pp := range p.parts {
		parts[pp.role] = &partWriter{w: w, name: pp.spec.Name, h: sha256.New()}
	}

	esz := int64(p.info.DType.Size())
	cols := int64(1)
	if len(p.info.Shape) > 0 {
		cols = p.info.Shape[len(p.info.Shape)-1]
	}
	n := p.info.NumElements()
	if cols == 0 || n == 0 {
		return finish(e, p, parts)
	}
	rows := n / cols
	chunkRows := max(1, chunkElems/cols)
	buf := make([]float32, min(rows, chunkRows)*cols)

	var tensorScale float32
	if p.format.Spec().TensorScale {
		var err error
		if tensorScale, err = scanTensorScale(raw, p, rows, cols, chunkRows, buf, s.allowNonFinite); err != nil {
			return e, err
		}
		if s.f16TensorScale {
			// GGUF's TQ2_0 holds the scale as an f16.
			tensorScale = half.FromFloat32(tensorScale).Float32()
		}
	}
	var errSq, refSq float64
	var tq2Scale float32
	var compensate []float32 // one factor for every chunk of the tensor's rows
	if s.gptq && p.role == model.RoleLinear && p.format.Compensable() {
		if compensate, err = s.stats.Compensation(p.name); err != nil {
			return e, fmt.Errorf("tensor %s: %w", p.name, err)
		}
	}
	for r0 := int64(0); r0 < rows; r0 += chunkRows {
		if err := ctx.Err(); err != nil {
			return e, err
		}
		nr := min(chunkRows, rows-r0)
		src := raw[r0*cols*esz : (r0+nr)*cols*esz]
		x := buf[:nr*cols]
		if err := toFloat(p, src, x, r0, cols, s.allowNonFinite); err != nil {
			return e, err
		}
		if !p.format.Quantized() {
			if err := p.format.CheckRange(x, int(cols), int(r0)); err != nil {
				return e, fmt.Errorf("tensor %s: %w", p.name, err)
			}
			b, err := safetensors.FromFloat32(p.parts[0].spec.DType, x)
			if err != nil {
				return e, fmt.Errorf("tensor %s: %w", p.name, err)
			}
			if err := parts[manifest.RoleData].write(b); err != nil {
				return e, fmt.Errorf("tensor %s: %w", p.name, err)
			}
			bar.Add(len(src))
			continue
		}
		opt := quantize.Options{GroupSize: p.group, Search: s.search, TensorScale: tensorScale, FirstRow: int(r0)}
		if p.role == model.RoleLinear {
			opt.Importance, opt.Compensate = s.stats.Importance(p.name), compensate
		}
		q, err := quantize.Quantize(ctx, p.format, x, int(nr), int(cols), opt)
		if err != nil {
			return e, fmt.Errorf("tensor %s (rows %d-%d): %w", p.name, r0, r0+nr-1, err)
		}
		errSq += q.SqErr // summed by Quantize while it had the codes
		refSq += q.SqRef
		if err := parts[manifest.RoleQWeight].write(q.Data); err != nil {
			return e, fmt.Errorf("tensor %s: %w", p.name, err)
		}
		if pw := parts[manifest.RoleScales]; pw != nil {
			if err := pw.write(halfBytes(q.Scales)); err != nil {
				return e, fmt.Errorf("tensor %s: %w", p.name, err)
			}
		}
		if pw := parts[manifest.RoleMins]; pw != nil {
			if err := pw.write(halfBytes(q.Mins)); err != nil {
				return e, fmt.Errorf("tensor %s: %w", p.name, err)
			}
		}
		tq2Scale = q.Scale
		bar.Add(len(src))
	}
	if pw := parts[manifest.RoleScale]; pw != nil {
		if err := pw.write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(tq2Scale))); err != nil {
			return e, fmt.Errorf("tensor %s: %w", p.name, err)
		}
	}
	if p.format.Quantized() {
		rel := 0.0
		if refSq > 0 {
			rel = math.Sqrt(errSq / refSq)
		}
		e.RelL2Error = &rel
	}
	return finish(e, p, parts)
}

// finish fills the manifest parts of a converted tensor.
func finish(e manifest.Tensor, p *tensorPlan, parts map[string]*partWriter) (manifest.Tensor, error) {
	for _, pp := range p.parts {
		pw := parts[pp.role]
		if pw.off != pp.bytes {
			return e, fmt.Errorf("tensor %s part %s: wrote %d bytes, planned %d", p.name, pp.role, pw.off, pp.bytes)
		}
		e.Parts = append(e.Parts, manifest.Part{
			Role: pp.role, Tensor: pp.spec.Name, DType: string(pp.spec.DType), Shape: pp.spec.Shape,
			File: weightsFile, SHA256: hex.EncodeToString(pw.h.Sum(nil)),
		})
	}
	return e, nil
}

// toFloat decodes a chunk of source rows and checks for NaN and Inf, which
// are an error naming the tensor and element unless allowed (then they become 0).
func toFloat(p *tensorPlan, src []byte, dst []float32, r0, cols int64, allow bool) error {
	if err := safetensors.ToFloat32(p.info.DType, src, dst); err != nil {
		return fmt.Errorf("tensor %s: %w", p.name, err)
	}
	return checkFinite(p, dst, r0, cols, allow)
}

// checkFinite is toFloat's check of NaN and Inf in rows from r0.
func checkFinite(p *tensorPlan, dst []float32, r0, cols int64, allow bool) error {
	for i, v := range dst {
		if v-v != 0 { // NaN and ±Inf give NaN
			if !allow {
				row, col := r0+int64(i)/cols, int64(i)%cols
				return fmt.Errorf("tensor %s: non-finite weight %v at row %d, column %d (use --allow-nonfinite to convert anyway, with such weights set to 0)", p.name, v, row, col)
			}
			dst[i] = 0
		}
	}
	return nil
}

// scanTensorScale is the first pass of a format with one scale per tensor
// (tq2's absmean, a super-block format's largest sub-block scale): the
// scale of the whole tensor, which every chunk is then quantized with.
func scanTensorScale(raw []byte, p *tensorPlan, rows, cols, chunkRows int64, buf []float32, allow bool) (float32, error) {
	esz := int64(p.info.DType.Size())
	var ts quantize.TensorScaler
	for r0 := int64(0); r0 < rows; r0 += chunkRows {
		nr := min(chunkRows, rows-r0)
		x := buf[:nr*cols]
		if err := toFloat(p, raw[r0*cols*esz:(r0+nr)*cols*esz], x, r0, cols, allow); err != nil {
			return 0, err
		}
		ts.Add(p.format, x, int(cols))
	}
	return ts.Scale(p.format), nil
}

func halfBytes(h []half.Float16) []byte {
	b := make([]byte, 2*len(h))
	for i, v := range h {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	}
	return b
}
