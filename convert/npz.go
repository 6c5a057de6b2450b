package convert

import (
	"context"
	"fmt"
	"os"

	"lowbit/npz"
	"lowbit/safetensors"
)

// npyDescr maps stored dtypes to numpy's type descriptors.
var npyDescr = map[safetensors.DType]string{"F32": "<f4", "F16": "<f2", "U8": "|u1", "I8": "|i1"}

// writeNPZ writes every stored tensor of the converted safetensors file into
// an .npz beside it, for numpy-based tools. It streams tensor by tensor from
// the memory-mapped file.
func writeNPZ(ctx context.Context, stPath, npzPath string) (err error) {
	st, err := safetensors.Open(stPath)
	if err != nil {
		return err
	}
	defer st.Close()
	f, err := os.Create(npzPath)
	if err != nil {
		return fmt.Errorf("npz: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("npz: %w", cerr)
		}
	}()
	zw := npz.NewWriter(f, false)
	for _, t := range st.Tensors() {
		if err := ctx.Err(); err != nil {
			return err
		}
		descr, ok := npyDescr[t.DType]
		if !ok {
			if t.DType != "BF16" {
				return fmt.Errorf("npz: tensor %s: dtype %s has no numpy equivalent", t.Name, t.DType)
			}
			descr = "<u2" // numpy has no bfloat16: raw bits, documented in the manifest's dtype
		}
		data, err := st.Data(t.Name)
		if err != nil {
			return err
		}
		shape := make([]int, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int(d)
		}
		if err := zw.WriteArray(t.Name, descr, shape, data); err != nil {
			return fmt.Errorf("npz: tensor %s: %w", t.Name, err)
		}
	}
	return zw.Close()
}
