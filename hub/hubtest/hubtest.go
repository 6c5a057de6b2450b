// Package hubtest is an in-process HuggingFace Hub for tests: the revision
// API, resolve URLs that redirect LFS files to a second server standing for
// the CDN, the X-Repo-Commit / X-Linked-Etag / X-Linked-Size / ETag headers,
// Range requests, gated and missing repos with their X-Error-Code, and faults
// on demand (a dropped connection, a 500, a flipped byte, a stall).
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Repo is a repository the server serves.
type Repo struct {
	Files map[string][]byte
	// Commit is the sha the "main" revision resolves to (a fixed one by default).
	Commit string
	// Gated repos answer 401 without a token and 403 with a token not in Allowed.
	Gated   bool
	Allowed []string
}

// Faults are injected into downloads of one file path.
type Faults struct {
	// DropAfter closes the connection after this many body bytes, DropTimes times.
	DropAfter int64
	DropTimes int
	// Fail500 answers 500 this many times before succeeding.
	Fail500 int
	// FlipByte corrupts the byte at this offset (-1: none) on every download.
	FlipByte int64
	// Stall blocks the response until the request is cancelled.
	Stall bool
}

// Server is the fake Hub plus its CDN.
type Server struct {
	Hub, CDN *httptest.Server
	// LFSThreshold: files at least this large are LFS (redirected to the CDN).
	LFSThreshold int

	mu     sync.Mutex
	repos  map[string]*Repo
	faults map[string]*Faults
	blobs  map[string][]byte // sha256 -> content, for the CDN
	oids   map[*byte]string  // first byte's address -> sha256 (hashes computed once)
	gitIDs map[*byte]string

	// Requests counts requests to the hub and the CDN.
	Requests atomic.Int64
	// CDNAuthLeaks counts CDN requests that carried an Authorization header.
	CDNAuthLeaks atomic.Int64
}

// New starts the servers; Close stops them.
func New() *Server {
	s := &Server{repos: map[string]*Repo{}, faults: map[string]*Faults{}, blobs: map[string][]byte{}, LFSThreshold: 1024,
		oids: map[*byte]string{}, gitIDs: map[*byte]string{}}
	s.CDN = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	s.Hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	return s
}

// Close stops both servers.
func (s *Server) Close() {
	s.Hub.Close()
	s.CDN.Close()
}

// AddRepo registers a repository.
func (s *Server) AddRepo(id string, r *Repo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Commit == "" {
		sum := sha1.Sum([]byte(id))
		r.Commit = hex.EncodeToString(sum[:])
	}
	for name, b := range r.Files {
		if len(b) == 0 {
			b = []byte{}
			r.Files[name] = append(make([]byte, 0, 1), b...)
			b = r.Files[name]
		}
		sum := sha256.Sum256(b)
		oid := hex.EncodeToString(sum[:])
		s.blobs[oid] = b
		s.oids[key(b)] = oid
		s.gitIDs[key(b)] = GitBlobID(b)
	}
	s.repos[id] = r
}

// SetFaults injects faults into downloads of path (in any repo).
func (s *Server) SetFaults(path string, f *Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[path] = f
}

// GitBlobID is git's object id of content, the etag of non-LFS files.
func GitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Server) isLFS(b []byte) bool { return len(b) >= s.LFSThreshold }

// key identifies a file's content by its backing array.
func key(b []byte) *byte { return &b[:1][0] }

// hashes returns a file's sha256 and git blob id, computed once in AddRepo.
func (s *Server) hashes(b []byte) (oid, gitID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oids[key(b)], s.gitIDs[key(b)]
}

// auth answers gated repos; it returns false when it wrote an error.
func (s *Server) auth(w http.ResponseWriter, r *http.Request, repo *Repo) bool {
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

func (s *Server) repo(id string) *Repo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repos[id]
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	path := strings.TrimPrefix(r.URL.Path, "/")
	if rest, ok := strings.CutPrefix(path, "api/models/"); ok {
		i := strings.Index(rest, "/revision/")
		if i < 0 {
			http.NotFound(w, r)
			return
		}
		s.serveRevision(w, r, rest[:i], rest[i+len("/revision/"):])
		return
	}
	parts := strings.SplitN(path, "/", 5) // org, name, "resolve", rev, file
	if len(parts) < 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	id, rev, file := parts[0]+"/"+parts[1], parts[3], parts[4]
	repo := s.lookup(w, r, id, rev)
	if repo == nil {
		return
	}
	b, ok := repo.Files[file]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", repo.Commit)
	oid, gitID := s.hashes(b)
	if s.isLFS(b) {
		w.Header().Set("X-Linked-Etag", `"`+oid+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(b)))
		w.Header().Set("ETag", `"`+GitBlobID([]byte("pointer "+oid))+`"`)
		http.Redirect(w, r, s.CDN.URL+"/blobs/"+oid+"?file="+file, http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitID+`"`)
	s.serveContent(w, r, file, b)
}

// lookup finds repo id at rev as the Hub would, answering a missing repo
// (401 RepoNotFound, as the Hub does for anonymous callers), a gated one, or
// a missing revision itself and returning nil then.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, id, rev string) *Repo {
	repo := s.repo(id)
	if repo == nil {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		w.WriteHeader(http.StatusUnauthorized)
		return nil
	}
	if !s.auth(w, r, repo) {
		return nil
	}
	if rev != "main" && rev != repo.Commit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		w.WriteHeader(http.StatusNotFound)
		return nil
	}
	return repo
}

func (s *Server) serveRevision(w http.ResponseWriter, r *http.Request, id, rev string) {
	repo := s.lookup(w, r, id, rev)
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
		BlobID    string `json:"blobId"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	var sib []sibling
	for name, b := range repo.Files {
		oid, gitID := s.hashes(b)
		e := sibling{RFilename: name, Size: len(b), BlobID: gitID}
		if s.isLFS(b) {
			e.LFS = &lfs{SHA256: oid, Size: len(b), PointerSize: 134}
			e.BlobID = GitBlobID([]byte("pointer"))
		}
		sib = append(sib, e)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": id, "modelId": id, "sha": repo.Commit, "private": false, "gated": repo.Gated, "siblings": sib})
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	if r.Header.Get("Authorization") != "" {
		s.CDNAuthLeaks.Add(1)
	}
	oid := strings.TrimPrefix(r.URL.Path, "/blobs/")
	s.mu.Lock()
	b, ok := s.blobs[oid]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.serveContent(w, r, r.URL.Query().Get("file"), b)
}

// serveContent serves b with Range support and the faults set for file.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, file string, b []byte) {
	s.mu.Lock()
	f := s.faults[file]
	var drop int64 = -1
	var stall bool
	flip := int64(-1)
	if f != nil {
		if f.Fail500 > 0 {
			f.Fail500--
			s.mu.Unlock()
			http.Error(w, "injected failure", http.StatusInternalServerError)
			return
		}
		if f.DropTimes > 0 {
			f.DropTimes--
			drop = f.DropAfter
		}
		stall, flip = f.Stall, f.FlipByte
	}
	s.mu.Unlock()
	if stall {
		<-r.Context().Done()
		return
	}
	if flip >= 0 && flip < int64(len(b)) {
		b = bytes.Clone(b)
		b[flip] ^= 0xff
	}
	if drop >= 0 {
		w = &dropWriter{ResponseWriter: w, left: drop}
	}
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(b))
	if dw, ok := w.(*dropWriter); ok && dw.dropped {
		panic(http.ErrAbortHandler) // close the connection mid-body
	}
}

// dropWriter stops writing after left bytes.
type dropWriter struct {
	http.ResponseWriter
	left    int64
	dropped bool
}

func (d *dropWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > d.left {
		n, _ := d.ResponseWriter.Write(p[:d.left])
		d.left = 0
		d.dropped = true
		if fl, ok := d.ResponseWriter.(http.Flusher); ok {
			fl.Flush()
		}
		return n, fmt.Errorf("connection dropped")
	}
	d.left -= int64(len(p))
	return d.ResponseWriter.Write(p)
}
