package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lowbit/hub/hubtest"
)

// randomBytes is deterministic noise, 8 bytes at a time.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b[:n]
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

// etagOf is the blob name huggingface_hub gives a served file.
func etagOf(s *hubtest.Server, name string, b []byte) string {
	if s.IsLFS(name, b) {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	return hubtest.GitBlobID(b)
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

// tree lists every path under root: "path" for files and folders,
// "path -> target" for links.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			rel += " -> " + target
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestSnapshotLayout checks that lowbit's cache has exactly huggingface_hub's
// layout, that a second run fetches nothing, and that the cache serves offline.
func TestSnapshotLayout(t *testing.T) {
	repo := testRepo()
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
	c, cache := newClient(t, s, func(o *Options) { o.Token = "secret" })
	snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cache, "models--org--model")
	if snap.Dir != filepath.Join(root, "snapshots", repo.Commit) || snap.Commit != repo.Commit || len(snap.Files) != 4 {
		t.Fatalf("snapshot %+v", snap)
	}
	e := func(name string) string { return etagOf(s, name, repo.Files[name]) }
	snapDir := "models--org--model/snapshots/" + repo.Commit
	want := []string{
		".locks", ".locks/models--org--model",
		".locks/models--org--model/" + e("config.json") + ".lock",
		".locks/models--org--model/" + e("model.safetensors") + ".lock",
		".locks/models--org--model/" + e("sub/dir/extra.safetensors") + ".lock",
		".locks/models--org--model/" + e("tokenizer.json") + ".lock",
		"models--org--model", "models--org--model/blobs",
		"models--org--model/blobs/" + e("config.json"),
		"models--org--model/blobs/" + e("model.safetensors"),
		"models--org--model/blobs/" + e("sub/dir/extra.safetensors"),
		"models--org--model/blobs/" + e("tokenizer.json"),
		"models--org--model/refs", "models--org--model/refs/main",
		"models--org--model/snapshots", snapDir,
		snapDir + "/config.json -> ../../blobs/" + e("config.json"),
		snapDir + "/model.safetensors -> ../../blobs/" + e("model.safetensors"),
		snapDir + "/sub", snapDir + "/sub/dir",
		snapDir + "/sub/dir/extra.safetensors -> ../../../../blobs/" + e("sub/dir/extra.safetensors"),
		snapDir + "/tokenizer.json -> ../../blobs/" + e("tokenizer.json"),
	}
	sort.Strings(want)
	if got := tree(t, cache); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("cache tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ref, _ := os.ReadFile(filepath.Join(root, "refs", "main")); string(ref) != repo.Commit {
		t.Errorf("refs/main = %q, want the commit without a newline", ref)
	}
	for name, b := range repo.Files {
		if name == "README.md" {
			continue
		}
		if got, err := os.ReadFile(filepath.Join(snap.Dir, name)); err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s content differs (%v)", name, err)
		}
	}
	if s.CDNAuthLeaks.Load() != 0 {
		t.Errorf("the token was sent to the CDN %d times", s.CDNAuthLeaks.Load())
	}
	if s.Gets("model.safetensors") < 2 {
		t.Errorf("model.safetensors came in %d requests, want parallel parts", s.Gets("model.safetensors"))
	}

	before := s.Requests.Load()
	again, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Requests.Load() - before; n != 1 || again.Dir != snap.Dir {
		t.Errorf("cached snapshot made %d requests, want 1 (the revision API)", n)
	}
	for _, rev := range []string{"main", repo.Commit} {
		off, err := CachedSnapshot(cache, "org/model", rev, nil)
		if err != nil || off.Dir != snap.Dir || len(off.Files) != 4 {
			t.Fatalf("offline snapshot at %s: %+v, %v", rev, off, err)
		}
		for _, f := range off.Files {
			if f.etag() != e(f.Path) {
				t.Errorf("offline %s: etag %q, want %q", f.Path, f.etag(), e(f.Path))
			}
		}
	}
}

// TestCacheErrorsOffline checks that offline errors say what is missing.
func TestCacheErrorsOffline(t *testing.T) {
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": testRepo()})
	c, cache := newClient(t, s, nil)
	if _, err := c.Snapshot(context.Background(), "org/model", "main", []string{"config.json"}); err != nil {
		t.Fatal(err)
	}
	off, _ := newClient(t, s, func(o *Options) { o.CacheDir, o.Offline = cache, true })
	tests := []struct {
		repo, rev string
		include   []string
		text      string
	}{
		{"org/other", "main", nil, "org/other is not in the cache"},
		{"org/model", "v2", nil, `no cached revision "v2"`},
		{"org/model", "main", nil, "without *.safetensors"},
		{"org/model", "main", []string{"config.json", "tokenizer.json"}, "without tokenizer.json"},
		{"org/model", "main", []string{"*.model"}, "no cached file matching"},
	}
	for _, tc := range tests {
		_, err := off.Snapshot(context.Background(), tc.repo, tc.rev, tc.include)
		if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s@%s %v: err = %v, want ErrOffline saying %q", tc.repo, tc.rev, tc.include, err, tc.text)
		}
	}
	if _, err := off.Snapshot(context.Background(), "org/model", "main", []string{"config.json"}); err != nil {
		t.Errorf("cached file offline: %v", err)
	}
	if s.Requests.Load() != 2 {
		t.Errorf("offline made requests: %d in all, want the 2 of the first download", s.Requests.Load())
	}
}

// pythonCache lays repo out in cache the way huggingface_hub does.
func pythonCache(t *testing.T, s *hubtest.Server, cache, id string, repo *hubtest.Repo) {
	t.Helper()
	root := filepath.Join(cache, "models--"+strings.ReplaceAll(id, "/", "--"))
	for _, d := range []string{"blobs", "refs", "snapshots/" + repo.Commit} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range repo.Files {
		etag := etagOf(s, name, b)
		if err := os.WriteFile(filepath.Join(root, "blobs", etag), b, 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(root, "snapshots", repo.Commit, name)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(strings.Repeat("../", strings.Count(name, "/")+2)+"blobs/"+etag, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "refs", "main"), []byte(repo.Commit), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadsPythonCache reads a cache laid out by huggingface_hub: online
// without a byte of any file fetched, and offline without a request.
func TestReadsPythonCache(t *testing.T) {
	repo := testRepo()
	repo.Commit = strings.Repeat("ab", 20)
	s := hubtest.Start(t, map[string]*hubtest.Repo{"TinyLlama/TinyLlama-1.1B-Chat-v1.0": repo})
	cache := t.TempDir()
	pythonCache(t, s, cache, "TinyLlama/TinyLlama-1.1B-Chat-v1.0", repo)
	for _, offline := range []bool{false, true} {
		c, _ := newClient(t, s, func(o *Options) { o.CacheDir, o.Offline = cache, offline })
		before := s.Requests.Load()
		snap, err := c.Snapshot(context.Background(), "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "main", nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(snap.Dir, "model.safetensors")); !bytes.Equal(b, repo.Files["model.safetensors"]) || snap.Commit != repo.Commit {
			t.Errorf("offline=%v: snapshot %+v", offline, snap)
		}
		wantReq := int64(1)
		if offline {
			wantReq = 0
		}
		if n := s.Requests.Load() - before; n != wantReq || s.BytesServed.Load() != 0 {
			t.Errorf("offline=%v: %d requests and %d file bytes, want %d and 0", offline, n, s.BytesServed.Load(), wantReq)
		}
	}
}

func TestErrors(t *testing.T) {
	gated := testRepo()
	gated.Gated, gated.Allowed = true, []string{"good"}
	s := hubtest.Start(t, map[string]*hubtest.Repo{
		"org/model":  testRepo(),
		"meta/gated": gated,
		"org/bin":    {Files: map[string][]byte{"config.json": []byte("{}"), "pytorch_model.bin": []byte("x")}},
	})
	tests := []struct {
		name, repo, rev, token string
		include                []string
		want                   error
		text                   string
	}{
		{"gated no token", "meta/gated", "main", "", nil, ErrGated, "huggingface-cli login"},
		{"gated no access", "meta/gated", "main", "bad", nil, ErrGated, "accept its license at https://huggingface.co/meta/gated"},
		{"missing repo", "org/nothing", "main", "", nil, ErrRepoNotFound, "org/nothing not found: it does not exist"},
		{"missing revision", "org/model", "v9", "", nil, ErrRevisionNotFound, `no revision "v9"`},
		{"missing file", "org/model", "main", "", []string{"config.json", "tokenizer.model"}, ErrEntryNotFound, "no file tokenizer.model"},
		{"no match", "org/model", "main", "", []string{"nothing*"}, nil, "no file of org/model@main matches"},
		{"bin only", "org/bin", "main", "", nil, nil, "only PyTorch .bin weights"},
		{"bad repo id", "../etc", "main", "", nil, nil, "not a repo id"},
		{"bad revision", "org/model", "../../x", "", nil, nil, "not a plain relative path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newClient(t, s, func(o *Options) { o.Token = tc.token })
			_, err := c.Snapshot(context.Background(), tc.repo, tc.rev, tc.include)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
	c, _ := newClient(t, s, func(o *Options) { o.Token = "good" })
	if _, err := c.Snapshot(context.Background(), "meta/gated", "main", nil); err != nil {
		t.Errorf("gated with access: %v", err)
	}
	// A file the resolve URL does not have (404 EntryNotFound).
	if _, err := c.head(context.Background(), "org/model", "main", FileInfo{Path: "nope.json"}); !errors.Is(err, ErrEntryNotFound) || !strings.Contains(err.Error(), "nope.json") {
		t.Errorf("missing entry: %v", err)
	}
}

// TestHeadMetadata downloads a repo whose file list has no blob ids, so
// etags come from X-Linked-Etag / ETag as huggingface_hub reads them.
func TestHeadMetadata(t *testing.T) {
	repo := testRepo()
	repo.NoBlobIDs = true
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
	c, cache := newClient(t, s, nil)
	snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range snap.Files {
		target, err := os.Readlink(filepath.Join(snap.Dir, f.Path))
		if err != nil || filepath.Base(target) != etagOf(s, f.Path, repo.Files[f.Path]) {
			t.Errorf("%s -> %s (%v)", f.Path, target, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--model", "blobs", hubtest.GitBlobID(repo.Files["config.json"]))); err != nil {
		t.Error(err)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults hubtest.Faults
		want   string // "" = success
	}{
		{"dropped connection resumes", hubtest.Faults{DropAfter: 100_000, DropTimes: 2}, ""},
		{"dropped connections forever", hubtest.Faults{DropAfter: 0, DropTimes: 1000}, "giving up"},
		{"500 then success", hubtest.Faults{Fail500: 2}, ""},
		{"500 forever", hubtest.Faults{Fail500: 1000}, "500 Internal Server Error"},
		{"server ignores Range", hubtest.Faults{IgnoreRange: true, DropAfter: 200_000, DropTimes: 1}, ""},
		{"flipped byte", hubtest.Faults{Flip: true, FlipByte: 12345}, "checksum mismatch"},
	}
	for _, tc := range tests {
		for _, mode := range []struct {
			parts int64
			noMap bool
		}{{64 << 10, false}, {1 << 30, false}, {64 << 10, true}} { // parallel parts (mapped, and written with WriteAt), and one stream
			parts := mode.parts
			t.Run(tc.name, func(t *testing.T) {
				repo := testRepo()
				s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
				f := tc.faults
				s.SetFaults("model.safetensors", &f)
				c, cache := newClient(t, s, func(o *Options) { o.PartSize, o.Retries = parts, 3 })
				c.noMap = mode.noMap
				snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
				if tc.want != "" {
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						t.Fatalf("err = %v, want %q", err, tc.want)
					}
					if tc.want == "checksum mismatch" && !errors.Is(err, ErrChecksum) {
						t.Errorf("not ErrChecksum: %v", err)
					}
					blobs, _ := os.ReadDir(filepath.Join(cache, "models--org--model", "blobs"))
					for _, b := range blobs {
						if strings.HasPrefix(b.Name(), etagOf(s, "model.safetensors", repo.Files["model.safetensors"])) {
							if tc.want == "checksum mismatch" || !strings.HasSuffix(b.Name(), ".incomplete") {
								t.Errorf("left in the cache: %s", b.Name())
							}
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

func TestStall(t *testing.T) {
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": testRepo()})
	s.SetFaults("model.safetensors", &hubtest.Faults{Stall: true})
	t.Run("cancel", func(t *testing.T) {
		c, _ := newClient(t, s, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := c.Snapshot(ctx, "org/model", "main", nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("cancellation took %v", d)
		}
	})
	t.Run("stall timeout", func(t *testing.T) {
		c, _ := newClient(t, s, func(o *Options) { o.StallTimeout, o.Retries = 100*time.Millisecond, 2 })
		start := time.Now()
		_, err := c.Snapshot(context.Background(), "org/model", "main", nil)
		if err == nil || !strings.Contains(err.Error(), "stalled") {
			t.Fatalf("err = %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("stall detection took %v", d)
		}
	})
}

// TestResume continues partial downloads: a huggingface_hub-style prefix
// (stream and parts), and a parts record left by a killed process.
func TestResume(t *testing.T) {
	repo := testRepo()
	data := repo.Files["model.safetensors"]
	const ps = 64 << 10
	tests := []struct {
		name     string
		partSize int64
		prefix   int // bytes in .incomplete
		record   *partRecord
		wantMax  int64 // most file bytes the server may send
	}{
		{"stream prefix", 1 << 30, 150_000, nil, int64(len(data) - 150_000)},
		{"parts prefix", ps, 150_000, nil, int64(len(data)) - 2*ps},
		{"parts record", ps, len(data), &partRecord{PartSize: ps, Done: []int{1, 3}}, int64(len(data)) - 2*ps},
		{"record of another part size", ps, len(data), &partRecord{PartSize: 1 << 20, Done: []int{0}}, int64(len(data))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
			c, cache := newClient(t, s, func(o *Options) { o.PartSize = tc.partSize })
			blobs := filepath.Join(cache, "models--org--model", "blobs")
			os.MkdirAll(blobs, 0o755)
			part := filepath.Join(blobs, etagOf(s, "model.safetensors", data)+".incomplete")
			content := bytes.Clone(data[:tc.prefix])
			if tc.record != nil {
				for i := range content { // only the recorded parts hold data
					if !contains(tc.record.Done, i/int(tc.record.PartSize)) {
						content[i] = 0
					}
				}
				b, _ := json.Marshal(tc.record)
				os.WriteFile(part+".parts", b, 0o644)
			}
			os.WriteFile(part, content, 0o644)
			snap, err := c.Snapshot(context.Background(), "org/model", "main", []string{"model.safetensors"})
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(snap.Dir, "model.safetensors")); !bytes.Equal(got, data) {
				t.Fatal("resumed content differs")
			}
			if n := s.BytesServed.Load(); n > tc.wantMax {
				t.Errorf("server sent %d bytes, want at most %d", n, tc.wantMax)
			}
			if _, err := os.Stat(part + ".parts"); err == nil {
				t.Error("part record left behind")
			}
		})
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestCancelLeavesPrefix cancels a parallel download midway: what stays
// in .incomplete must be the finished prefix of the file (as huggingface_hub
// expects), and the next run must fetch only the rest.
func TestCancelLeavesPrefix(t *testing.T) {
	repo := testRepo()
	data := repo.Files["model.safetensors"]
	const ps = 64 << 10
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
	s.SetFaults("model.safetensors", &hubtest.Faults{StallFrom: 3 * ps})
	c, cache := newClient(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.Snapshot(ctx, "org/model", "main", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	part := filepath.Join(cache, "models--org--model", "blobs", etagOf(s, "model.safetensors", data)+".incomplete")
	got, err := os.ReadFile(part)
	if err != nil || len(got) != 3*ps || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf(".incomplete is not the 3-part prefix of the file (%d bytes, %v)", len(got), err)
	}
	if _, err := os.Stat(part + ".parts"); err == nil {
		t.Error("part record left after a clean stop")
	}
	s.SetFaults("model.safetensors", nil)
	before := s.BytesServed.Load()
	snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(snap.Dir, "model.safetensors")); !bytes.Equal(b, data) {
		t.Fatal("content differs")
	}
	if n := s.BytesServed.Load() - before; n != int64(len(data)-3*ps) {
		t.Errorf("resume fetched %d bytes of model.safetensors, want %d", n, len(data)-3*ps)
	}
}

// TestConcurrentClients runs several clients on one cache at once, as
// several lowbit processes would: each blob is fetched once, under its lock.
func TestConcurrentClients(t *testing.T) {
	repo := testRepo()
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
	cache := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(Options{Endpoint: s.Hub.URL, CacheDir: cache, Workers: 4, PartSize: 64 << 10})
			if err == nil {
				_, err = c.Snapshot(context.Background(), "org/model", "main", nil)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var need int64
	for name, b := range repo.Files {
		if matches(name, nil) {
			need += int64(len(b))
		}
	}
	if n := s.BytesServed.Load(); n != need {
		t.Errorf("server sent %d bytes for %d bytes of files", n, need)
	}
	c, _ := New(Options{Endpoint: s.Hub.URL, CacheDir: cache})
	snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range snap.Files {
		if b, _ := os.ReadFile(filepath.Join(snap.Dir, f.Path)); !bytes.Equal(b, repo.Files[f.Path]) {
			t.Errorf("%s differs", f.Path)
		}
	}
}

// countingTransport counts the requests it sends.
type countingTransport struct {
	n atomic.Int64
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestUnreachable cannot reach the Hub (a closed server: connection
// refused; a name that does not exist): with the snapshot cached it is
// used after at most one quick retry, with a one-line notice; without it
// the error says what to do.
func TestUnreachable(t *testing.T) {
	s := hubtest.New()
	s.AddRepo("org/model", testRepo())
	c, cache := newClient(t, s, nil)
	first, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	commit := first.Commit
	closed := s.Hub.URL
	s.Close()
	tests := []struct {
		name, endpoint, host, reason string
		maxTries                     int64 // one quick retry; none for a name that does not exist
	}{
		{"connection refused", closed, strings.TrimPrefix(closed, "http://"), "connect: connection refused", 2},
		{"no such host", "http://nonexistent.invalid", "nonexistent.invalid", "lookup nonexistent.invalid: no such host", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var notices bytes.Buffer
			tr := &countingTransport{}
			c, err := New(Options{Endpoint: tc.endpoint, CacheDir: cache, Notices: &notices, HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
			if err != nil || snap.Commit != commit {
				t.Fatalf("cached snapshot: %+v, %v", snap, err)
			}
			want := fmt.Sprintf("hub: %s unreachable (%s", tc.host, tc.reason)
			if tc.name == "no such host" && !strings.Contains(notices.String(), "no such host") {
				t.Skipf("this machine's DNS does not answer (%q)", notices.String())
			}
			t.Log(strings.TrimSpace(notices.String()))
			if got := notices.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "); using the cached snapshot "+commit+" of org/model\n") || strings.Count(got, "\n") != 1 {
				t.Errorf("notice %q, want one line %q...", got, want)
			}
			if n := tr.n.Load(); n > tc.maxTries {
				t.Errorf("%d requests, want at most %d", n, tc.maxTries)
			}

			empty := t.TempDir()
			c, _ = New(Options{Endpoint: tc.endpoint, CacheDir: empty, HTTPClient: &http.Client{Transport: tr}})
			before := tr.n.Load()
			_, err = c.Snapshot(context.Background(), "org/model", "main", nil)
			if !errors.Is(err, ErrUnreachable) {
				t.Fatalf("err = %v, want ErrUnreachable", err)
			}
			t.Log(err)
			for _, w := range []string{"cannot reach " + tc.endpoint, tc.reason, empty, "org/model@main", "HF_ENDPOINT", "--offline (HF_HUB_OFFLINE=1)"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to say %q", err, w)
				}
			}
			if n := tr.n.Load() - before; n > tc.maxTries {
				t.Errorf("%d requests, want at most %d", n, tc.maxTries)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": testRepo()})
	var out bytes.Buffer
	c, _ := newClient(t, s, func(o *Options) { o.Progress = &out })
	if _, err := c.Snapshot(context.Background(), "org/model", "main", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"done model.safetensors (293.0 KiB)", "done config.json", "org/model: 4 files", "100%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFnmatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*.safetensors", "model.safetensors", true},
		{"*.safetensors", "sub/dir/x.safetensors", true},
		{"*.safetensors", "model.safetensors.index.json", false},
		{"model-0000?-of-00002.safetensors", "model-00001-of-00002.safetensors", true},
		{"config.json", "config.json", true},
		{"config.json", "xconfig.json", false},
		{"model-[0-9]*", "model-3.bin", true},
		{"model-[!0-9]*", "model-3.bin", false},
		{"[ab]", "c", false},
		{"a[b", "a[b", true},
		{"*", "", true},
		{"", "x", false},
		{"**a", "bba", true},
	}
	for _, tc := range tests {
		if got := fnmatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("fnmatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	if !matches("onnx/model.onnx", []string{"onnx/"}) {
		t.Error("a folder pattern does not match its files")
	}
}

func TestParseRevision(t *testing.T) {
	sha := strings.Repeat("a", 40)
	oid := strings.Repeat("b", 64)
	tests := []struct {
		name, body, err string
		files           int
	}{
		{"ok", `{"sha":"` + sha + `","siblings":[{"rfilename":"a.json","size":3,"blobId":"` + sha + `"},{"rfilename":"m.safetensors","size":134,"lfs":{"sha256":"` + oid + `","size":99}}]}`, "", 2},
		{"no sha", `{"siblings":[]}`, "no commit sha", 0},
		{"bad json", `{"sha":`, "revision API", 0},
		{"escape", `{"sha":"` + sha + `","siblings":[{"rfilename":"../x"}]}`, "not a plain relative path", 0},
		{"absolute", `{"sha":"` + sha + `","siblings":[{"rfilename":"/etc/x"}]}`, "not a relative path", 0},
		{"bad oid", `{"sha":"` + sha + `","siblings":[{"rfilename":"m","lfs":{"sha256":"zz"}}]}`, "invalid LFS sha256", 0},
		{"twice", `{"sha":"` + sha + `","siblings":[{"rfilename":"m"},{"rfilename":"m"}]}`, "twice", 0},
		{"negative size", `{"sha":"` + sha + `","siblings":[{"rfilename":"m","size":-1}]}`, "size -1", 0},
	}
	for _, tc := range tests {
		info, err := parseRevision("org/m", "main", []byte(tc.body))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || len(info.Files) != tc.files {
			t.Fatalf("%s: %+v, %v", tc.name, info, err)
		}
		if f := info.Files[1]; f.SHA256 != oid || f.Size != 99 {
			t.Errorf("LFS file %+v: want the LFS sha256 and size", f)
		}
	}
}

func TestOptionsFromEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", "http://example.test")
	t.Setenv("HF_HUB_OFFLINE", "1")
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_abc\n"), 0o600)
	o := OptionsFromEnv()
	if o.Token != "hf_abc" || o.CacheDir != filepath.Join(home, "hub") || !o.Offline || o.Endpoint != "http://example.test" {
		t.Errorf("%+v", o)
	}
	other := filepath.Join(home, "other-token")
	os.WriteFile(other, []byte("hf_path"), 0o600)
	t.Setenv("HF_TOKEN_PATH", other)
	if o := OptionsFromEnv(); o.Token != "hf_path" {
		t.Errorf("HF_TOKEN_PATH: token %q", o.Token)
	}
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "hf_old")
	if o := OptionsFromEnv(); o.Token != "hf_old" {
		t.Errorf("HUGGING_FACE_HUB_TOKEN: token %q", o.Token)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	t.Setenv("HF_HUB_CACHE", "/elsewhere")
	t.Setenv("HF_HUB_OFFLINE", "0")
	o = OptionsFromEnv()
	if o.Token != "hf_env" || o.CacheDir != "/elsewhere" || o.Offline {
		t.Errorf("HF_TOKEN / HF_HUB_CACHE / HF_HUB_OFFLINE=0 not honoured: %+v", o)
	}
	t.Setenv("HF_HOME", "")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if o := OptionsFromEnv(); o.CacheDir != "/xdg/huggingface/hub" {
		t.Errorf("XDG_CACHE_HOME: cache %s", o.CacheDir)
	}
	if _, err := New(Options{Endpoint: "ftp://x", CacheDir: "/tmp"}); err == nil {
		t.Error("ftp endpoint accepted")
	}
}

// BenchmarkDownload fetches one LFS file from the in-process Hub (through
// the CDN redirect) in parallel ranged parts with sha256 on: 1 GiB, or
// 512 MiB with -short. "disk" writes the cache to the temp dir, "tmpfs"
// to /dev/shm (skipped where there is none). "4files" is the same bytes
// as four shards (model-0000N-of-00004.safetensors), whose hashes run at
// once.
func BenchmarkDownload(b *testing.B) {
	size := 1 << 30
	if testing.Short() {
		size = 512 << 20
	}
	s := hubtest.New()
	defer s.Close()
	s.AddRepo("org/big", &hubtest.Repo{Files: map[string][]byte{"config.json": []byte("{}"), "model.safetensors": randomBytes(size, 3)}})
	shards := map[string][]byte{"config.json": []byte("{}")}
	for i := range 4 {
		shards[fmt.Sprintf("model-%05d-of-00004.safetensors", i+1)] = randomBytes(size/4, uint64(10+i))
	}
	s.AddRepo("org/shards", &hubtest.Repo{Files: shards})
	for _, where := range []string{"disk", "tmpfs", "tmpfs-4files"} {
		b.Run(where, func(b *testing.B) {
			repo := "org/big"
			if where == "tmpfs-4files" {
				repo = "org/shards"
			}
			parent := ""
			if where != "disk" {
				if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
					b.Skip("no /dev/shm")
				}
				parent = "/dev/shm"
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				b.StopTimer()
				dir, err := os.MkdirTemp(parent, "hubbench")
				if err != nil {
					b.Fatal(err)
				}
				c, err := New(Options{Endpoint: s.Hub.URL, CacheDir: dir, Workers: 8})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := c.Snapshot(context.Background(), repo, "main", nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(dir)
				b.StartTimer()
			}
		})
	}
}

// TestLockWaitCancels holds a blob's lock, as another process downloading
// it would: Snapshot waits, and a cancelled context ends the wait.
func TestLockWaitCancels(t *testing.T) {
	repo := testRepo()
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
	c, cache := newClient(t, s, nil)
	unlock, err := pathsFor(cache, "org/model").lock(context.Background(), etagOf(s, "model.safetensors", repo.Files["model.safetensors"]))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Snapshot(ctx, "org/model", "main", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline while waiting for the lock", err)
	}
	if n := s.Gets("model.safetensors"); n != 0 {
		t.Errorf("fetched a locked blob %d times", n)
	}
	unlock()
	if _, err := c.Snapshot(context.Background(), "org/model", "main", nil); err != nil {
		t.Fatal(err)
	}
}

// TestLargeFile downloads a file large enough that the test CDN sends it
// from disk (sendfile, ranged), in mapped parallel parts, with dropped
// connections on the way: the cache holds exactly the file.
func TestLargeFile(t *testing.T) {
	data := randomBytes(3<<20+123, 21)
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/large": {Files: map[string][]byte{"config.json": []byte("{}"), "model.safetensors": data}}})
	for _, drop := range []bool{false, true} {
		if drop {
			s.SetFaults("model.safetensors", &hubtest.Faults{DropAfter: 300_000, DropTimes: 3})
		}
		c, _ := newClient(t, s, func(o *Options) { o.PartSize = 256 << 10 })
		snap, err := c.Snapshot(context.Background(), "org/large", "main", nil)
		if err != nil {
			t.Fatalf("drop %v: %v", drop, err)
		}
		got, err := os.ReadFile(filepath.Join(snap.Dir, "model.safetensors"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("drop %v: cached file differs (%d bytes, %v)", drop, len(got), err)
		}
	}
	if n := s.BytesServed.Load(); n < 2*int64(len(data)) {
		t.Errorf("served %d bytes for two downloads of %d", n, len(data))
	}
}
