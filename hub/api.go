package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// stallCause cancels a request that brought no byte for StallTimeout.
func (c *Client) stallCause() error {
	return fmt.Errorf("%w: no data from the server for %v (HF_HUB_DOWNLOAD_TIMEOUT)", ErrStalled, c.opts.StallTimeout)
}

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
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			ue.URL = redact(ue.URL) // a redirect's, which the server chose
		}
		return nil, err
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %s", method, redact(u), statusLine(resp.StatusCode))
	}
	return resp, nil
}

// redact drops the query (a CDN's signature) from a URL shown in errors,
// and cuts a long one short.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	if len(u) > 200 {
		u = u[:200] + "…"
	}
	return u
}

// statusLine names a status by its code, not by the server's reason text.
func statusLine(code int) string {
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// api GETs a small JSON answer (what names it in errors); each attempt,
// body included, must finish within StallTimeout, and the body must fit
// maxAPIBody. Error statuses are returned with their headers.
func (c *Client) api(ctx context.Context, what, u string) (resp *http.Response, body []byte, err error) {
	err = c.try(ctx, what, func(ctx context.Context) (bool, error) {
		late := fmt.Errorf("%w: no whole answer within %v (HF_HUB_DOWNLOAD_TIMEOUT)", ErrStalled, c.opts.StallTimeout)
		actx, cancel := context.WithTimeoutCause(ctx, c.opts.StallTimeout, late)
		defer cancel()
		r, err := c.send(actx, http.MethodGet, u, nil)
		if err != nil {
			return true, err
		}
		b, err := readBody(r)
		if err != nil {
			return !isFinal(err), err
		}
		resp, body = r, b
		return false, nil
	})
	return resp, body, err
}

// try runs attempt until it succeeds or fails in a way it says a retry
// cannot change, at most Retries times, with backoff. A failure to reach
// the server at all is tried once more at most, and not when the name does
// not exist: without a network the caller learns it at once, as from
// huggingface_hub, and Snapshot can fall back to the cache. Errors other
// than a *hubError (a whole message already) are prefixed with what.
func (c *Client) try(ctx context.Context, what string, attempt func(context.Context) (retry bool, err error)) error {
	var last error
	dialRetried := false
	for i := 0; i < c.opts.Retries; i++ {
		if i > 0 {
			if err := sleep(ctx, backoff(i)); err != nil {
				return err
			}
		}
		retry, err := attempt(ctx)
		switch he := (*hubError)(nil); {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.As(err, &he):
			return err
		case !retry:
			return fmt.Errorf("%s: %w", what, err)
		}
		last = err
		if unreachable, again := dialFailure(err); unreachable {
			if !again || dialRetried || i == c.opts.Retries-1 {
				return fmt.Errorf("%s: %w: %w", what, ErrUnreachable, err)
			}
			dialRetried = true
		}
	}
	return fmt.Errorf("%s: giving up after %d attempts: %w", what, c.opts.Retries, last)
}

// dialFailure reports whether err is a failure to reach the server at all
// (a DNS lookup, a refused or unreachable connection, a proxy that cannot
// connect), and whether a retry may help: not for a name that does not
// exist.
func dialFailure(err error) (failed, retry bool) {
	if dns := (*net.DNSError)(nil); errors.As(err, &dns) {
		return true, !dns.IsNotFound
	}
	if op := (*net.OpError)(nil); errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		return true, true
	}
	return false, false
}

// dialReason is the short cause of a failure to reach the server, for a
// one-line notice: "lookup huggingface.co: no such host", "connect:
// connection refused".
func dialReason(err error) string {
	if dns := (*net.DNSError)(nil); errors.As(err, &dns) {
		return "lookup " + dns.Name + ": " + dns.Err
	}
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// errTooLarge is an answer over maxAPIBody: final, a retry brings the same.
var errTooLarge = fmt.Errorf("the answer is over the %s limit", formatBytes(maxAPIBody))

// readBody reads and closes an API answer of at most maxAPIBody bytes.
func readBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	if resp.ContentLength > maxAPIBody {
		return nil, fmt.Errorf("%w (Content-Length %d)", errTooLarge, resp.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody+1))
	if err != nil {
		if cause := context.Cause(resp.Request.Context()); cause != nil {
			return nil, cause
		}
		return nil, err
	}
	if len(body) > maxAPIBody {
		return nil, errTooLarge
	}
	return body, nil
}

// backoff is 200ms doubled per attempt, capped at 5s.
func backoff(attempt int) time.Duration {
	return min(200*time.Millisecond<<(attempt-1), 5*time.Second)
}

// sleep waits d, or returns why ctx ended.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
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
	statusText := statusLine(status)
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
	return &hubError{msg: fmt.Sprintf("hub: %s %s: %s%s", repo, path, statusText, suffix(msg))}
}

// isFinal reports whether err is an answer that retrying cannot change.
func isFinal(err error) bool {
	for _, e := range []error{ErrGated, ErrUnauthorized, ErrRepoNotFound, ErrRevisionNotFound, ErrEntryNotFound, ErrChecksum, errTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// suffix appends a server's error message, cut short if long.
func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
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
	resp, body, err := c.api(ctx, fmt.Sprintf("hub: revision API for %s@%s", repoID, revision), u)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, c.apiError(resp.StatusCode, resp.Header, repoID, revision, "")
	}
	return parseRevision(repoID, revision, body)
}

// parseRevision reads the revision API's answer:
// {"id","sha","siblings":[{"rfilename","size","blobId","lfs":{"sha256","size"}}]}.
// It decodes the file list one entry at a time, so an answer of countless
// tiny entries fails at maxRepoFiles instead of allocating them all.
func parseRevision(repoID, revision string, data []byte) (*RepoInfo, error) {
	info := &RepoInfo{RepoID: repoID, Revision: revision}
	seen := map[string]bool{}
	if err := decodeRevision(data, &info.Commit, func(s sibling) error {
		if len(info.Files) >= maxRepoFiles {
			return fmt.Errorf("lists over %d files", maxRepoFiles)
		}
		f, err := s.file()
		if err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("lists %s twice", f.Path)
		}
		seen[f.Path] = true
		info.Files = append(info.Files, f)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("hub: revision API for %s@%s: %w", repoID, revision, err)
	}
	if !isHex(info.Commit, 40) {
		return nil, fmt.Errorf("hub: revision API for %s@%s gave no commit sha (got %s)", repoID, revision, clip(info.Commit))
	}
	return info, nil
}

// sibling is one entry of the revision API's file list.
type sibling struct {
	RFilename string `json:"rfilename"`
	Size      int64  `json:"size"`
	BlobID    string `json:"blobId"`
	LFS       *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

// file checks an entry and turns it into a FileInfo.
func (s sibling) file() (FileInfo, error) {
	f := FileInfo{Path: s.RFilename, Size: s.Size, BlobID: strings.ToLower(s.BlobID)}
	if err := checkRelPath(f.Path); err != nil {
		return f, err
	}
	sizeField := "size"
	if s.LFS != nil {
		f.SHA256, f.Size, sizeField = strings.ToLower(s.LFS.SHA256), s.LFS.Size, "lfs.size"
		if !isHex(f.SHA256, 64) {
			return f, fmt.Errorf("file %s has an invalid LFS sha256 %s", f.Path, clip(s.LFS.SHA256))
		}
	}
	if err := checkSize(sizeField, f.Size); err != nil {
		return f, fmt.Errorf("file %s: %w", f.Path, err)
	}
	if f.BlobID != "" && !isHex(f.BlobID, 40) {
		f.BlobID = "" // unusable; head() asks for the etag instead
	}
	return f, nil
}

// decodeRevision walks the answer's top-level object: "sha" into sha,
// each entry of "siblings" to each, every other key skipped.
func decodeRevision(data []byte, sha *string, each func(sibling) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '{', "an object"); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch key, _ := tok.(string); key {
		case "sha":
			if err := dec.Decode(sha); err != nil {
				return fmt.Errorf("sha: %w", err)
			}
		case "siblings":
			if err := expectDelim(dec, '[', "siblings: a list"); err != nil {
				return err
			}
			for dec.More() {
				var s sibling
				if err := dec.Decode(&s); err != nil {
					return fmt.Errorf("siblings: %w", err)
				}
				if err := each(s); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // the closing ]
				return fmt.Errorf("siblings: %w", err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return fmt.Errorf("%s: %w", clip(key), err)
			}
		}
	}
	return nil
}

// expectDelim reads the next token, which must be the delimiter d.
func expectDelim(dec *json.Decoder, d json.Delim, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("want %s, got %v", what, tok)
	}
	return nil
}

// head asks the resolve URL for a file's etag and size without following
// the redirect, as huggingface_hub does when it has no file list.
func (c *Client) head(ctx context.Context, repoID, commit string, f FileInfo) (FileInfo, error) {
	u := resolveURL(c.opts.Endpoint, repoID, commit, f.Path)
	hc := *c.http
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	nc := &Client{opts: c.opts, host: c.host, http: &hc}
	err := c.try(ctx, fmt.Sprintf("hub: %s/%s", repoID, f.Path), func(ctx context.Context) (bool, error) {
		actx, cancel := context.WithTimeoutCause(ctx, c.opts.StallTimeout, c.stallCause())
		defer cancel()
		resp, err := nc.send(actx, http.MethodHead, u, http.Header{"Accept-Encoding": {"identity"}})
		if err != nil {
			return true, err
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return false, c.apiError(resp.StatusCode, resp.Header, repoID, commit, f.Path)
		}
		f, err = fileMeta(f, resp.Header, resp.ContentLength)
		return false, err
	})
	return f, err
}

// fileMeta reads a file's etag and size from the resolve URL's answer as
// huggingface_hub does: etag from X-Linked-Etag (LFS) else ETag, size from
// X-Linked-Size else Content-Length (contentLength, -1 when absent).
func fileMeta(f FileInfo, h http.Header, contentLength int64) (FileInfo, error) {
	etag := trimETag(h.Get("X-Linked-Etag"))
	lfs := etag != ""
	if !lfs {
		etag = trimETag(h.Get("ETag"))
	}
	switch {
	case lfs && isHex(etag, 64):
		f.SHA256 = etag
	case lfs:
		return f, fmt.Errorf("X-Linked-Etag %s is not a sha256", clip(h.Get("X-Linked-Etag")))
	case isHex(etag, 40):
		f.BlobID = etag
	default:
		return f, fmt.Errorf("the Hub gave no usable etag (ETag %s)", clip(h.Get("ETag")))
	}
	size, what := contentLength, "Content-Length"
	if v := h.Get("X-Linked-Size"); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return f, fmt.Errorf("X-Linked-Size %s is not a byte count", clip(v))
		}
		size, what = n, "X-Linked-Size"
	} else if size < 0 {
		return f, errors.New("the Hub gave no size (no X-Linked-Size or Content-Length)")
	}
	if err := checkSize(what, size); err != nil {
		return f, err
	}
	f.Size = size
	return f, nil
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
	if len(p) > maxPathLen {
		return fmt.Errorf("file path %s is over the %d-byte limit", clip(p), maxPathLen)
	}
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("file path %s is not a relative path", clip(p))
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("file path %s is not a plain relative path", clip(p))
		}
	}
	return nil
}
