package validate_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/convert"
	"lowbit/internal/testmodels"
	"lowbit/model"
	"lowbit/tokenizer"
	"lowbit/validate"
)

// convertStories converts the real stories260K model at bits into a temp dir.
func convertStories(t *testing.T, bits string) (src, out string) {
	t.Helper()
	src = testmodels.Path(t, "stories260K-hf")
	out = filepath.Join(t.TempDir(), "q")
	if _, err := convert.Run(context.Background(), convert.Options{Source: src, Out: out, Bits: bits, Workers: 2, NoValidate: true}); err != nil {
		t.Fatal(err)
	}
	return src, out
}

func load(t *testing.T, dir string) *model.Model {
	t.Helper()
	m, err := model.Load(context.Background(), dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCompareStories measures every --bits of stories260K against its float
// original over the start of the shared evaluation text, and checks that
// more bits cost less and that the default thresholds pass q8 and q4 and
// fail the 2- and 1-bit models, which lose what this tiny model knew.
func TestCompareStories(t *testing.T) {
	text, err := os.ReadFile(testmodels.Path(t, "eval-text/alice_in_wonderland_pg11.txt"))
	if err != nil {
		t.Fatal(err)
	}
	src := testmodels.Path(t, "stories260K-hf")
	ref := load(t, src)
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	var prev *validate.ModelReport
	for _, c := range []struct{ bits, format string }{{"1", "q1"}, {"2", "q2"}, {"4", "q4"}, {"8", "q8"}} {
		_, out := convertStories(t, c.bits)
		rep, err := validate.CompareModels(context.Background(), load(t, out), ref, tok, validate.ModelOptions{
			Text: string(text), MaxTokens: 1024, Thresholds: validate.DefaultThresholds(c.format)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: KLD mean %.4f median %.4f p99 %.4f, top-1 %.1f%%, PPL %.3f -> %.3f (x%.3f), layers %.3f, %s %v",
			c.format, rep.KLDMean, rep.KLDMedian, rep.KLDP99, 100*rep.Top1, rep.PPLRef, rep.PPL, rep.PPLRatio, rep.LayerRelErr, rep.Status, rep.Failures)
		if rep.Positions < 1000 || len(rep.LayerRelErr) != ref.Config.NumLayers+1 {
			t.Errorf("%s: %d positions, %d layer errors", c.format, rep.Positions, len(rep.LayerRelErr))
		}
		// q8 and q4 keep the model; 2 and 1 bits without training for them
		// destroy a model this small, and the check must say so.
		if want := map[string]string{"q8": validate.Pass, "q4": validate.Pass, "q2": validate.Fail, "q1": validate.Fail}[c.format]; rep.Status != want {
			t.Errorf("%s: status %s, want %s (%v)", c.format, rep.Status, want, rep.Failures)
		}
		if prev != nil && !(rep.KLDMean < prev.KLDMean && rep.Top1 >= prev.Top1) {
			t.Errorf("%s costs no less than the format below it: KLD %.4f vs %.4f", c.format, rep.KLDMean, prev.KLDMean)
		}
		prev = rep
	}
	// The float model against itself, both caches f32: no divergence at all.
	opts := validate.ModelOptions{MaxTokens: 200, Thresholds: validate.DefaultThresholds("f32"), KVCache: model.KVF32}
	rep, err := validate.CompareModels(context.Background(), ref, ref, tok, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != validate.Pass || rep.KLDMax > 1e-9 || rep.Top1 != 1 || rep.PPLRatio != 1 {
		t.Errorf("self comparison: %+v", rep)
	}
	// Each cache type alone: f16 within float rounding, q8 above it.
	caches, err := validate.CompareKVCaches(context.Background(), ref, tok, []model.KVType{model.KVF16, model.KVQ8}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(caches) != 2 || caches[0].Format != "kv f16" || caches[0].Status != validate.Pass || !(caches[1].KLDMean > caches[0].KLDMean) {
		t.Errorf("cache comparisons: %+v", caches)
	}
}

func TestCompareBadInput(t *testing.T) {
	src := testmodels.Path(t, "stories260K-hf")
	ref := load(t, src)
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	other := *ref
	other.Config.VocabSize++
	deeper := *ref
	deeper.Config.NumLayers++
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		quant, ref *model.Model
		text       string
		want       string
	}{
		{"vocabulary differs", ref, &other, "Once", "vocabulary"},
		{"layers differ", ref, &deeper, "Once", "layers"},
		{"empty text", ref, ref, "  \n ", "empty"},
		{"one token", ref, ref, "a", "at least 2"},
	} {
		_, err := validate.CompareModels(ctx, c.quant, c.ref, tok, validate.ModelOptions{Text: c.text})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := validate.FindReference(t.TempDir(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a lowbit model") {
		t.Errorf("FindReference without manifest: %v", err)
	}
	_, out := convertStories(t, "4")
	if got, err := validate.FindReference(out, t.TempDir()); err != nil || got != src {
		t.Errorf("FindReference = %q, %v; want the source dir %q", got, err, src)
	}
}
