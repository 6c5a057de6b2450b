package hub

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lowbit/hub/hubtest"
)

// The kill test's child process downloads from the endpoint in this
// variable into the cache in the other.
const (
	killEndpointEnv = "LOWBIT_HUB_KILL_TEST_ENDPOINT"
	killCacheEnv    = "LOWBIT_HUB_KILL_TEST_CACHE"
)

// TestKillDuringDownload runs downloads in a child process (this test
// binary again) and SIGKILLs it at random moments, round after round on
// one cache: no blob or snapshot file may ever look whole without being
// whole, and a last run must complete and verify.
func TestKillDuringDownload(t *testing.T) {
	if ep := os.Getenv(killEndpointEnv); ep != "" {
		c, err := New(Options{Endpoint: ep, CacheDir: os.Getenv(killCacheEnv), Workers: 4, PartSize: 16 << 10})
		if err == nil {
			_, err = c.Snapshot(context.Background(), "org/kill", "main", nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() {
		t.Skip("runs child processes")
	}
	s := hubtest.New()
	t.Cleanup(s.Close)
	s.LFSThreshold = 1 << 20 // tokenizer.json comes from git, checked by its git blob id
	repo := &hubtest.Repo{Files: map[string][]byte{
		"config.json":       []byte(`{"architectures":["LlamaForCausalLM"]}`),
		"tokenizer.json":    randomBytes(30_000, 31), // under two parts: one stream
		"model.safetensors": randomBytes(1<<20+77, 32),
	}}
	s.AddRepo("org/kill", repo)
	// Slow enough, next to the rounds' kill times, that the rounds are
	// killed mid-download, each getting a little further, on both the
	// parallel-parts path (model.safetensors) and the stream path.
	s.SetFaults("model.safetensors", &hubtest.Faults{Rate: 256 << 10})
	s.SetFaults("tokenizer.json", &hubtest.Faults{Rate: 16 << 10})
	cache := t.TempDir()
	for round := range 15 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringDownload$")
		cmd.Env = append(os.Environ(), killEndpointEnv+"="+s.Hub.URL, killCacheEnv+"="+cache)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(rand.IntN(250)) * time.Millisecond
		time.Sleep(delay)
		cmd.Process.Kill() // SIGKILL: no cleanup runs
		cmd.Wait()
		if !checkCache(t, cache, "org/kill", repo) {
			t.Fatalf("round %d, killed after %v: the cache holds a file that looks whole but is not", round, delay)
		}
	}
	s.SetFaults("model.safetensors", nil)
	s.SetFaults("tokenizer.json", nil)
	c, err := New(Options{Endpoint: s.Hub.URL, CacheDir: cache, Workers: 4, PartSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(context.Background(), "org/kill", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range repo.Files {
		checkFile(t, filepath.Join(snap.Dir, name), b)
	}
	checkCache(t, cache, "org/kill", repo)
}

// checkCache reports whether every blob of repo in cache hashes to its
// name, every partial download holds the file's bytes where it claims to
// (a prefix, or the parts its record lists), and every snapshot path that
// opens holds the file's bytes.
func checkCache(t *testing.T, cache, id string, repo *hubtest.Repo) bool {
	t.Helper()
	ok := true
	root := filepath.Join(cache, repoFolder(id))
	byEtag := map[string][]byte{}
	for _, b := range repo.Files {
		sum := sha256.Sum256(b)
		byEtag[hex.EncodeToString(sum[:])] = b
		byEtag[hubtest.GitBlobID(b)] = b
	}
	blobs, _ := os.ReadDir(filepath.Join(root, "blobs"))
	for _, e := range blobs {
		name := e.Name()
		if etag, isPart := strings.CutSuffix(name, ".incomplete"); isPart {
			if err := checkPartial(filepath.Join(root, "blobs", name), byEtag[etag]); err != nil {
				t.Error(err)
				ok = false
			}
			continue
		}
		if strings.Contains(name, ".") { // a record, or its temporary
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, "blobs", name))
		if err != nil {
			t.Errorf("blob %s: %v", name, err)
			ok = false
			continue
		}
		var got string
		if len(name) == 64 {
			sum := sha256.Sum256(b)
			got = hex.EncodeToString(sum[:])
		} else {
			h := sha1.New()
			fmt.Fprintf(h, "blob %d\x00", len(b))
			h.Write(b)
			got = hex.EncodeToString(h.Sum(nil))
		}
		if got != name {
			t.Errorf("blob %s holds %d bytes hashing to %s", name, len(b), got)
			ok = false
		}
	}
	filepath.WalkDir(filepath.Join(root, "snapshots"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil // a link to a blob not there yet: not whole, and does not look it
		}
		name, _, _ := strings.Cut(filepath.Base(path), ".lowbit-tmp-")
		if want, known := repo.Files[name]; !known || !bytes.Equal(b, want) {
			t.Errorf("snapshot file %s holds %d bytes that are not %s", path, len(b), name)
			ok = false
		}
		return nil
	})
	if ref, err := os.ReadFile(filepath.Join(root, "refs", "main")); err == nil && string(ref) != repo.Commit {
		t.Errorf("refs/main holds %q", ref)
		ok = false
	}
	return ok
}

// checkPartial checks that a partial download of want holds want's bytes
// in the parts its record lists, or without a record in all it holds.
func checkPartial(path string, want []byte) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if rb, err := os.ReadFile(path + ".parts"); err == nil {
		var r partRecord
		if err := json.Unmarshal(rb, &r); err != nil {
			return fmt.Errorf("%s.parts: %v", path, err)
		}
		for _, i := range r.Done {
			from, to := int64(i)*r.PartSize, min(int64(i+1)*r.PartSize, int64(len(want)))
			if int64(len(got)) < to || !bytes.Equal(got[from:to], want[from:to]) {
				return fmt.Errorf("%s: part %d is recorded done but differs", path, i)
			}
		}
		return nil
	}
	if len(got) > len(want) || !bytes.Equal(got, want[:len(got)]) {
		return fmt.Errorf("%s: %d bytes that are not a prefix of the file", path, len(got))
	}
	return nil
}

// checkFile wants path to hold want.
func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes, want %d (%v)", path, len(got), len(want), err)
	}
}

// mkdirWrite writes b to path, making its folder.
func mkdirWrite(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
