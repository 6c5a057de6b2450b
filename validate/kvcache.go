package validate

import (
	"context"

	"lowbit/model"
	"lowbit/tokenizer"
)

// KVCacheThresholds are the pass marks of a cache type measured alone: an
// f16 cache must stay within float rounding (DefaultThresholds of a float
// format), a q8 one within q8 weights' marks.
func KVCacheThresholds(t model.KVType) Thresholds {
	if t == model.KVQ8 {
		return DefaultThresholds("q8")
	}
	return DefaultThresholds("f32")
}

// CompareKVCaches measures what each cache type costs alone: ref run with
// that cache against ref with an f32 cache, over opts' text, judged by
// KVCacheThresholds. Each report's Format names the cache ("kv f16").
func CompareKVCaches(ctx context.Context, ref *model.Model, tok tokenizer.Tokenizer, types []model.KVType, opts ModelOptions) ([]*ModelReport, error) {
	var out []*ModelReport
	for _, t := range types {
		o := opts
		o.KVCache, o.Thresholds = t, KVCacheThresholds(t)
		rep, err := CompareModels(ctx, ref, ref, tok, o)
		if err != nil {
			return nil, err
		}
		rep.Format, rep.KLD = "kv "+t.String(), nil
		out = append(out, rep)
	}
	return out, nil
}
