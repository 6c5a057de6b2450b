package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"lowbit/quantize"
)

// bitnetPacked is testdata/parity/bitnet_packed.json, written by
// bitnet_gen.py with transformers 5.17: a ternary matrix, pack_weights of
// it, unpack_weights of that, and BitLinear's output for two inputs.
type bitnetPacked struct {
	Rows, Cols  int
	Ternary     []int8
	Packed      []byte
	Unpacked    []int8
	WeightScale float32 `json:"weight_scale"`
	X, Y        []float32
}

func readBitnetPacked(t *testing.T) bitnetPacked {
	t.Helper()
	b, err := os.ReadFile("../testdata/parity/bitnet_packed.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		bitnetPacked
		Packed []int `json:"packed"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	r := rec.bitnetPacked
	for _, v := range rec.Packed {
		r.Packed = append(r.Packed, byte(v))
	}
	return r
}

func TestBitNetPackedMatchesTransformers(t *testing.T) {
	ref := readBitnetPacked(t)
	if len(ref.Packed) != ref.Rows/4*ref.Cols || len(ref.Ternary) != ref.Rows*ref.Cols {
		t.Fatalf("testdata: %d packed bytes, %d values for [%d, %d]", len(ref.Packed), len(ref.Ternary), ref.Rows, ref.Cols)
	}
	// Our writer of the layout gives transformers' bytes.
	packed, err := packBitNet(ref.Ternary, ref.Rows, ref.Cols)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(packed, ref.Packed) {
		t.Fatalf("packBitNet differs from transformers' pack_weights:\n got %v\nwant %v", packed[:16], ref.Packed[:16])
	}
	// Unpacking gives transformers' unpack_weights, at scale 1/weight_scale.
	q, err := unpackBitNet(context.Background(), "w", ref.Packed, ref.Rows/4, ref.Cols, ref.WeightScale, "bitlinear")
	if err != nil {
		t.Fatal(err)
	}
	if q.Format != quantize.TQ2 || q.Rows != ref.Rows || q.Cols != ref.Cols || q.Scale != 1/ref.WeightScale {
		t.Fatalf("tensor %s [%d, %d] scale %v", q.Format, q.Rows, q.Cols, q.Scale)
	}
	row := make([]float32, q.Cols)
	for r := 0; r < q.Rows; r++ {
		q.DequantizeRow(r, row)
		for c, v := range row {
			if want := float32(ref.Unpacked[r*q.Cols+c]) * q.Scale; v != want {
				t.Fatalf("[%d, %d] = %v, transformers %v", r, c, v, want)
			}
		}
	}
	// BitLinear's forward (int8 activations, divided by weight_scale) equals
	// lowbit's W2A8 matvec on the unpacked tensor.
	for i := 0; i < len(ref.X)/ref.Cols; i++ {
		y := make([]float32, q.Rows)
		quantize.MatVec(context.Background(), q, ref.X[i*ref.Cols:(i+1)*ref.Cols], y, 1)
		want := ref.Y[i*ref.Rows : (i+1)*ref.Rows]
		if e := quantize.RelL2(want, y); !(e <= 1e-6) {
			t.Errorf("input %d: rel L2 %.3g against BitLinear\n got %v\nwant %v", i, e, y[:4], want[:4])
		}
	}
}

func TestBitNetPackRoundTripAndScales(t *testing.T) {
	rows, cols := 12, 37
	tern := make([]int8, rows*cols)
	for i := range tern {
		tern[i] = int8(i*7%3) - 1
	}
	p, err := packBitNet(tern, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		class string
		ws    float32
		want  float32
	}{{"bitlinear", 4, 0.25}, {"", 2, 0.5}, {"autobitlinear", 0.03, 0.03}} {
		q, err := unpackBitNet(context.Background(), "w", p, rows/4, cols, tc.ws, tc.class)
		if err != nil {
			t.Fatal(err)
		}
		if q.Scale != tc.want {
			t.Errorf("%q weight_scale %v: scale %v, want %v", tc.class, tc.ws, q.Scale, tc.want)
		}
		row := make([]float32, cols)
		for r := 0; r < rows; r++ {
			q.DequantizeRow(r, row)
			for c, v := range row {
				if v != float32(tern[r*cols+c])*tc.want {
					t.Fatalf("%q: [%d, %d] = %v, want %v", tc.class, r, c, v, float32(tern[r*cols+c])*tc.want)
				}
			}
		}
	}
}

func TestBitNetPackedBadInput(t *testing.T) {
	good, _ := packBitNet(make([]int8, 8*4), 8, 4)
	bad := append([]byte(nil), good...)
	bad[5] |= 3 << 4
	for _, tc := range []struct {
		name   string
		data   []byte
		pr, c  int
		ws     float32
		class  string
		substr string
	}{
		{"short", good[:7], 2, 4, 1, "bitlinear", "do not make"},
		{"code 3", bad, 2, 4, 1, "bitlinear", "code 3"},
		{"zero scale", good, 2, 4, 0, "bitlinear", "not a positive finite"},
		{"negative scale", good, 2, 4, -1, "bitlinear", "not a positive finite"},
		{"class", good, 2, 4, 1, "fancy", "linear_class"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unpackBitNet(context.Background(), "model.layers.0.mlp.up_proj.weight", tc.data, tc.pr, tc.c, tc.ws, tc.class)
			if err == nil || !strings.Contains(err.Error(), tc.substr) || !strings.Contains(err.Error(), "up_proj") {
				t.Errorf("error %v, want one naming the tensor and %q", err, tc.substr)
			}
		})
	}
	if _, err := packBitNet([]int8{2, 0, 0, 0}, 4, 1); err == nil {
		t.Error("packing a 2 succeeded")
	}
	if _, err := packBitNet(make([]int8, 6), 6, 1); err == nil {
		t.Error("packing 6 rows succeeded")
	}
}
