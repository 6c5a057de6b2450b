//go:build lowbitexp

package gpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// readExperiments reads the LOWBIT_* switches of a lowbitexp build.
func readExperiments() (experiments, error) {
	e := experiments{
		noAttnDecode: os.Getenv("LOWBIT_ATTN_DECODE") == "off",
		noPDL:        os.Getenv("LOWBIT_PDL") == "off",
		noGated:      os.Getenv("LOWBIT_GATED") == "off",
		ptxDir:       os.Getenv("LOWBIT_PTX_DIR"),
		skip:         map[string]bool{},
	}
	if v := os.Getenv("LOWBIT_ATTN_SLICE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 16 {
			return e, fmt.Errorf("gpu: LOWBIT_ATTN_SLICE=%q is not a number of positions of 16 or more", v)
		}
		e.attnSlice = n
	}
	if v := os.Getenv("LOWBIT_ATTN_BLOCKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return e, fmt.Errorf("gpu: LOWBIT_ATTN_BLOCKS=%q is not a positive number of blocks", v)
		}
		e.attnBlocks = n
	}
	for _, s := range strings.Split(os.Getenv("LOWBIT_SKIP"), ",") {
		if s != "" {
			e.skip[s] = true
		}
	}
	return e, nil
}
