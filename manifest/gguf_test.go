package manifest

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"lowbit/gguf"
)

// provenanceManifest is a manifest with every field the provenance carries.
func provenanceManifest() *Manifest {
	kld, top1, ppl := 0.064, 0.84, 1.074
	return &Manifest{
		Source:       Source{RepoID: "org/model", Revision: "main", Commit: strings.Repeat("ab", 20), Dir: "/somewhere/local"},
		Quantization: Quantization{Format: "q4", GroupSize: 32, EmbeddingFormat: "q8", OutputFormat: "q8", Search: true},
		Validation:   &Validation{Status: "PASS", KLDMean: &kld, Top1: &top1, PPLRatio: &ppl, NotChecked: []string{"kernels on CUDA"}},
	}
}

func provenanceFile(t testing.TB, kvs []gguf.KV) *gguf.File {
	t.Helper()
	b, err := gguf.Marshal(kvs, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestProvenanceRoundTrip writes a manifest's provenance as GGUF keys and
// reads back the same record (the source's local directory stays home).
func TestProvenanceRoundTrip(t *testing.T) {
	m := provenanceManifest()
	kvs, err := m.GGUFMetadata("1.2.3", []string{"model.embed_tokens.weight"})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if !strings.HasPrefix(kv.Key, GGUFPrefix) {
			t.Errorf("key %s outside %s", kv.Key, GGUFPrefix)
		}
	}
	p, ok, err := ReadProvenance(provenanceFile(t, kvs))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	src := m.Source
	src.Dir = ""
	want := &Provenance{LowbitVersion: "1.2.3", Source: src, Quantization: m.Quantization, Validation: m.Validation, Requantized: []string{"model.embed_tokens.weight"}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("read\n%+v\nwant\n%+v", p, want)
	}
	if _, ok, err := ReadProvenance(provenanceFile(t, nil)); ok || err != nil {
		t.Errorf("a file without lowbit's keys: %v %v", ok, err)
	}
}

// TestProvenanceRefuses: keys of the wrong type or value are errors naming them.
func TestProvenanceRefuses(t *testing.T) {
	kv := func(k string, v any) gguf.KV {
		val, err := gguf.ValueOf(v)
		if err != nil {
			t.Fatal(err)
		}
		return gguf.KV{Key: k, Value: val}
	}
	version := kv(ggufVersion, "1")
	for _, c := range []struct {
		kvs  []gguf.KV
		want string
	}{
		{[]gguf.KV{kv(ggufVersion, uint32(1))}, ggufVersion},
		{[]gguf.KV{version, kv(ggufGroupSize, "32")}, ggufGroupSize},
		{[]gguf.KV{version, kv(ggufGroupSize, uint64(1<<40))}, "not a group size"},
		{[]gguf.KV{version, kv(ggufStatus, "MAYBE")}, "MAYBE"},
		{[]gguf.KV{version, kv(ggufStatus, "PASS"), kv(ggufKLDMean, "low")}, ggufKLDMean},
		{[]gguf.KV{version, kv(ggufRequantized, "x")}, ggufRequantized},
	} {
		if _, _, err := ReadProvenance(provenanceFile(t, c.kvs)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.kvs, err, c.want)
		}
	}
}

// FuzzReadProvenance: whatever the GGUF reader accepts, reading lowbit's
// provenance from it ends in a record or an error, never a panic.
func FuzzReadProvenance(f *testing.F) {
	kvs, err := provenanceManifest().GGUFMetadata("1", []string{"a"})
	if err != nil {
		f.Fatal(err)
	}
	b, err := gguf.Marshal(kvs, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		p, ok, err := ReadProvenance(file)
		if ok && (p == nil || err != nil) {
			t.Fatalf("ok with %v, %v", p, err)
		}
	})
}
