package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// newRequest builds a request; the token goes only to the endpoint.
func (c *Client) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "lowbit (huggingface_hub-compatible)")
	if c.opts.Token != "" && req.URL.Host == hostOf(c.opts.Endpoint) {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	return req, nil
}

// do sends a request, retrying on 5xx and transport errors with backoff.
func (c *Client) do(ctx context.Context, method, u string, header http.Header) (*http.Response, error) {
	var last error
	for attempt := 0; attempt < c.opts.Retries; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return nil, err
			}
		}
		req, err := c.newRequest(ctx, method, u)
		if err != nil {
			return nil, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			last = err
			continue
		}
		if resp.StatusCode >= 500 {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			last = fmt.Errorf("%s %s: %s", method, u, resp.Status)
			continue
		}
		return resp, nil
	}
	return nil, fmt.Errorf("hub: giving up after %d attempts: %w", c.opts.Retries, last)
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

// apiError turns an error response into a message that says what is wrong
// and how to fix it.
func apiError(resp *http.Response, repo, revision, path string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch {
	case code == "GatedRepo":
		return fmt.Errorf("%w: %s is gated: accept its license at https://huggingface.co/%s, then set HF_TOKEN or run `huggingface-cli login` with an account that has access", ErrGated, repo, repo)
	case code == "RepoNotFound":
		return fmt.Errorf("%w: %s does not exist, or is private and your token cannot see it (HF_TOKEN / huggingface-cli login)", ErrRepoNotFound, repo)
	case code == "RevisionNotFound":
		return fmt.Errorf("%w: %s has no revision %q", ErrRevisionNotFound, repo, revision)
	case code == "EntryNotFound":
		return fmt.Errorf("%w: %s has no file %s at %s", ErrEntryNotFound, repo, path, revision)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: %s answered %s for %s (set HF_TOKEN or run `huggingface-cli login`)%s", ErrUnauthorized, repo, resp.Status, path, suffix(msg))
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s %s %s%s", ErrEntryNotFound, repo, revision, path, suffix(msg))
	}
	return fmt.Errorf("hub: %s %s: %s%s", repo, path, resp.Status, suffix(msg))
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
	if c.opts.Offline {
		return nil, fmt.Errorf("%w: cannot resolve %s@%s while offline", ErrOffline, repoID, revision)
	}
	u := fmt.Sprintf("%s/api/models/%s/revision/%s?blobs=true", c.opts.Endpoint, repoID, url.PathEscape(revision))
	resp, err := c.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, apiError(resp, repoID, revision, "")
	}
	defer resp.Body.Close()
	var body struct {
		ID       string `json:"id"`
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
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("hub: revision API for %s@%s: %w", repoID, revision, err)
	}
	if !isHex(body.SHA, 40) {
		return nil, fmt.Errorf("hub: revision API for %s@%s gave no commit sha", repoID, revision)
	}
	info := &RepoInfo{RepoID: repoID, Revision: revision, Commit: body.SHA}
	for _, s := range body.Siblings {
		f := FileInfo{Path: s.RFilename, Size: s.Size, BlobID: s.BlobID}
		if s.LFS != nil {
			f.SHA256, f.Size = strings.ToLower(s.LFS.SHA256), s.LFS.Size
			if !isHex(f.SHA256, 64) {
				return nil, fmt.Errorf("hub: %s: file %s has an invalid LFS sha256", repoID, f.Path)
			}
		}
		if err := checkRelPath(f.Path); err != nil {
			return nil, fmt.Errorf("hub: %s: %w", repoID, err)
		}
		info.Files = append(info.Files, f)
	}
	return info, nil
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
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return fmt.Errorf("file path %q is not a relative path", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("file path %q is not a plain relative path", p)
		}
	}
	return nil
}
