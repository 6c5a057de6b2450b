package main

import (
	"encoding/json"
	"strings"
	"testing"

	"lowbit/bench"
	"lowbit/internal/fixture"
)

// TestBench runs lowbit bench on a fixture model on the CPU: the table
// and the JSON carry both tests; bad arguments are refused clearly.
func TestBench(t *testing.T) {
	dir := t.TempDir()
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	out, _, err := runIn(t, "", "bench", dir, "-p", "8", "-n", "4", "-r", "2", "--device", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| pp8 |", "| tg4 |", "weights read per token", "| f32 |"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runIn(t, "", "bench", dir, "-p", "0", "-n", "3", "-r", "2", "--device", "cpu", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res []bench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(res) != 1 || len(res[0].Tests) != 1 || res[0].Tests[0].Test != "tg3" || len(res[0].Tests[0].Samples) != 2 {
		t.Fatalf("JSON %s", out)
	}
	// --temp times sampled generation, as lowbit run samples.
	out, _, err = runIn(t, "", "bench", dir, "-p", "0", "-n", "4", "-r", "1", "--device", "cpu", "--temp", "0.8")
	if err != nil || !strings.Contains(out, "| tg4 sampled |") {
		t.Fatalf("sampled bench: %v\n%s", err, out)
	}
	// -b: one batched tg test per size.
	out, _, err = runIn(t, "", "bench", dir, "-p", "0", "-n", "3", "-r", "1", "--device", "cpu", "-b", "1,4")
	if err != nil || !strings.Contains(out, "| tg3 b1 |") || !strings.Contains(out, "| tg3 b4 |") {
		t.Fatalf("batched bench: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", dir, "-b", "0"}, "--batch 0: want 1 or more"},
		{[]string{"bench", dir, "-b", "2", "--temp", "0.7"}, "--batch with --temp"},
		{[]string{"bench"}, "give a model or --shape"},
		{[]string{"bench", dir, "--shape", "tinyllama"}, "give a model or --shape"},
		{[]string{"bench", "--shape", "nosuch"}, "unknown shape"},
		{[]string{"bench", "--shape", "tinyllama", "--bits", "3"}, "--bits 3"},
		{[]string{"bench", dir, "--device", "tpu"}, "want cpu, cuda or auto"},
		{[]string{"bench", dir, "--temp", "-1"}, "--temp -1: want 0 (greedy) or more"},
		{[]string{"bench", dir, "--temp", "0.8", "--top-p", "2"}, "--top-p 2: want 0 to 1"},
	} {
		_, _, err := runIn(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
