// Package validate measures what the bits cost, so users can trust a
// low-bit model: kernel checks hold every backend's products (the model's
// CPU backend, package quantize's own products, CUDA) to a float64
// reference computed from the same packed bytes by independent code, within
// a tolerance per bit width; model checks run a quantized model and its
// float original over a text and compare hidden states, next-token
// distributions (KL divergence, top-1 agreement) and perplexity. Reports
// print as a table, JSON or a self-contained HTML page.
package validate

import "lowbit/quantize"

// Status of a check.
const (
	Pass    = "PASS"
	Fail    = "FAIL"
	Skipped = "SKIPPED"
)

// Tolerance is the largest relative L2 error a kernel may have against the
// reference on the same quantized weights: 1-bit 5%, 2-bit 1% (ternary too,
// its int8 activations included), 4-bit 0.5%, 8-bit 0.1%.
func Tolerance(f quantize.Format) float64 {
	switch f {
	case quantize.Q1:
		return 0.05
	case quantize.Q2, quantize.TQ2:
		return 0.01
	case quantize.Q4:
		return 0.005
	case quantize.Q8:
		return 0.001
	}
	return 1e-5
}
