package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lowbit/hub/hubtest"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testRepo() *hubtest.Repo {
	return &hubtest.Repo{Files: map[string][]byte{
		"config.json":               []byte(`{"architectures":["LlamaForCausalLM"]}`),
		"model.safetensors":         randomBytes(300_000, 1),
		"tokenizer.json":            []byte(`{"model":{}}`),
		"README.md":                 []byte("not needed"),
		"sub/dir/extra.safetensors": randomBytes(5000, 2),
	}}
}

func newClient(t *testing.T, s *hubtest.Server, mod func(*Options)) (*Client, string) {
	t.Helper()
	cache := t.TempDir()
	o := Options{Endpoint: s.Hub.URL, CacheDir: cache, Workers: 4, PartSize: 64 << 10, Retries: 4}
	if mod != nil {
		mod(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, cache
}

func TestSnapshotLayout(t *testing.T) {
	s := hubtest.New()
	defer s.Close()
	repo := testRepo()
	s.AddRepo("org/model", repo)
	c, cache := newClient(t, s, func(o *Options) { o.Token = "secret" })
	snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cache, "models--org--model")
	if snap.Dir != filepath.Join(root, "snapshots", repo.Commit) || snap.Commit != repo.Commit {
		t.Fatalf("snapshot %+v", snap)
	}
	ref, _ := os.ReadFile(filepath.Join(root, "refs", "main"))
	if string(ref) != repo.Commit {
		t.Errorf("refs/main = %q", ref)
	}
	for name, want := range repo.Files {
		p := filepath.Join(snap.Dir, name)
		if name == "README.md" {
			if _, err := os.Lstat(p); err == nil {
				t.Error("README.md downloaded though conversion does not need it")
			}
			continue
		}
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", name, err)
		}
		etag := hubtest.GitBlobID(want)
		if len(want) >= s.LFSThreshold {
			sum := sha256.Sum256(want)
			etag = hex.EncodeToString(sum[:])
		}
		wantTarget := strings.Repeat("../", strings.Count(name, "/")+2) + "blobs/" + etag
		if target != wantTarget {
			t.Errorf("%s -> %s, want %s", name, target, wantTarget)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s content differs (%v)", name, err)
		}
	}
	if s.CDNAuthLeaks.Load() != 0 {
		t.Errorf("the token was sent to the CDN %d times", s.CDNAuthLeaks.Load())
	}
	// Second run: everything from the cache, only the revision API is asked.
	before := s.Requests.Load()
	if _, err := c.Snapshot(context.Background(), "org/model", "main", nil); err != nil {
		t.Fatal(err)
	}
	if n := s.Requests.Load() - before; n != 1 {
		t.Errorf("cached snapshot made %d requests, want 1 (the revision API)", n)
	}
	// Offline: the cache alone.
	off, err := CachedSnapshot(cache, "org/model", "main", nil)
	if err != nil || off.Dir != snap.Dir || len(off.Files) != 4 {
		t.Fatalf("offline snapshot %+v, %v", off, err)
	}
	if _, err := CachedSnapshot(cache, "org/other", "main", nil); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "org/other") {
		t.Errorf("missing repo offline: %v", err)
	}
	if _, err := CachedSnapshot(cache, "org/model", "v2", nil); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "v2") {
		t.Errorf("missing revision offline: %v", err)
	}
}

// TestReadsPythonCache lays a cache out as huggingface_hub does and reads it
// offline without a request.
func TestReadsPythonCache(t *testing.T) {
	cache := t.TempDir()
	commit := strings.Repeat("ab", 20)
	root := filepath.Join(cache, "models--TinyLlama--TinyLlama-1.1B-Chat-v1.0")
	cfg := []byte(`{"architectures":["LlamaForCausalLM"]}`)
	etag := hubtest.GitBlobID(cfg)
	os.MkdirAll(filepath.Join(root, "blobs"), 0o755)
	os.MkdirAll(filepath.Join(root, "refs"), 0o755)
	os.MkdirAll(filepath.Join(root, "snapshots", commit), 0o755)
	os.WriteFile(filepath.Join(root, "blobs", etag), cfg, 0o644)
	os.WriteFile(filepath.Join(root, "refs", "main"), []byte(commit), 0o644)
	os.Symlink("../../blobs/"+etag, filepath.Join(root, "snapshots", commit, "config.json"))
	c, err := New(Options{Endpoint: "http://127.0.0.1:1", CacheDir: cache, Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(context.Background(), "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(snap.Dir, "config.json")); !bytes.Equal(b, cfg) || snap.Commit != commit {
		t.Errorf("snapshot %+v", snap)
	}
}

func TestErrors(t *testing.T) {
	s := hubtest.New()
	defer s.Close()
	s.AddRepo("org/model", testRepo())
	gated := testRepo()
	gated.Gated, gated.Allowed = true, []string{"good"}
	s.AddRepo("meta/gated", gated)
	tests := []struct {
		name, repo, rev, token string
		want                   error
		text                   string
	}{
		{"gated no token", "meta/gated", "main", "", ErrGated, "huggingface-cli login"},
		{"gated no access", "meta/gated", "main", "bad", ErrGated, "accept its license"},
		{"missing repo", "org/nothing", "main", "", ErrRepoNotFound, "org/nothing"},
		{"missing revision", "org/model", "v9", "", ErrRevisionNotFound, `"v9"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newClient(t, s, func(o *Options) { o.Token = tc.token })
			_, err := c.Snapshot(context.Background(), tc.repo, tc.rev, nil)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
	c, _ := newClient(t, s, func(o *Options) { o.Token = "good" })
	if _, err := c.Snapshot(context.Background(), "meta/gated", "main", nil); err != nil {
		t.Errorf("gated with access: %v", err)
	}
	if _, err := c.Snapshot(context.Background(), "org/model", "main", []string{"nothing*"}); err == nil {
		t.Error("no matching file accepted")
	}
	bin := &hubtest.Repo{Files: map[string][]byte{"config.json": []byte("{}"), "pytorch_model.bin": []byte("x")}}
	s.AddRepo("org/bin", bin)
	if _, err := c.Snapshot(context.Background(), "org/bin", "main", nil); err == nil || !strings.Contains(err.Error(), "PyTorch .bin") {
		t.Errorf("bin-only repo: %v", err)
	}
	if _, err := c.Snapshot(context.Background(), "../etc", "main", nil); err == nil {
		t.Error("bad repo id accepted")
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults hubtest.Faults
		want   error
	}{
		{"dropped connection resumes", hubtest.Faults{DropAfter: 100_000, DropTimes: 2, FlipByte: -1}, nil},
		{"500 then success", hubtest.Faults{Fail500: 2, FlipByte: -1}, nil},
		{"flipped byte", hubtest.Faults{FlipByte: 12345}, ErrChecksum},
	}
	for _, tc := range tests {
		for _, parts := range []int64{64 << 10, 1 << 30} { // parallel parts, and one stream
			t.Run(tc.name, func(t *testing.T) {
				s := hubtest.New()
				defer s.Close()
				repo := testRepo()
				s.AddRepo("org/model", repo)
				f := tc.faults
				s.SetFaults("model.safetensors", &f)
				c, cache := newClient(t, s, func(o *Options) { o.PartSize = parts })
				snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
				if tc.want != nil {
					if !errors.Is(err, tc.want) {
						t.Fatalf("err = %v, want %v", err, tc.want)
					}
					blobs, _ := os.ReadDir(filepath.Join(cache, "models--org--model", "blobs"))
					for _, b := range blobs {
						if sum := sha256.Sum256(repo.Files["model.safetensors"]); strings.HasPrefix(b.Name(), hex.EncodeToString(sum[:])) {
							t.Errorf("corrupt data left in the cache: %s", b.Name())
						}
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				got, _ := os.ReadFile(filepath.Join(snap.Dir, "model.safetensors"))
				if !bytes.Equal(got, repo.Files["model.safetensors"]) {
					t.Fatal("content differs after recovery")
				}
			})
		}
	}
}

func TestStallCancels(t *testing.T) {
	s := hubtest.New()
	defer s.Close()
	s.AddRepo("org/model", testRepo())
	s.SetFaults("model.safetensors", &hubtest.Faults{Stall: true, FlipByte: -1})
	c, _ := newClient(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Snapshot(ctx, "org/model", "main", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("cancellation took too long")
	}
}

func TestResumeIncomplete(t *testing.T) {
	s := hubtest.New()
	defer s.Close()
	repo := testRepo()
	s.AddRepo("org/model", repo)
	c, cache := newClient(t, s, func(o *Options) { o.PartSize = 1 << 30 })
	sum := sha256.Sum256(repo.Files["model.safetensors"])
	blobs := filepath.Join(cache, "models--org--model", "blobs")
	os.MkdirAll(blobs, 0o755)
	half := repo.Files["model.safetensors"][:150_000]
	os.WriteFile(filepath.Join(blobs, hex.EncodeToString(sum[:])+".incomplete"), half, 0o644)
	if _, err := c.Snapshot(context.Background(), "org/model", "main", nil); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsFromEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", "http://example.test")
	t.Setenv("HF_HUB_OFFLINE", "1")
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_abc\n"), 0o600)
	o := OptionsFromEnv()
	if o.Token != "hf_abc" || o.CacheDir != filepath.Join(home, "hub") || !o.Offline || o.Endpoint != "http://example.test" {
		t.Errorf("%+v", o)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	if OptionsFromEnv().Token != "hf_env" {
		t.Error("HF_TOKEN does not win over the token file")
	}
}

func BenchmarkDownload(b *testing.B) {
	size := 512 << 20
	if testing.Short() {
		size = 64 << 20
	}
	s := hubtest.New()
	defer s.Close()
	data := randomBytes(size, 3)
	s.AddRepo("org/big", &hubtest.Repo{Files: map[string][]byte{"config.json": []byte("{}"), "model.safetensors": data}})
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := New(Options{Endpoint: s.Hub.URL, CacheDir: b.TempDir(), Workers: 8})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Snapshot(context.Background(), "org/big", "main", nil); err != nil {
			b.Fatal(err)
		}
	}
}
