package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"lowbit/hub"
	"lowbit/store"
)

// storedModelJSON is one converted model of lowbit list.
type storedModelJSON struct {
	Name          string  `json:"name"`
	Path          string  `json:"path"`
	Format        string  `json:"format,omitempty"`
	BitsPerWeight float64 `json:"bits_per_weight,omitempty"`
	Size          int64   `json:"size"`
	// Validation is PASS, FAIL or NOT VALIDATED; "-" for a manifest from before it was recorded.
	Validation string `json:"validation,omitempty"`
	Source     string `json:"source,omitempty"`
	// Problem says why an entry of the models directory is not a lowbit model.
	Problem string `json:"problem,omitempty"`
}

// listJSON is what lowbit list --json prints.
type listJSON struct {
	Store   string             `json:"store"`
	Models  []storedModelJSON  `json:"models"`
	HFCache string             `json:"hf_cache"`
	Cached  []store.CachedRepo `json:"cached"`
}

func newListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the converted models in the store and the source models in the HF cache",
		Long: `list shows the converted models in the store ($LOWBIT_HOME/models; LOWBIT_HOME defaults
to lowbit in the user's cache directory): name, format, bits per weight, size on disk,
validation status (PASS, FAIL, NOT VALIDATED, or - for a model converted before lowbit
recorded it) and source; then the model repos in the HuggingFace cache (HF_HUB_CACHE, else
$HF_HOME/hub, else ~/.cache/huggingface/hub): repo, revision, commit, files and size.
Sizes are in binary units (MiB, GiB).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			models, err := store.FromEnv()
			if err != nil {
				return err
			}
			res, err := listStore(models, hub.OptionsFromEnv().CacheDir)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			return printList(cmd, res)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the lists as JSON")
	return cmd
}

// listStore gathers the store's models and the HF cache's repos.
func listStore(models store.Store, cacheDir string) (listJSON, error) {
	res := listJSON{Store: models.ModelsDir(), Models: []storedModelJSON{}, HFCache: cacheDir, Cached: []store.CachedRepo{}}
	stored, err := models.Models()
	if err != nil {
		return res, err
	}
	for _, m := range stored {
		row := storedModelJSON{Name: m.Name, Path: m.Dir, Size: m.Size, Problem: m.Problem}
		if man := m.Manifest; man != nil {
			row.Format, row.BitsPerWeight = man.Quantization.Format, man.Summary.BitsPerWeight
			row.Validation, row.Source = validationStatus(man), sourceLabel(man.Source, models)
		}
		res.Models = append(res.Models, row)
	}
	cached, err := store.ScanCache(cacheDir)
	if err != nil {
		return res, err
	}
	res.Cached = append(res.Cached, cached...)
	return res, nil
}

func printList(cmd *cobra.Command, res listJSON) error {
	out := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	var notes []string
	tableHead(tw, "converted models in "+res.Store, len(res.Models), "none yet: lowbit convert demo --bits 4 makes one", "NAME\tFORMAT\tBITS/W\tSIZE\tVALIDATION\tSOURCE")
	for _, m := range res.Models {
		if m.Problem != "" {
			notes = append(notes, fmt.Sprintf("note: %s is not a lowbit model: %s", m.Name, m.Problem))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\t%s\n", m.Name, m.Format, m.BitsPerWeight, humanBytes(m.Size), m.Validation, m.Source)
	}
	tableHead(tw, "\nsource models in the HF cache "+res.HFCache, len(res.Cached), "none", "REPO\tREVISION\tCOMMIT\tFILES\tSIZE")
	for _, r := range res.Cached {
		if len(r.Revisions) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t0\t%s\n", r.RepoID, humanBytes(r.Size))
		}
		for _, rev := range r.Revisions {
			refs := strings.Join(rev.Refs, ",")
			if refs == "" {
				refs = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%.12s\t%d\t%s\n", r.RepoID, refs, rev.Commit, rev.Files, humanBytes(rev.Size))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(cmd.ErrOrStderr(), n)
	}
	return nil
}

// tableHead starts a section of the listing: its title, then its column
// names, or when it has no rows, what to say instead.
func tableHead(w io.Writer, title string, rows int, empty, columns string) {
	fmt.Fprintln(w, title)
	if rows == 0 {
		fmt.Fprintln(w, "  "+empty)
		return
	}
	fmt.Fprintln(w, columns)
}
