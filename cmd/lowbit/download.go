package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"lowbit/convert"
)

// newDownloadCmd is `lowbit download`: the hub stage of convert on its own,
// for users who want only the files (in the cache huggingface_hub shares).
func newDownloadCmd() *cobra.Command {
	var (
		revision string
		include  []string
		workers  int
		offline  bool
		quiet    bool
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "download <alias | org/repo>",
		Short: "Download a model's files into the HuggingFace cache and print the snapshot path",
		Long: `Download a model's files from the HuggingFace Hub into the cache that huggingface_hub
uses (HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) and print the
snapshot directory. Without --include it fetches what conversion needs: config, safetensors
weights (and their index), tokenizer and generation files. Files already in the cache are
not fetched again; an interrupted download resumes. Set HF_TOKEN (or run
` + "`huggingface-cli login`" + `) for gated models; HF_ENDPOINT picks another Hub.`,
		Example: `  lowbit download tinyllama
  lowbit download TinyLlama/TinyLlama-1.1B-Chat-v1.0 --include 'config.json' --include '*.safetensors'
  lowbit download tinyllama --offline --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			repo := args[0]
			if e, ok := convert.Lookup(repo); ok {
				if e.Embedded {
					return fmt.Errorf("%s is built into lowbit: there is nothing to download (lowbit convert %s --bits 4)", e.Alias, e.Alias)
				}
				repo = e.Repo
			}
			c, err := newHubClient(offline, workers, progressWriter(quiet || asJSON), noticeWriter(cmd, quiet))
			if err != nil {
				return err
			}
			snap, err := c.Snapshot(cmd.Context(), repo, revision, include)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), snap)
			}
			fmt.Fprintln(cmd.OutOrStdout(), snap.Dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&revision, "revision", "main", "branch, tag or commit")
	f.StringArrayVar(&include, "include", nil, "glob of files to fetch, repeatable (default: what conversion needs)")
	f.IntVar(&workers, "workers", 0, "parallel files and ranged parts")
	f.BoolVar(&offline, "offline", false, "use the cache only (also HF_HUB_OFFLINE=1)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	f.BoolVar(&asJSON, "json", false, "print the snapshot as JSON (path, repo_id, revision, commit, files)")
	return cmd
}
