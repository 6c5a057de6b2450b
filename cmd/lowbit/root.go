package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lowbit",
		Short: "Take a HuggingFace model to a fast, validated low-bit model",
		Long: `lowbit downloads a model from the HuggingFace Hub, quantizes it to 1, 2, 4 or 8 bits
(or BitNet b1.58 ternary), writes a model directory with a JSON manifest, validates
what the bits cost, and runs it on an NVIDIA GPU or the CPU.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("lowbit {{.Version}}\n") // as the version command prints it
	root.AddCommand(newVersionCmd(), newConvertCmd(), newExportCmd(), newDownloadCmd(), newListCmd(), newRmCmd(), newLoadtestCmd())
	for _, c := range []*cobra.Command{newRunCmd(), newServeCmd(), newValidateCmd(), newBenchCmd(), newShowCmd()} {
		c.Long += "\n\n" + modelArgHelp
		root.AddCommand(c)
	}
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the lowbit version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "lowbit %s\n", version)
		},
	}
}
