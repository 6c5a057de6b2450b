package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"lowbit/convert"
	"lowbit/hub"
	"lowbit/store"
)

func newRmCmd() *cobra.Command {
	var cached bool
	cmd := &cobra.Command{
		Use:   "rm [--cached] <model | repo>...",
		Short: "Remove converted models from the store, or source repos from the HF cache",
		Long: `rm removes converted models from the store by name (lowbit list shows them): only
directories of $LOWBIT_HOME/models holding a valid lowbit manifest.json; anything else
is refused and left as it is. With --cached it removes source repos (org/name, or a
built-in alias) from the HuggingFace cache, as huggingface_hub's delete-cache does: the
repo's models--org--name folder, only when it holds nothing but what huggingface_hub
keeps there. Each argument is removed or refused on its own; the exit status is 1 when
any was refused.`,
		Example: `  lowbit rm demo-q4
  lowbit rm --cached tinyllama
  lowbit rm --cached TinyLlama/TinyLlama-1.1B-Chat-v1.0`,
		Aliases: []string{"remove"},
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var remove func(string) (string, int64, error)
			if cached {
				cacheDir := hub.OptionsFromEnv().CacheDir
				remove = func(name string) (string, int64, error) {
					repo := name
					if e, ok := convert.Lookup(name); ok {
						if e.Embedded {
							return "", 0, fmt.Errorf("%s is built into lowbit, not in the HF cache", name)
						}
						repo = e.Repo
					}
					n, err := store.RemoveCached(cacheDir, repo)
					return repo + " from the HF cache " + cacheDir, n, err
				}
			} else {
				models, err := store.FromEnv()
				if err != nil {
					return err
				}
				remove = func(name string) (string, int64, error) {
					n, err := models.Remove(name)
					return name + " from " + models.ModelsDir(), n, err
				}
			}
			var errs []error
			for _, name := range args {
				what, n, err := remove(name)
				if err != nil {
					errs = append(errs, fmt.Errorf("rm %s: %w", name, err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s (%s)\n", what, humanBytes(n))
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&cached, "cached", false, "remove source repos from the HuggingFace cache instead")
	return cmd
}
