package validate

import (
	"fmt"

	"lowbit/gpu"
	"lowbit/quantize"
)

// CUDA checks the GPU's product kernels (package gpu).
type CUDA struct{ D *gpu.Device }

// OpenCUDA opens the first GPU; the error says why there is none (no
// driver, no device, too old), which the report shows as the skip reason.
func OpenCUDA() (*CUDA, error) {
	d, err := gpu.Open(0)
	if err != nil {
		return nil, err
	}
	return &CUDA{D: d}, nil
}

// Close releases the GPU.
func (c *CUDA) Close() error { return c.D.Close() }

// Name implements Backend.
func (c *CUDA) Name() string { return "cuda" }

// MatVec implements Backend.
func (c *CUDA) MatVec(t *quantize.Tensor, x []float32, act Act) ([]float32, error) {
	var a gpu.Activations
	switch act {
	case ActFloat:
		a = gpu.ActFloat
	case ActInt8:
		a = gpu.ActInt8
	case ActBinary:
		a = gpu.ActBinary
	default:
		return nil, fmt.Errorf("validate: unknown activations %q", act)
	}
	m, err := c.D.Upload(t)
	if err != nil {
		return nil, err
	}
	defer c.D.FreeMatrix(m)
	return c.D.MatVecAct(m, x, a)
}

// MatMul implements Backend. The GPU has no W2A8 matrix-matrix kernel yet,
// so tq2 (int8 activations per token) runs one int8 product per token.
func (c *CUDA) MatMul(t *quantize.Tensor, x []float32, n int) ([]float32, error) {
	if !t.Format.Spec().Int8Activations {
		return c.D.MatMul(t, x, n)
	}
	m, err := c.D.Upload(t)
	if err != nil {
		return nil, err
	}
	defer c.D.FreeMatrix(m)
	y := make([]float32, 0, n*t.Rows)
	for i := 0; i < n; i++ {
		yi, err := c.D.MatVecAct(m, x[i*t.Cols:(i+1)*t.Cols], gpu.ActInt8)
		if err != nil {
			return nil, err
		}
		y = append(y, yi...)
	}
	return y, nil
}
