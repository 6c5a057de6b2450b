package gpu

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// kernelFS holds the kernel sources and their PTX (built by `make kernels`).
//
//go:embed kernels
var kernelFS embed.FS

// ptxHashPrefix starts the first line of every PTX file: the sha256 of the
// .cu it was compiled from, so a test can tell stale PTX.
const ptxHashPrefix = "// lowbit-cu-sha256: "

// kernelFamilies lists the .cu files (without extension), sorted.
func kernelFamilies() ([]string, error) {
	ents, err := fs.ReadDir(kernelFS, "kernels")
	if err != nil {
		return nil, fmt.Errorf("gpu: embedded kernels: %w", err)
	}
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".cu"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ptxArch is the PTX target used for a capability: sm_90 code for Hopper
// and newer, sm_80 otherwise.
func ptxArch(major int) string {
	if major >= 9 {
		return "sm90"
	}
	return "sm80"
}

// readPTX returns the PTX of family for arch, from dir when set (an
// experiment's LOWBIT_PTX_DIR), else the embedded one; both are gzipped
// (kernels/Makefile).
func readPTX(family, arch, dir string) ([]byte, error) {
	name := family + "." + arch + ".ptx.gz"
	var gz []byte
	var err error
	if dir != "" {
		if gz, err = os.ReadFile(filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("gpu: LOWBIT_PTX_DIR=%s: %w", dir, err)
		}
	} else if gz, err = kernelFS.ReadFile("kernels/" + name); err != nil {
		return nil, fmt.Errorf("gpu: kernels/%s is not embedded (run `make kernels` on a machine with nvcc): %w", name, err)
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("gpu: %s: %w", name, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("gpu: %s: %w", name, err)
	}
	return b, nil
}

// parsePTXHash reads the source hash from a PTX file's first line.
func parsePTXHash(ptx []byte) (string, error) {
	line, _, _ := bufio.NewReader(bytes.NewReader(ptx)).ReadLine()
	h, ok := strings.CutPrefix(string(line), ptxHashPrefix)
	if !ok {
		return "", fmt.Errorf("first line %q does not start with %q", truncate(string(line), 80), ptxHashPrefix)
	}
	h = strings.TrimSpace(h)
	if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("source hash %q is not a sha256", truncate(h, 80))
	}
	return h, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// sourceHash is the sha256 of a kernel source followed by the local
// headers it includes (`#include "name.cuh"`, in order), as the Makefile
// writes it: editing a header makes the PTX of its includers stale too.
func sourceHash(src []byte) (string, error) {
	h := sha256.New()
	h.Write(src)
	for _, line := range strings.Split(string(src), "\n") {
		rest, ok := strings.CutPrefix(line, `#include "`)
		end := strings.LastIndexByte(rest, '"')
		if !ok || end < 0 {
			continue
		}
		name := rest[:end]
		b, err := kernelFS.ReadFile("kernels/" + name)
		if err != nil {
			return "", fmt.Errorf("gpu: kernels/%s: %w", name, err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// loadModules loads the PTX of every kernel family (device thread).
func (d *Device) loadModules() error {
	fams, err := kernelFamilies()
	if err != nil {
		return err
	}
	arch := ptxArch(d.major)
	for _, f := range fams {
		ptx, err := readPTX(f, arch, d.exp.ptxDir)
		if err != nil {
			return err
		}
		if err := d.cu.LoadModule(f+"."+arch+".ptx", ptx); err != nil {
			return err
		}
	}
	return nil
}
