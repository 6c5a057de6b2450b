package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sync/errgroup"
)

// Snapshot downloads the files of repoID@revision that match include (nil:
// DefaultInclude) into the cache, or finds them there, and returns the
// snapshot directory. Offline, it uses the cache only.
func (c *Client) Snapshot(ctx context.Context, repoID, revision string, include []string) (*Snapshot, error) {
	if revision == "" {
		revision = "main"
	}
	if c.opts.Offline {
		return CachedSnapshot(c.opts.CacheDir, repoID, revision, include)
	}
	info, err := c.Resolve(ctx, repoID, revision)
	if err != nil {
		return nil, err
	}
	var files []FileInfo
	var total int64
	hasBin := false
	for _, f := range info.Files {
		if strings.HasPrefix(f.Path, "pytorch_model") && strings.HasSuffix(f.Path, ".bin") {
			hasBin = true
		}
		if matches(f.Path, include) {
			files = append(files, f)
			total += f.Size
		}
	}
	if include == nil && !hasSafetensors(files) {
		if hasBin {
			return nil, fmt.Errorf("hub: %s@%s has only PyTorch .bin weights; lowbit reads safetensors (look for a safetensors revision such as refs/pr/N, or convert with transformers' save_pretrained)", repoID, revision)
		}
		return nil, fmt.Errorf("hub: %s@%s has no .safetensors weights", repoID, revision)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("hub: no file of %s@%s matches %v", repoID, revision, include)
	}
	p := pathsFor(c.opts.CacheDir, repoID)
	for _, d := range []string{p.blobs, p.snapshots, p.refs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("hub: cache: %w", err)
		}
	}
	bar := c.newBar(total, fmt.Sprintf("%s: %d files", repoID, len(files)))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Workers)
	for _, f := range files {
		g.Go(func() error {
			if err := c.fetchFile(gctx, p, info, f, bar); err != nil {
				return fmt.Errorf("hub: %s/%s: %w", repoID, f.Path, err)
			}
			return p.link(info.Commit, f.Path, f.etag())
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if bar != nil {
		bar.Finish()
	}
	if err := p.writeRef(revision, info.Commit); err != nil {
		return nil, fmt.Errorf("hub: cache: %w", err)
	}
	return &Snapshot{Dir: filepath.Join(p.snapshots, info.Commit), RepoID: repoID, Revision: revision, Commit: info.Commit, Files: files}, nil
}

func hasSafetensors(files []FileInfo) bool {
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".safetensors") {
			return true
		}
	}
	return false
}

func (c *Client) newBar(total int64, desc string) *progressbar.ProgressBar {
	if c.opts.Progress == nil {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(c.opts.Progress), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100e6),
		progressbar.OptionSetPredictTime(true), progressbar.OptionOnCompletion(func() { io.WriteString(c.opts.Progress, "\n") }))
}

// fetchFile brings one file's blob into the cache, verified, under its lock.
func (c *Client) fetchFile(ctx context.Context, p cachePaths, info *RepoInfo, f FileInfo, bar *progressbar.ProgressBar) error {
	etag := f.etag()
	if !isHex(etag, 40) && !isHex(etag, 64) {
		return fmt.Errorf("the Hub gave no usable etag (blob id %q)", f.BlobID)
	}
	blob := filepath.Join(p.blobs, etag)
	if st, err := os.Stat(blob); err == nil && st.Size() == f.Size {
		addBar(bar, f.Size)
		return nil
	}
	unlock, err := p.lock(etag)
	if err != nil {
		return err
	}
	defer unlock()
	if st, err := os.Stat(blob); err == nil && st.Size() == f.Size { // another process finished it
		addBar(bar, f.Size)
		return nil
	}
	u := fmt.Sprintf("%s/%s/resolve/%s/%s", c.opts.Endpoint, info.RepoID, info.Commit, escapePath(f.Path))
	part := blob + ".incomplete"
	if f.Size >= 2*c.opts.PartSize && c.opts.Workers > 1 {
		err = c.fetchParts(ctx, u, part, f.Size, bar)
	} else {
		err = c.fetchStream(ctx, u, part, f.Size, bar)
	}
	if err != nil {
		return err
	}
	if err := verify(part, f); err != nil {
		os.Remove(part)
		return err
	}
	return os.Rename(part, blob)
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func addBar(bar *progressbar.ProgressBar, n int64) {
	if bar != nil {
		bar.Add64(n)
	}
}

// verify checks a downloaded file: the LFS sha256, or for files kept in git
// the git blob id (sha1 of "blob <size>\0" and the content).
func verify(path string, f FileInfo) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	var h hash.Hash
	want := f.SHA256
	if want != "" {
		h = sha256.New()
	} else {
		h = sha1.New()
		fmt.Fprintf(h, "blob %d\x00", f.Size)
		want = f.BlobID
	}
	n, err := io.Copy(h, fh)
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("%w: got %d bytes, the Hub lists %d", ErrChecksum, n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: content hashes to %s, the Hub lists %s (corrupt download; retry)", ErrChecksum, got, want)
	}
	return nil
}

// getRange GETs bytes [from, to] (to < 0: to the end), following redirects;
// it returns the body when the server honoured the range.
func (c *Client) getRange(ctx context.Context, u string, from, to int64) (io.ReadCloser, error) {
	h := http.Header{}
	if from > 0 || to >= 0 {
		r := "bytes=" + strconv.FormatInt(from, 10) + "-"
		if to >= 0 {
			r += strconv.FormatInt(to, 10)
		}
		h.Set("Range", r)
	}
	h.Set("Accept-Encoding", "identity")
	resp, err := c.do(ctx, http.MethodGet, u, h)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		return resp.Body, nil
	case resp.StatusCode == http.StatusOK && from == 0 && to < 0:
		return resp.Body, nil
	case resp.StatusCode == http.StatusOK:
		resp.Body.Close()
		return nil, errors.New("the server ignored the Range request")
	}
	return nil, apiError(resp, "", "", u)
}

// copyAt copies body into f from offset off, counting progress; it returns
// the bytes written, also on error (a dropped connection).
func copyAt(f *os.File, off int64, body io.Reader, bar *progressbar.ProgressBar) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, rerr := io.ReadFull(body, buf)
		if k > 0 {
			if _, err := f.WriteAt(buf[:k], off+n); err != nil {
				return n, err
			}
			n += int64(k)
			addBar(bar, int64(k))
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return n, nil // the caller compares n with what it asked for
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// fetchStream downloads sequentially into part, resuming from its size.
func (c *Client) fetchStream(ctx context.Context, u, part string, size int64, bar *progressbar.ProgressBar) error {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	off := st.Size()
	if off > size {
		off = 0
		f.Truncate(0)
	}
	addBar(bar, off)
	return c.fillRange(ctx, f, u, off, size, bar)
}

// fillRange downloads [off, end) into f, retrying dropped connections from
// where they stopped, a bounded number of times.
func (c *Client) fillRange(ctx context.Context, f *os.File, u string, off, end int64, bar *progressbar.ProgressBar) error {
	var last error
	for attempt := 0; off < end; attempt++ {
		if attempt >= c.opts.Retries {
			return fmt.Errorf("giving up at byte %d after %d attempts: %w", off, attempt, last)
		}
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		body, err := c.getRange(ctx, u, off, end-1)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var apiErr bool
			for _, e := range []error{ErrGated, ErrUnauthorized, ErrRepoNotFound, ErrEntryNotFound} {
				apiErr = apiErr || errors.Is(err, e)
			}
			if apiErr {
				return err
			}
			last = err
			continue
		}
		n, err := copyAt(f, off, io.LimitReader(body, end-off), bar)
		body.Close()
		if n > 0 {
			attempt = -1 // progress resets the retry budget
		}
		off += n
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			last = err
		} else if off < end {
			last = fmt.Errorf("connection closed at byte %d of %d", off, end)
		}
	}
	return nil
}

// fetchParts downloads a large file in parallel ranged parts. Finished parts
// are recorded in part+".parts" so an interrupted download resumes without
// refetching them; a partial file without that record (huggingface_hub's)
// counts as a finished prefix.
func (c *Client) fetchParts(ctx context.Context, u, part string, size int64, bar *progressbar.ProgressBar) error {
	n := int((size + c.opts.PartSize - 1) / c.opts.PartSize)
	done := make([]bool, n)
	record := part + ".parts"
	if b, err := os.ReadFile(record); err == nil {
		var idx []int
		if json.Unmarshal(b, &idx) == nil {
			for _, i := range idx {
				if i >= 0 && i < n {
					done[i] = true
				}
			}
		}
	} else if st, err := os.Stat(part); err == nil {
		for i := 0; i < n; i++ {
			if int64(i+1)*c.opts.PartSize <= st.Size() {
				done[i] = true
			}
		}
	}
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	var mu sync.Mutex
	save := func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		done[i] = true
		var idx []int
		for k, d := range done {
			if d {
				idx = append(idx, k)
			}
		}
		b, _ := json.Marshal(idx)
		tmp := record + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, record)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Workers)
	for i := 0; i < n; i++ {
		from := int64(i) * c.opts.PartSize
		to := min(from+c.opts.PartSize, size)
		if done[i] {
			addBar(bar, to-from)
			continue
		}
		g.Go(func() error {
			if err := c.fillRange(gctx, f, u, from, to, bar); err != nil {
				return err
			}
			return save(i)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	os.Remove(record)
	return nil
}
