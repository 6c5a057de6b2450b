package manifest

import (
	"errors"
	"fmt"
	"strings"

	"lowbit/gguf"
)

// A GGUF file exported from a lowbit model carries what its manifest says
// of where the model came from, how it was quantized and what validation
// found, under keys that start with GGUFPrefix: llama.cpp ignores them,
// lowbit show prints them and lowbit validate finds the reference by them.

// GGUFPrefix starts the GGUF keys of lowbit's provenance.
const GGUFPrefix = "lowbit."

// The provenance keys.
const (
	ggufVersion         = GGUFPrefix + "version"
	ggufRepoID          = GGUFPrefix + "source.repo_id"
	ggufRevision        = GGUFPrefix + "source.revision"
	ggufCommit          = GGUFPrefix + "source.commit"
	ggufFormat          = GGUFPrefix + "quantization.format"
	ggufGroupSize       = GGUFPrefix + "quantization.group_size"
	ggufEmbeddingFormat = GGUFPrefix + "quantization.embedding_format"
	ggufOutputFormat    = GGUFPrefix + "quantization.output_format"
	ggufSearch          = GGUFPrefix + "quantization.search"
	ggufStatus          = GGUFPrefix + "validation.status"
	ggufKLDMean         = GGUFPrefix + "validation.kld_mean"
	ggufTop1            = GGUFPrefix + "validation.top1"
	ggufPPLRatio        = GGUFPrefix + "validation.ppl_ratio"
	ggufNotChecked      = GGUFPrefix + "validation.not_checked"
	ggufRequantized     = GGUFPrefix + "requantized"
)

// Provenance is what a GGUF file says of the lowbit model it was exported
// from.
type Provenance struct {
	LowbitVersion string       `json:"lowbit_version"`
	Source        Source       `json:"source"`
	Quantization  Quantization `json:"quantization"`
	// Validation is the lowbit model's validation: the file holds the same
	// values, but for the tensors Requantized names.
	Validation *Validation `json:"validation,omitempty"`
	// Requantized lists the tensors the export wrote in another type, with
	// other values than the lowbit model's.
	Requantized []string `json:"requantized,omitempty"`
}

// GGUFMetadata is the manifest's provenance as GGUF metadata, for a file
// written by lowbit version, with the tensors requantized lists.
func (m *Manifest) GGUFMetadata(version string, requantized []string) ([]gguf.KV, error) {
	var kvs []gguf.KV
	var firstErr error
	add := func(key string, v any) {
		val, err := gguf.ValueOf(v)
		if err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("manifest: gguf key %s: %w", key, err))
			return
		}
		kvs = append(kvs, gguf.KV{Key: key, Value: val})
	}
	add(ggufVersion, version)
	for _, s := range []struct{ key, v string }{{ggufRepoID, m.Source.RepoID}, {ggufRevision, m.Source.Revision}, {ggufCommit, m.Source.Commit}} {
		if s.v != "" {
			add(s.key, s.v)
		}
	}
	q := m.Quantization
	add(ggufFormat, q.Format)
	if q.GroupSize > 0 {
		add(ggufGroupSize, uint32(q.GroupSize))
	}
	add(ggufEmbeddingFormat, q.EmbeddingFormat)
	add(ggufOutputFormat, q.OutputFormat)
	add(ggufSearch, q.Search)
	if v := m.Validation; v != nil {
		add(ggufStatus, v.Status)
		for _, f := range []struct {
			key string
			v   *float64
		}{{ggufKLDMean, v.KLDMean}, {ggufTop1, v.Top1}, {ggufPPLRatio, v.PPLRatio}} {
			if f.v != nil {
				add(f.key, *f.v)
			}
		}
		if len(v.NotChecked) > 0 {
			add(ggufNotChecked, v.NotChecked)
		}
	}
	if len(requantized) > 0 {
		add(ggufRequantized, requantized)
	}
	return kvs, firstErr
}

// ReadProvenance reads the provenance of a GGUF file lowbit exported; ok
// is false for a file without lowbit's keys (one llama.cpp made). A key of
// the wrong type, or values the manifest would refuse, are an error naming
// the key.
func ReadProvenance(f *gguf.File) (p *Provenance, ok bool, err error) {
	if _, has := f.Value(ggufVersion); !has {
		return nil, false, nil
	}
	p = &Provenance{}
	str := func(key string, dst *string) {
		if _, has := f.Value(key); !has || err != nil {
			return
		}
		*dst, err = f.String(key)
	}
	str(ggufVersion, &p.LowbitVersion)
	str(ggufRepoID, &p.Source.RepoID)
	str(ggufRevision, &p.Source.Revision)
	str(ggufCommit, &p.Source.Commit)
	str(ggufFormat, &p.Quantization.Format)
	str(ggufEmbeddingFormat, &p.Quantization.EmbeddingFormat)
	str(ggufOutputFormat, &p.Quantization.OutputFormat)
	if err != nil {
		return nil, false, err
	}
	if _, has := f.Value(ggufGroupSize); has {
		n, err := f.Uint(ggufGroupSize)
		if err != nil {
			return nil, false, err
		}
		if n > 1<<20 {
			return nil, false, fmt.Errorf("gguf key %s: %d is not a group size", ggufGroupSize, n)
		}
		p.Quantization.GroupSize = int(n)
	}
	if _, has := f.Value(ggufSearch); has {
		if p.Quantization.Search, err = f.Bool(ggufSearch); err != nil {
			return nil, false, err
		}
	}
	if _, has := f.Value(ggufStatus); has {
		v := &Validation{}
		str(ggufStatus, &v.Status)
		if err != nil {
			return nil, false, err
		}
		for _, fl := range []struct {
			key string
			dst **float64
		}{{ggufKLDMean, &v.KLDMean}, {ggufTop1, &v.Top1}, {ggufPPLRatio, &v.PPLRatio}} {
			if _, has := f.Value(fl.key); !has {
				continue
			}
			x, err := f.Float(fl.key)
			if err != nil {
				return nil, false, err
			}
			*fl.dst = &x
		}
		if _, has := f.Value(ggufNotChecked); has {
			if v.NotChecked, err = f.Strings(ggufNotChecked); err != nil {
				return nil, false, err
			}
		}
		if err := v.check(); err != nil {
			return nil, false, fmt.Errorf("gguf keys %s*: %w", GGUFPrefix+"validation.", err)
		}
		p.Validation = v
	}
	if _, has := f.Value(ggufRequantized); has {
		if p.Requantized, err = f.Strings(ggufRequantized); err != nil {
			return nil, false, err
		}
	}
	if strings.ContainsAny(p.Source.RepoID, "\x00\n") {
		return nil, false, fmt.Errorf("gguf key %s: %q is not a repo id", ggufRepoID, p.Source.RepoID)
	}
	return p, true, nil
}
