package main

import (
	"path/filepath"

	"lowbit/manifest"
	"lowbit/store"
)

// modelArgHelp is how run, validate, bench and show find their model
// argument (resolveModelDir does it).
const modelArgHelp = `A model argument is found by trying, in order:
  1. an existing path: a lowbit model directory, or a HuggingFace one (F32, F16, BF16),
     or (run, bench, serve) a .gguf file of a llama or qwen2 model (F32, F16, BF16,
     Q8_0, Q4_0, Q4_1)
  2. a converted model in the store by name: $LOWBIT_HOME/models/<name> (lowbit list)
  3. a built-in alias: demo is built into lowbit; the others (lowbit convert --list-models)
     come through the HF cache
  4. a Hub repo id, org/name, through the HF cache (validate and show never download)
LOWBIT_HOME defaults to lowbit in the user's cache directory (~/.cache/lowbit).`

// sourceLabel names where a converted model came from: its Hub repo, the
// built-in demo, or its source directory.
func sourceLabel(src manifest.Source, models store.Store) string {
	switch {
	case src.RepoID != "":
		return src.RepoID
	case models.Root != "" && src.Dir != "" && filepath.Clean(src.Dir) == models.DemoDir():
		return store.DemoAlias + " (built in)"
	}
	return src.Dir
}

// validationStatus is the manifest's validation status, or "-" for a
// manifest from before lowbit recorded it.
func validationStatus(m *manifest.Manifest) string {
	if m.Validation == nil {
		return "-"
	}
	return m.Validation.Status
}
