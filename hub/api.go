package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// validRepoID accepts "name" or "org/name" with the Hub's characters.
func validRepoID(id string) error {
	parts := strings.Split(id, "/")
	if len(parts) > 2 || id == "" {
		return fmt.Errorf("hub: %q is not a repo id (want org/name)", id)
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.HasPrefix(p, "-") {
			return fmt.Errorf("hub: %q is not a repo id (want org/name)", id)
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return fmt.Errorf("hub: repo id %q has the character %q", id, r)
			}
		}
	}
	return nil
}

// errStalled cancels an attempt that brought no byte for StallTimeout.
var errStalled = errors.New("no data from the server (stalled)")

// send makes one request; the token goes only to the endpoint's host. A
// 5xx or 429 answer comes back as an error (the caller may retry).
func (c *Client) send(ctx context.Context, method, u string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("hub: %s %s: %w", method, u, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "lowbit (huggingface_hub-compatible)")
	if c.opts.Token != "" && req.URL.Host == c.host {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return nil, cause
		}
		return nil, err
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %s", method, redact(u), resp.Status)
	}
	return resp, nil
}

// redact drops the query (a CDN's signature) from a URL shown in errors.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// api GETs a small JSON answer, retrying 5xx, dropped connections and
// stalls with backoff; each attempt, body included, must finish within
// StallTimeout. Error statuses are returned with their headers.
func (c *Client) api(ctx context.Context, u string) (*http.Response, []byte, error) {
	var last error
	for attempt := 0; attempt < c.opts.Retries; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return nil, nil, err
			}
		}
		actx, cancel := context.WithTimeoutCause(ctx, c.opts.StallTimeout, errStalled)
		resp, err := c.send(actx, http.MethodGet, u, nil)
		if err == nil {
			var body []byte
			body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
			resp.Body.Close()
			if err == nil {
				cancel()
				return resp, body, nil
			}
			if cause := context.Cause(actx); actx.Err() != nil {
				err = cause
			}
		}
		cancel()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		last = err
	}
	return nil, nil, fmt.Errorf("hub: giving up after %d attempts: %w", c.opts.Retries, last)
}

// backoff is 200ms doubled per attempt, capped at 5s.
func backoff(attempt int) time.Duration {
	return min(200*time.Millisecond<<(attempt-1), 5*time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// hubError is an error with its own message that errors.Is matches to
// one of the Err* kinds.
type hubError struct {
	kind error
	msg  string
}

func (e *hubError) Error() string { return e.msg }
func (e *hubError) Unwrap() error { return e.kind }

func newError(kind error, format string, args ...any) error {
	return &hubError{kind: kind, msg: "hub: " + fmt.Sprintf(format, args...)}
}

// apiError turns an error answer into a message that says what is wrong
// and how to fix it, matching one of the Err* kinds.
func (c *Client) apiError(status int, h http.Header, repo, revision, path string) error {
	code := h.Get("X-Error-Code")
	msg := h.Get("X-Error-Message")
	statusText := strconv.Itoa(status) + " " + http.StatusText(status)
	switch {
	case code == "GatedRepo" && c.opts.Token == "":
		return newError(ErrGated, "repo %s is gated: accept its license at https://huggingface.co/%s and set HF_TOKEN or run `huggingface-cli login`", repo, repo)
	case code == "GatedRepo":
		return newError(ErrGated, "repo %s is gated and your token has no access to it: accept its license at https://huggingface.co/%s with the account of the token in HF_TOKEN (or of `huggingface-cli login`)", repo, repo)
	case code == "RepoNotFound":
		return newError(ErrRepoNotFound, "repo %s not found: it does not exist, or it is private and your token cannot see it (set HF_TOKEN or run `huggingface-cli login`)", repo)
	case code == "RevisionNotFound":
		return newError(ErrRevisionNotFound, "repo %s has no revision %q", repo, revision)
	case code == "EntryNotFound":
		return newError(ErrEntryNotFound, "repo %s has no file %s at %s", repo, path, revision)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return newError(ErrUnauthorized, "repo %s: %s: not authorized (set HF_TOKEN or run `huggingface-cli login`)%s", repo, statusText, suffix(msg))
	case status == http.StatusNotFound && path == "":
		return newError(ErrRepoNotFound, "repo %s (revision %q) not found: %s%s", repo, revision, statusText, suffix(msg))
	case status == http.StatusNotFound:
		return newError(ErrEntryNotFound, "repo %s has no file %s at %s%s", repo, path, revision, suffix(msg))
	}
	return fmt.Errorf("hub: %s %s: %s%s", repo, path, statusText, suffix(msg))
}

// isFinal reports whether err is an answer that retrying cannot change.
func isFinal(err error) bool {
	for _, e := range []error{ErrGated, ErrUnauthorized, ErrRepoNotFound, ErrRevisionNotFound, ErrEntryNotFound, ErrChecksum} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// Resolve asks the revision API for the commit and file list of a revision.
func (c *Client) Resolve(ctx context.Context, repoID, revision string) (*RepoInfo, error) {
	if err := validRepoID(repoID); err != nil {
		return nil, err
	}
	if revision == "" {
		revision = "main"
	}
	if err := checkRevision(revision); err != nil {
		return nil, err
	}
	if c.opts.Offline {
		return nil, newError(ErrOffline, "offline: cannot resolve %s@%s", repoID, revision)
	}
	u := fmt.Sprintf("%s/api/models/%s/revision/%s?blobs=true", c.opts.Endpoint, repoID, url.PathEscape(revision))
	resp, body, err := c.api(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("hub: resolve %s@%s: %w", repoID, revision, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, c.apiError(resp.StatusCode, resp.Header, repoID, revision, "")
	}
	return parseRevision(repoID, revision, body)
}

// parseRevision reads the revision API's answer:
// {"id","sha","siblings":[{"rfilename","size","blobId","lfs":{"sha256","size"}}]}.
func parseRevision(repoID, revision string, data []byte) (*RepoInfo, error) {
	var body struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      int64  `json:"size"`
			BlobID    string `json:"blobId"`
			LFS       *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&body); err != nil {
		return nil, fmt.Errorf("hub: revision API for %s@%s: %w", repoID, revision, err)
	}
	if !isHex(body.SHA, 40) {
		return nil, fmt.Errorf("hub: revision API for %s@%s gave no commit sha (got %q)", repoID, revision, body.SHA)
	}
	info := &RepoInfo{RepoID: repoID, Revision: revision, Commit: body.SHA}
	seen := map[string]bool{}
	for _, s := range body.Siblings {
		f := FileInfo{Path: s.RFilename, Size: s.Size, BlobID: strings.ToLower(s.BlobID)}
		if err := checkRelPath(f.Path); err != nil {
			return nil, fmt.Errorf("hub: revision API for %s@%s: %w", repoID, revision, err)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("hub: revision API for %s@%s lists %s twice", repoID, revision, f.Path)
		}
		seen[f.Path] = true
		if s.LFS != nil {
			f.SHA256, f.Size = strings.ToLower(s.LFS.SHA256), s.LFS.Size
			if !isHex(f.SHA256, 64) {
				return nil, fmt.Errorf("hub: revision API for %s@%s: file %s has an invalid LFS sha256 %q", repoID, revision, f.Path, s.LFS.SHA256)
			}
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("hub: revision API for %s@%s: file %s has size %d", repoID, revision, f.Path, f.Size)
		}
		if f.BlobID != "" && !isHex(f.BlobID, 40) {
			f.BlobID = "" // unusable; head() asks for the etag instead
		}
		info.Files = append(info.Files, f)
	}
	return info, nil
}

// head asks the resolve URL for a file's etag and size without following
// the redirect, as huggingface_hub does when it has no file list: etag from
// X-Linked-Etag (LFS) else ETag, size from X-Linked-Size else Content-Length.
func (c *Client) head(ctx context.Context, repoID, commit string, f FileInfo) (FileInfo, error) {
	u := resolveURL(c.opts.Endpoint, repoID, commit, f.Path)
	hc := *c.http
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	nc := &Client{opts: c.opts, host: c.host, http: &hc}
	var last error
	for attempt := 0; attempt < c.opts.Retries; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return f, err
			}
		}
		actx, cancel := context.WithTimeoutCause(ctx, c.opts.StallTimeout, errStalled)
		resp, err := nc.send(actx, http.MethodHead, u, http.Header{"Accept-Encoding": {"identity"}})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return f, ctx.Err()
			}
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return f, c.apiError(resp.StatusCode, resp.Header, repoID, commit, f.Path)
		}
		etag := trimETag(resp.Header.Get("X-Linked-Etag"))
		lfs := etag != ""
		if !lfs {
			etag = trimETag(resp.Header.Get("ETag"))
		}
		size, err := strconv.ParseInt(resp.Header.Get("X-Linked-Size"), 10, 64)
		if err != nil {
			size = resp.ContentLength
		}
		switch {
		case lfs && isHex(etag, 64):
			f.SHA256 = etag
		case !lfs && isHex(etag, 40):
			f.BlobID = etag
		default:
			return f, fmt.Errorf("hub: %s/%s: the Hub gave no usable etag (%q)", repoID, f.Path, etag)
		}
		if size < 0 {
			return f, fmt.Errorf("hub: %s/%s: the Hub gave no size", repoID, f.Path)
		}
		f.Size = size
		return f, nil
	}
	return f, fmt.Errorf("hub: %s/%s: giving up after %d attempts: %w", repoID, f.Path, c.opts.Retries, last)
}

// trimETag drops a weak marker and the quotes around an etag.
func trimETag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.ToLower(strings.Trim(s, `"`))
}

func resolveURL(endpoint, repoID, commit, path string) string {
	parts := strings.Split(path, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", endpoint, repoID, commit, strings.Join(parts, "/"))
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// checkRelPath refuses repo paths that would escape the snapshot directory.
func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("file path %q is not a relative path", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("file path %q is not a plain relative path", p)
		}
	}
	return nil
}
