// Package hubtest is an in-process HuggingFace Hub for tests (of hub,
// convert and the CLI), speaking the protocol as huggingface_hub expects
// it: the revision API, resolve URLs that redirect LFS files to a second
// server standing for the CDN, the X-Repo-Commit / X-Linked-Etag /
// X-Linked-Size / ETag headers, HEAD and Range requests, gated and missing
// repos with their X-Error-Code, and faults on demand (a dropped
// connection, 500s, a flipped byte, a stall, a trickle). It counts requests.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Repo is a repository the server serves.
type Repo struct {
	// Files maps repo paths to contents.
	Files map[string][]byte
	// Commit is the sha "main" resolves to (default: sha1 of the repo id).
	Commit string
	// Gated repos answer 401 without a token and 403 with a token not in Allowed.
	Gated   bool
	Allowed []string
	// NoBlobIDs leaves blobId out of the revision API's file list, so a
	// client must ask the resolve URL (HEAD) for etags.
	NoBlobIDs bool
}

// Faults are injected into downloads of one file path.
type Faults struct {
	// DropAfter closes the connection after this many body bytes, DropTimes times.
	DropAfter int64
	DropTimes int
	// Fail500 answers 500 this many times before succeeding.
	Fail500 int
	// FlipByte corrupts the byte at this offset on every download (0 with
	// Flip false: none).
	FlipByte int64
	Flip     bool
	// Stall blocks the response until the request is cancelled.
	Stall bool
	// StallFrom, when > 0, stalls only requests whose range starts at or
	// after this offset.
	StallFrom int64
	// IgnoreRange answers every GET with the whole file (200).
	IgnoreRange bool
	// StallAfter, when > 0, sends this many body bytes of each answer and
	// then stalls until the request is cancelled.
	StallAfter int64
	// Rate, when > 0, sends each answer's body at this many bytes a second.
	Rate int64
}

// file is a served file with the hashes the Hub reports for it.
type file struct {
	data          []byte
	sha256, gitID string
	lfs           bool
	// disk, when not "", holds a copy of data that the CDN serves with
	// sendfile, as a real CDN serves from its page cache.
	disk string
}

// diskThreshold: LFS files at least this large are served from a file.
const diskThreshold = 1 << 20

// Server is the fake Hub plus its CDN.
type Server struct {
	Hub, CDN *httptest.Server
	// LFSThreshold: files at least this large are LFS (as are weights and
	// other binary files by extension). Set it before AddRepo.
	LFSThreshold int

	mu     sync.Mutex
	dir    string // temp dir for the disk copies of large files
	repos  map[string]*Repo
	files  map[string]map[string]*file // repo id -> path -> file
	blobs  map[string]*file            // sha256 -> file, for the CDN
	faults map[string]*Faults
	gets   map[string]int // content GETs per file path

	// Requests counts requests to the hub and the CDN.
	Requests atomic.Int64
	// BytesServed counts file content bytes sent.
	BytesServed atomic.Int64
	// CDNAuthLeaks counts CDN requests that carried an Authorization header.
	CDNAuthLeaks atomic.Int64
}

// New starts the servers; Close stops them.
func New() *Server {
	s := &Server{repos: map[string]*Repo{}, files: map[string]map[string]*file{}, blobs: map[string]*file{},
		faults: map[string]*Faults{}, gets: map[string]int{}, LFSThreshold: 1024}
	s.CDN = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	s.Hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	return s
}

// Start is New plus the repos, closed when the test ends.
func Start(tb testing.TB, repos map[string]*Repo) *Server {
	tb.Helper()
	s := New()
	tb.Cleanup(s.Close)
	for id, r := range repos {
		s.AddRepo(id, r)
	}
	return s
}

// Close stops both servers and removes the disk copies of large files.
func (s *Server) Close() {
	s.Hub.Close()
	s.CDN.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// writeDisk copies f's data into the server's temp dir (s.mu held) and
// returns its path, or "" when that fails.
func (s *Server) writeDisk(f *file) string {
	if s.dir == "" {
		d, err := os.MkdirTemp("", "hubtest-")
		if err != nil {
			return ""
		}
		s.dir = d
	}
	p := filepath.Join(s.dir, f.sha256)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if err := os.WriteFile(p, f.data, 0o644); err != nil {
		os.Remove(p)
		return ""
	}
	return p
}

// binaryExt are kept in LFS by the Hub's default .gitattributes.
var binaryExt = map[string]bool{".safetensors": true, ".bin": true, ".model": true, ".pt": true,
	".pth": true, ".gguf": true, ".npz": true, ".onnx": true, ".msgpack": true, ".h5": true}

// IsLFS reports whether the server keeps a file in LFS (and redirects it to the CDN).
func (s *Server) IsLFS(name string, b []byte) bool {
	return len(b) >= s.LFSThreshold || binaryExt[path.Ext(name)]
}

// AddRepo registers a repository, hashing its files once.
func (s *Server) AddRepo(id string, r *Repo) {
	if r.Commit == "" {
		sum := sha1.Sum([]byte(id))
		r.Commit = hex.EncodeToString(sum[:])
	}
	files := map[string]*file{}
	for name, b := range r.Files {
		sum := sha256.Sum256(b)
		f := &file{data: b, sha256: hex.EncodeToString(sum[:]), gitID: GitBlobID(b), lfs: s.IsLFS(name, b)}
		files[name] = f
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range files {
		if f.lfs && len(f.data) >= diskThreshold {
			f.disk = s.writeDisk(f) // "" on failure: served from memory
		}
	}
	for _, f := range files {
		if f.lfs {
			s.blobs[f.sha256] = f
		}
	}
	s.repos[id] = r
	s.files[id] = files
}

// SetFaults injects faults into downloads of path (in any repo).
func (s *Server) SetFaults(path string, f *Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[path] = f
}

// Gets counts the content GETs of path (in any repo, hub and CDN).
func (s *Server) Gets(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[path]
}

// GitBlobID is git's object id of content, the etag of non-LFS files.
func GitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// lfsPointer is the pointer file git keeps for an LFS file.
func lfsPointer(f *file) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", f.sha256, len(f.data))
}

// auth answers gated repos; it returns false when it wrote an error.
func auth(w http.ResponseWriter, r *http.Request, repo *Repo) bool {
	if !repo.Gated {
		return true
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		w.Header().Set("X-Error-Code", "GatedRepo")
		w.Header().Set("X-Error-Message", "Access to this model is restricted. You must be authenticated.")
		w.WriteHeader(http.StatusUnauthorized)
		return false
	}
	for _, a := range repo.Allowed {
		if a == tok {
			return true
		}
	}
	w.Header().Set("X-Error-Code", "GatedRepo")
	w.Header().Set("X-Error-Message", "Access to this model is restricted and you are not in the authorized list.")
	w.WriteHeader(http.StatusForbidden)
	return false
}

// lookup finds repo id at rev as the Hub would, answering a missing repo
// (401 RepoNotFound, as the Hub does for anonymous callers), a gated one,
// or a missing revision itself and returning nil then.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, id, rev string) (*Repo, map[string]*file) {
	s.mu.Lock()
	repo, files := s.repos[id], s.files[id]
	s.mu.Unlock()
	if repo == nil {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		w.Header().Set("X-Error-Message", "Repository not found")
		w.WriteHeader(http.StatusUnauthorized)
		return nil, nil
	}
	if !auth(w, r, repo) {
		return nil, nil
	}
	if rev != "main" && rev != repo.Commit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		w.Header().Set("X-Error-Message", "Invalid rev id: "+rev)
		w.WriteHeader(http.StatusNotFound)
		return nil, nil
	}
	return repo, files
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	p := strings.TrimPrefix(r.URL.Path, "/")
	if rest, ok := strings.CutPrefix(p, "api/models/"); ok {
		i := strings.Index(rest, "/revision/")
		if i < 0 {
			http.NotFound(w, r)
			return
		}
		s.serveRevision(w, r, rest[:i], rest[i+len("/revision/"):])
		return
	}
	parts := strings.SplitN(p, "/", 5) // org, name, "resolve", rev, file
	if len(parts) < 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	id, rev, name := parts[0]+"/"+parts[1], parts[3], parts[4]
	repo, files := s.lookup(w, r, id, rev)
	if repo == nil {
		return
	}
	f, ok := files[name]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		w.Header().Set("X-Error-Message", "Entry not found")
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", repo.Commit)
	if f.lfs {
		w.Header().Set("X-Linked-Etag", `"`+f.sha256+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
		w.Header().Set("ETag", `"`+GitBlobID(lfsPointer(f))+`"`)
		http.Redirect(w, r, s.CDN.URL+"/blobs/"+f.sha256+"?file="+name+"&X-Amz-Signature=test", http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+f.gitID+`"`)
	s.serveContent(w, r, name, f)
}

func (s *Server) serveRevision(w http.ResponseWriter, r *http.Request, id, rev string) {
	repo, files := s.lookup(w, r, id, rev)
	if repo == nil {
		return
	}
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		Size      int    `json:"size"`
		BlobID    string `json:"blobId,omitempty"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	sib := []sibling{}
	for name, f := range files {
		e := sibling{RFilename: name, Size: len(f.data), BlobID: f.gitID}
		if f.lfs {
			ptr := lfsPointer(f)
			e.LFS = &lfs{SHA256: f.sha256, Size: len(f.data), PointerSize: len(ptr)}
			e.BlobID = GitBlobID(ptr)
		}
		if repo.NoBlobIDs {
			e.BlobID = ""
		}
		sib = append(sib, e)
	}
	sort.Slice(sib, func(i, j int) bool { return sib[i].RFilename < sib[j].RFilename })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"_id": "0", "id": id, "modelId": id, "sha": repo.Commit,
		"private": false, "gated": repo.Gated, "siblings": sib})
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	if r.Header.Get("Authorization") != "" {
		s.CDNAuthLeaks.Add(1)
	}
	oid := strings.TrimPrefix(r.URL.Path, "/blobs/")
	s.mu.Lock()
	f, ok := s.blobs[oid]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.serveContent(w, r, r.URL.Query().Get("file"), f)
}

// serveContent serves f with Range support and the faults set for name:
// from its disk copy (sendfile) when it has one and no byte is flipped.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, name string, f *file) {
	b := f.data
	s.mu.Lock()
	if r.Method == http.MethodGet {
		s.gets[name]++
	}
	var fl Faults
	drop := int64(-1)
	if f := s.faults[name]; f != nil && r.Method == http.MethodGet {
		fl = *f
		if f.Fail500 > 0 {
			f.Fail500--
		}
		if f.DropTimes > 0 {
			f.DropTimes--
			drop = f.DropAfter
		}
	}
	s.mu.Unlock()
	switch {
	case fl.Fail500 > 0:
		http.Error(w, "injected failure", http.StatusInternalServerError)
		return
	case fl.Stall, fl.StallFrom > 0 && rangeStart(r.Header.Get("Range")) >= fl.StallFrom:
		<-r.Context().Done()
		return
	}
	if fl.Flip && fl.FlipByte >= 0 && fl.FlipByte < int64(len(b)) {
		b = bytes.Clone(b)
		b[fl.FlipByte] ^= 0xff
	}
	if fl.IgnoreRange {
		r.Header.Del("Range")
	}
	cw := &countWriter{ResponseWriter: w, s: s, left: drop, rate: fl.Rate, done: r.Context().Done()}
	if fl.StallAfter > 0 {
		cw.left = fl.StallAfter
	}
	var content io.ReadSeeker = bytes.NewReader(b)
	if f.disk != "" && !fl.Flip {
		if df, err := os.Open(f.disk); err == nil {
			defer df.Close()
			content = df
		}
	}
	http.ServeContent(cw, r, path.Base(name), time.Time{}, content)
	if cw.dropped && fl.StallAfter > 0 {
		<-r.Context().Done()
		return
	}
	if cw.dropped {
		panic(http.ErrAbortHandler) // close the connection mid-body
	}
}

// rangeStart is the first byte a "bytes=a-b" header asks for (0 without one).
func rangeStart(h string) int64 {
	a, _, _ := strings.Cut(strings.TrimPrefix(h, "bytes="), "-")
	v, _ := strconv.ParseInt(a, 10, 64)
	return v
}

// countWriter counts body bytes and, when left >= 0, stops after left
// bytes; with rate > 0 it sends rate bytes a second.
type countWriter struct {
	http.ResponseWriter
	s       *Server
	left    int64
	dropped bool
	rate    int64
	done    <-chan struct{} // the request's end
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.left >= 0 && int64(len(p)) > c.left {
		n, _ := c.write(p[:c.left])
		c.left, c.dropped = 0, true
		if fl, ok := c.ResponseWriter.(http.Flusher); ok {
			fl.Flush()
		}
		return n, errors.New("hubtest: connection dropped")
	}
	if c.left >= 0 {
		c.left -= int64(len(p))
	}
	return c.write(p)
}

// write sends p, in rate-limited flushed pieces when rate > 0.
func (c *countWriter) write(p []byte) (int, error) {
	if c.rate <= 0 {
		n, err := c.ResponseWriter.Write(p)
		c.s.BytesServed.Add(int64(n))
		return n, err
	}
	piece := max(1, c.rate/100) // 10ms of bytes
	var sent int
	for len(p) > 0 {
		k := int(min(piece, int64(len(p))))
		n, err := c.ResponseWriter.Write(p[:k])
		c.s.BytesServed.Add(int64(n))
		sent += n
		if err != nil {
			return sent, err
		}
		if fl, ok := c.ResponseWriter.(http.Flusher); ok {
			fl.Flush()
		}
		p = p[k:]
		select {
		case <-c.done:
			return sent, errors.New("hubtest: request ended")
		case <-time.After(time.Duration(k) * time.Second / time.Duration(c.rate)):
		}
	}
	return sent, nil
}

// ReadFrom lets http.ServeContent hand an *os.File to the connection
// (sendfile) when no fault is set; with one, the bytes go through Write.
func (c *countWriter) ReadFrom(src io.Reader) (int64, error) {
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok && c.left < 0 && c.rate <= 0 {
		n, err := rf.ReadFrom(src)
		c.s.BytesServed.Add(n)
		return n, err
	}
	return io.CopyBuffer(struct{ io.Writer }{c}, src, make([]byte, 256<<10))
}
