package convert

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lowbit/internal/fixture"
	"lowbit/manifest"
	"lowbit/model"
)

// killChildEnv names the source and output of a conversion that this test
// binary runs as a child process, for TestConvertKilled to kill.
const killChildEnv = "LOWBIT_TEST_CONVERT_CHILD"

// TestConvertKilled kills conversions (SIGKILL) at random points, again and
// again, each replacing the last one's model with --force: after every kill
// the output is absent or a whole model whose files match its manifest, and
// the next conversion completes and removes the dead writers' temporary
// directories.
func TestConvertKilled(t *testing.T) {
	if args := os.Getenv(killChildEnv); args != "" {
		src, out, _ := strings.Cut(args, "\n")
		if _, err := Run(context.Background(), Options{Source: src, Out: out, Bits: "4", Force: true, Workers: 2}); err != nil && !strings.Contains(err.Error(), "failed validation") {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() {
		t.Skip("kills conversions in child processes")
	}
	spec := fixture.Llama()
	spec.Hidden, spec.Intermediate, spec.Layers = 96, 160, 4 // long enough to be killed at many points
	src := writeSource(t, spec, nil)
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConvertKilled$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+src+"\n"+out)
		return cmd
	}

	// How long one conversion takes here sets the range of kill times.
	start := time.Now()
	if b, err := child().CombinedOutput(); err != nil {
		t.Fatalf("child conversion: %v\n%s", err, b)
	}
	whole(t, out)
	full := time.Since(start)

	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 16 {
		cmd := child()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Float64() * float64(full)))
		cmd.Process.Kill()
		cmd.Wait()
		if _, err := os.Stat(out); err == nil {
			whole(t, out)
		} else if !os.IsNotExist(err) {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if b, err := child().CombinedOutput(); err != nil {
		t.Fatalf("the conversion after the kills: %v\n%s", err, b)
	}
	whole(t, out)
	// Every dead writer's directory is gone, but for one killed in the
	// instant between making its directory and locking the marker inside
	// (atomicfile keeps what has no marker: it may be no writer's).
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		if e.Name() == "out" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(parent, e.Name(), ".lowbit-partial")); err == nil {
			t.Errorf("after the last conversion the parent holds %s, a dead writer's directory with its marker", e.Name())
		}
	}
}

// whole checks that dir is a complete model: every file the manifest lists
// has its size and checksum, and the model loads (tensor checksums too).
func whole(t *testing.T, dir string) {
	t.Helper()
	m, err := manifest.Read(dir)
	if err != nil {
		t.Fatalf("%s looks like a model but is not whole: %v", dir, err)
	}
	for _, f := range m.Files {
		got, err := hashFile(filepath.Join(dir, f.Path))
		if err != nil || got.Size != f.Size || got.SHA256 != f.SHA256 {
			t.Fatalf("%s: %s does not match the manifest (%v)", dir, f.Path, err)
		}
	}
	if _, err := model.Load(context.Background(), dir, model.LoadOptions{}); err != nil {
		t.Fatalf("%s does not load: %v", dir, err)
	}
}
