package convert

import (
	"strings"
	"testing"
)

// TestBitsPerWeight pins the storage cost of each --bits: the code's bits
// plus an fp16 scale (and for q4 and q2 an fp16 minimum) a group.
func TestBitsPerWeight(t *testing.T) {
	tests := []struct {
		bits  string
		group int
		want  float64
	}{
		{"8", 0, 8.5}, {"q8", 128, 8.125}, {"4", 0, 5}, {"4", 128, 4.25},
		{"2", 0, 3}, {"2", 64, 2.5}, {"1", 0, 1.5}, {"ternary", 0, 2}, {"tq2", 64, 2},
	}
	for _, tc := range tests {
		got, err := BitsPerWeight(tc.bits, tc.group)
		if err != nil || got != tc.want {
			t.Errorf("BitsPerWeight(%q, %d) = %v, %v; want %v", tc.bits, tc.group, got, err, tc.want)
		}
	}
	for _, bits := range []string{"3", "f16", ""} {
		if _, err := BitsPerWeight(bits, 0); err == nil || !strings.Contains(err.Error(), "unknown --bits") {
			t.Errorf("BitsPerWeight(%q): err %v, want unknown --bits", bits, err)
		}
	}
}
