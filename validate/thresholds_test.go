package validate_test

import (
	"testing"

	"lowbit/manifest"
	"lowbit/validate"
)

// TestThresholdsOfEveryBitWidth: lowbit's super-block formats, and mixes
// whose best format at or below the target is one of them, are held to
// the marks of the format of as many bits or fewer, not to a float's.
func TestThresholdsOfEveryBitWidth(t *testing.T) {
	q4, q2 := validate.DefaultThresholds("q4"), validate.DefaultThresholds("q2")
	for _, tc := range []struct {
		name   string
		format string
		target float64
		want   validate.Thresholds
	}{
		{"q4s", "q4s", 0, q4},
		{"q3s", "q3s", 0, q2},
		{"q2s", "q2s", 0, q2},
		{"a mix at 4.6 bits", "mix4.6", 4.6, q4},
		{"a mix at 3.6 bits", "mix3.6", 3.6, q2},
		{"a mix at 2.7 bits", "mix2.7", 2.7, q2},
	} {
		man := &manifest.Manifest{Quantization: manifest.Quantization{Format: tc.format, TargetBits: tc.target}}
		if got := validate.ManifestThresholds(man); got != tc.want {
			t.Errorf("%s: marks %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
