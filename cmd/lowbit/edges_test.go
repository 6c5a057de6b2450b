package main

import (
	"strings"
	"testing"

	"lowbit/internal/fixture"
)

// TestRoughEdges drives the newcomer's rough edges that lowbit once had,
// each with the behaviour it has now.
func TestRoughEdges(t *testing.T) {
	dir := t.TempDir() // a model with a 256-token context
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		wantErr   string   // "" when the command succeeds
		stdout    []string // in stdout
		notStdout []string
		stderr    func(t *testing.T, stderr string)
	}{
		{name: "bench defaults fit a short context", args: []string{"bench", dir, "-r", "1", "--device", "cpu"},
			stdout: []string{"| pp256 |", "| tg128 |", "| 46.32 K |"}, notStdout: []string{"0.00 B", " 0 GB/s"}},
		{name: "bench tests asked for do not shrink", args: []string{"bench", dir, "-p", "512", "-r", "1", "--device", "cpu"},
			wantErr: "-d 0 plus -p 512 or -n 128 is 512 positions, over the model's context of 256"},
		{name: "bench --bits with a model", args: []string{"bench", dir, "--bits", "8"}, wantErr: "--bits chooses the format of --shape models"},
		{name: "bench --bits ternary and tq2", args: []string{"bench", "--shape", "nosuch", "--bits", "ternary,tq2"}, wantErr: "unknown shape"},
		{name: "version", args: []string{"version"}, stdout: []string{"lowbit " + version + "\n"}},
		{name: "--version", args: []string{"--version"}, stdout: []string{"lowbit " + version + "\n"}},
		{name: "run --revision on a directory", args: []string{"run", dir, "hi", "--revision", "v2"}, wantErr: "--revision v2: " + dir + " is not a Hub repo"},
		{name: "convert --revision on a directory", args: []string{"convert", dir, "--revision", "v2", "--out", t.TempDir() + "/o"}, wantErr: "--revision v2: " + dir + " is a local directory"},
		{name: "run --revision on the demo", args: []string{"run", "demo", "hi", "--revision", "v2"}, wantErr: "demo is built into lowbit, not a Hub repo"},
		{name: "validate -q --offline", args: []string{"validate", "nosuch-model", "-q", "--offline"}, wantErr: "no model found"},
		{name: "convert --workers", args: []string{"convert", dir, "--workers", "1099511627776", "--out", t.TempDir() + "/o"}, wantErr: "--workers 1099511627776 is over the limit of 256"},
		{name: "download --workers", args: []string{"download", "org/x", "--workers", "100000"}, wantErr: "--workers 100000 is over the limit of 256"},
		{name: "validate --seed replays", args: []string{"validate", "--kernels", "--device", "cpu", "--seed", "0", "--json"},
			stdout: []string{`"seed": 0,`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runIn(t, "", tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tc.notStdout {
				if strings.Contains(stdout, w) {
					t.Errorf("stdout has %q:\n%s", w, stdout)
				}
			}
		})
	}
}

// TestNoGPUNotice: where no GPU is found, --device auto says so once a
// command, and --quiet keeps it quiet.
func TestNoGPUNotice(t *testing.T) {
	dir := t.TempDir()
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, quiet := range []bool{false, true} {
		args := []string{"bench", dir, "-p", "4", "-n", "2", "-r", "1"}
		if quiet {
			args = append(args, "-q")
		}
		_, stderr, err := runIn(t, "", args...)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(stderr, "no usable GPU")
		if n > 1 || quiet && n != 0 {
			t.Errorf("quiet=%v: the notice appears %d times:\n%s", quiet, n, stderr)
		}
	}
}
