package hub

import (
	"cmp"
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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// job is the state one Snapshot call shares between its files.
type job struct {
	p     cachePaths
	info  *RepoInfo
	conns chan struct{} // one slot per open download connection
	prog  *progress
}

// Snapshot downloads the files of repoID@revision that match include (nil:
// DefaultInclude) into the cache, or finds them there, and returns the
// snapshot directory. Offline, it uses the cache only; when the Hub cannot
// be reached at all, a complete cached snapshot is used instead.
func (c *Client) Snapshot(ctx context.Context, repoID, revision string, include []string) (*Snapshot, error) {
	if revision == "" {
		revision = "main"
	}
	if c.opts.Offline {
		if err := validRepoID(repoID); err != nil {
			return nil, err
		}
		return CachedSnapshot(c.opts.CacheDir, repoID, revision, include)
	}
	info, err := c.Resolve(ctx, repoID, revision)
	if err != nil {
		return c.fromCache(ctx, err, repoID, revision, include)
	}
	files, err := selectFiles(info, include)
	if err != nil {
		return nil, err
	}
	if err := c.fillMetadata(ctx, info, files); err != nil {
		return nil, err
	}
	var total int64
	for _, f := range files {
		total += f.Size // at most maxRepoFiles * maxFileSize: no overflow
	}
	p := pathsFor(c.opts.CacheDir, repoID)
	for _, d := range []string{p.blobs, p.snapshots, p.refs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("hub: cache: %w", err)
		}
	}
	if err := checkSpace(p.blobs, files); err != nil {
		return nil, fmt.Errorf("hub: %s@%s: %w", repoID, revision, err)
	}
	j := &job{p: p, info: info, conns: make(chan struct{}, c.opts.Workers),
		prog: newProgress(c.opts.Progress, total, fmt.Sprintf("%s: %d files", repoID, len(files)))}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Workers)
	for _, f := range files {
		g.Go(func() error {
			if err := c.fetchFile(gctx, j, f); err != nil {
				if he := (*hubError)(nil); errors.As(err, &he) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					return err // says what and where already
				}
				return fmt.Errorf("hub: %s/%s: %w", repoID, f.Path, err)
			}
			if err := p.link(info.Commit, f.Path, f.etag()); err != nil {
				return fmt.Errorf("hub: cache: link %s: %w", f.Path, err)
			}
			return nil
		})
	}
	err = g.Wait()
	j.prog.close()
	if err != nil {
		return nil, err
	}
	if err := p.writeRef(revision, info.Commit); err != nil {
		return nil, fmt.Errorf("hub: cache: refs/%s: %w", revision, err)
	}
	return &Snapshot{Dir: filepath.Join(p.snapshots, info.Commit), RepoID: repoID, Revision: revision, Commit: info.Commit, Files: files}, nil
}

// fromCache answers a Resolve that failed with err. When the Hub could
// not be reached, or answered with an error that a retry might change, a
// complete cached snapshot is used, with a one-line notice, as
// huggingface_hub does; without one, an unreachable Hub gets an error that
// says what to do.
func (c *Client) fromCache(ctx context.Context, err error, repoID, revision string, include []string) (*Snapshot, error) {
	if ctx.Err() != nil || isFinal(err) || validRepoID(repoID) != nil {
		return nil, err
	}
	unreachable := errors.Is(err, ErrUnreachable)
	s, cerr := CachedSnapshot(c.opts.CacheDir, repoID, revision, include)
	switch {
	case cerr == nil && unreachable:
		c.notice("hub: %s unreachable (%s); using the cached snapshot %s of %s", c.host, dialReason(err), s.Commit, repoID)
		return s, nil
	case cerr == nil:
		c.notice("%v; using the cached snapshot %s of %s", err, s.Commit, repoID)
		return s, nil
	case unreachable:
		return nil, newError(ErrUnreachable, "cannot reach %s (%s), and the cache %s has no complete copy of %s@%s: check the network and HF_ENDPOINT (the Hub to use); a model already in the cache is used without the network with --offline (HF_HUB_OFFLINE=1)",
			c.opts.Endpoint, dialReason(err), c.opts.CacheDir, repoID, revision)
	}
	return nil, err
}

// notice writes one line to Notices, else Progress, if either is set.
func (c *Client) notice(format string, args ...any) {
	if w := cmp.Or(c.opts.Notices, c.opts.Progress); w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// selectFiles picks the files include asks for. A name without wildcards
// that the repo lacks is ErrEntryNotFound; a repo with only PyTorch .bin
// weights gets a message saying so.
func selectFiles(info *RepoInfo, include []string) ([]FileInfo, error) {
	var files []FileInfo
	hasBin := false
	for _, f := range info.Files {
		if strings.HasPrefix(f.Path, "pytorch_model") && strings.HasSuffix(f.Path, ".bin") {
			hasBin = true
		}
		if matches(f.Path, include) {
			files = append(files, f)
		}
	}
	where := info.RepoID + "@" + info.Revision
	for _, g := range include {
		if !strings.ContainsAny(g, "*?[") && !hasFile(files, g) {
			return nil, newError(ErrEntryNotFound, "%s has no file %s", where, g)
		}
	}
	if include == nil && !hasSafetensors(files) {
		if hasBin {
			return nil, fmt.Errorf("hub: %s has only PyTorch .bin weights; lowbit reads safetensors (look for a safetensors revision such as refs/pr/N, or save the model with transformers' save_pretrained(safe_serialization=True))", where)
		}
		return nil, fmt.Errorf("hub: %s has no .safetensors weights", where)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("hub: no file of %s matches %v", where, include)
	}
	return files, nil
}

// fillMetadata asks the resolve URL (HEAD) for the etag and size of the
// files the revision API listed without them.
func (c *Client) fillMetadata(ctx context.Context, info *RepoInfo, files []FileInfo) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Workers)
	for i := range files {
		if e := files[i].etag(); isHex(e, 40) || isHex(e, 64) {
			continue
		}
		g.Go(func() error {
			f, err := c.head(gctx, info.RepoID, info.Commit, files[i])
			files[i] = f
			return err
		})
	}
	return g.Wait()
}

func hasSafetensors(files []FileInfo) bool {
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".safetensors") {
			return true
		}
	}
	return false
}

// fetchFile brings one file's blob into the cache, verified, under its lock.
func (c *Client) fetchFile(ctx context.Context, j *job, f FileInfo) (err error) {
	etag := f.etag()
	blob := filepath.Join(j.p.blobs, etag)
	bar := j.prog.file(f.Path, f.Size)
	defer func() { bar.done(err) }()
	if blobDone(blob, f.Size) {
		bar.add(f.Size)
		return nil
	}
	unlock, err := j.p.lock(ctx, etag)
	if err != nil {
		return err
	}
	defer unlock()
	if blobDone(blob, f.Size) { // another process finished it while we waited
		bar.add(f.Size)
		return nil
	}
	d := &dest{u: resolveURL(c.opts.Endpoint, j.info.RepoID, j.info.Commit, f.Path), file: f, part: blob + ".incomplete", bar: bar}
	ctx, stop := c.watchRate(ctx, d, j.info.RepoID+"/"+f.Path)
	defer stop()
	h, want := newHash(f)
	_, statErr := os.Stat(d.part + ".parts")
	if statErr == nil || (f.Size >= 2*c.opts.PartSize && c.opts.Workers > 1) {
		err = c.fetchParts(ctx, j, d, h)
	} else {
		err = c.fetchStream(ctx, j, d, h)
	}
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		os.Remove(d.part)
		return newError(ErrChecksum, "%s/%s: checksum mismatch: the download hashes to %s, the Hub lists %s (corrupt download, removed; run again)", j.info.RepoID, f.Path, got, want)
	}
	if err := os.Rename(d.part, blob); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

// blobDone reports whether a blob of the expected size is in the cache.
func blobDone(path string, size int64) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Size() == size
}

// newHash returns the hash that identifies f and the value it must have:
// the LFS sha256, or for files kept in git the git blob id (sha1 of
// "blob <size>\0" and the content).
func newHash(f FileInfo) (hash.Hash, string) {
	if f.SHA256 != "" {
		return sha256.New(), f.SHA256
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", f.Size)
	return h, f.BlobID
}

// dest is one file being downloaded into blobs/{etag}.incomplete.
type dest struct {
	u    string // resolve URL
	file FileInfo
	part string
	bar  *fileBar
	// received counts the bytes that arrived from the network (skipped
	// ones too) and open the requests in flight, for the rate watchdog.
	received atomic.Int64
	open     atomic.Int32
	// mem, when not nil, maps the whole of part (a parallel download on
	// Linux): ranges are read from the network straight into it.
	mem []byte
	// ps is the part size; filled[i] counts the bytes of part i that have
	// arrived, in order from its start (mapped downloads only), and more
	// wakes the hasher when they grow.
	ps     int64
	filled []atomic.Int64
	more   chan struct{}
}

// watchRate ends the download of d (named what) when, over RateWindow of
// time with a request of it open, fewer than MinRate bytes a second
// arrive: the returned context is cancelled with an ErrStalled cause.
// Time without an open request (waiting for a connection slot, a lock or
// a retry's backoff) is not counted against the server.
func (c *Client) watchRate(ctx context.Context, d *dest, what string) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	need := int64(float64(c.opts.MinRate) * c.opts.RateWindow.Seconds())
	tick := max(c.opts.RateWindow/8, time.Millisecond)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		var active time.Duration
		base := d.received.Load()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if d.open.Load() == 0 {
				continue
			}
			if active += tick; active < c.opts.RateWindow {
				continue
			}
			got := d.received.Load()
			if got-base < need {
				cancel(newError(ErrStalled, "%s: download stalled: under %s/s for %v (%s arrived; HF_HUB_DOWNLOAD_MIN_RATE and HF_HUB_DOWNLOAD_RATE_WINDOW set the limit)",
					what, formatBytes(c.opts.MinRate), c.opts.RateWindow, formatBytes(got-base)))
				return
			}
			base, active = got, 0
		}
	}()
	return wctx, func() { cancel(nil) }
}

// arrived records that [from, to) of the mapped file has been read in,
// from within one part, in order.
func (d *dest) arrived(from, to int64) {
	i := from / d.ps
	d.filled[i].Store(to - int64(i)*d.ps)
	select {
	case d.more <- struct{}{}:
	default:
	}
}

// fetchStream downloads sequentially into d.part, resuming after what it
// holds (huggingface_hub's .incomplete files are such prefixes), hashing
// as the bytes arrive.
func (c *Client) fetchStream(ctx context.Context, j *job, d *dest, h hash.Hash) error {
	f, err := os.OpenFile(d.part, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	off := st.Size()
	if off > d.file.Size {
		off = 0
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
	}
	if off > 0 {
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, off)); err != nil {
			return fmt.Errorf("cache: reading %s: %w", d.part, err)
		}
		d.bar.add(off)
	}
	if err := c.fillRange(ctx, j, d, f, off, d.file.Size, h); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

// partRecord lists the finished parts of a parallel download, kept in
// {etag}.incomplete.parts so a killed process resumes without refetching.
type partRecord struct {
	PartSize int64 `json:"part_size"`
	Done     []int `json:"done"`
}

// fetchParts downloads a large file in parallel ranged parts while one
// goroutine hashes the finished parts in order. When it stops early it
// cuts the file back to its finished prefix, so the .incomplete file stays
// a valid prefix (as huggingface_hub expects) and resumes with Range.
func (c *Client) fetchParts(ctx context.Context, j *job, d *dest, h hash.Hash) error {
	size := d.file.Size
	ps, n := planParts(size, c.opts.PartSize)
	done := make([]bool, n)
	record := d.part + ".parts"
	f, err := os.OpenFile(d.part, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if b, err := readRecord(record); err == nil {
		// Parts finished out of order by a process that was killed.
		r, err := parseRecord(b, ps, n)
		if err != nil || st.Size() != size {
			clear(done) // unusable: start over
		} else {
			copy(done, r)
		}
	} else {
		// A prefix left by a stream or by huggingface_hub (a file with
		// holes always has a record, written before the holes).
		for i := range done {
			done[i] = int64(i+1)*ps <= st.Size()
		}
	}

	var mu sync.Mutex
	save := func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		if i >= 0 {
			done[i] = true
		}
		r := partRecord{PartSize: ps, Done: []int{}}
		for k, ok := range done {
			if ok {
				r.Done = append(r.Done, k)
			}
		}
		b, _ := json.Marshal(r)
		tmp := record + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
		if err := os.Rename(tmp, record); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
		return nil
	}
	if err := save(-1); err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("cache: %w", err)
	}

	if !c.noMap {
		d.mem = mapFile(f, size)
	}
	ready := make(chan int, n)
	stop := make(chan struct{})
	hashed := make(chan hashResult, 1)
	if d.mem != nil {
		d.ps, d.filled, d.more = ps, make([]atomic.Int64, n), make(chan struct{}, 1)
		for i, ok := range done {
			if ok {
				d.filled[i].Store(min(int64(i+1)*ps, size) - int64(i)*ps)
			}
		}
		go func() { hashed <- hashMapped(d, size, ready, stop, h) }()
	} else {
		go func() { hashed <- hashParts(f, size, ps, n, ready, stop, h) }()
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Workers)
	for i := 0; i < n; i++ {
		from, to := int64(i)*ps, min(int64(i+1)*ps, size)
		if done[i] {
			d.bar.add(to - from)
			ready <- i
			continue
		}
		g.Go(func() error {
			if err := c.fillRange(gctx, j, d, f, from, to, nil); err != nil {
				return err
			}
			if err := save(i); err != nil {
				return err
			}
			ready <- i
			return nil
		})
	}
	err = g.Wait()
	if err != nil {
		close(stop)
	}
	close(ready)
	res := <-hashed
	unmapFile(d.mem) // nothing reads or writes it any more
	d.mem = nil
	if err == nil {
		err = res.err
	}
	if err != nil {
		// Keep only the finished prefix: a valid .incomplete for any tool.
		if f.Truncate(res.prefix) == nil {
			os.Remove(record)
		}
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	os.Remove(record)
	return nil
}

// readRecord reads a part record file of at most maxRecordSize bytes.
func readRecord(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRecordSize+1))
}

// planParts splits size bytes into n parts of ps bytes (the last shorter):
// parts of partSize, larger where that would make over maxParts. Sizes are
// checked against maxFileSize first, so nothing overflows.
func planParts(size, partSize int64) (ps int64, n int) {
	ps = max(partSize, (size+maxParts-1)/maxParts, 1)
	return ps, int((size + ps - 1) / ps)
}

// parseRecord reads a part record written for parts of size ps, n parts.
func parseRecord(b []byte, ps int64, n int) ([]bool, error) {
	if len(b) > maxRecordSize {
		return nil, fmt.Errorf("part record: over %s", formatBytes(maxRecordSize))
	}
	var r partRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("part record: %w", err)
	}
	if r.PartSize != ps {
		return nil, fmt.Errorf("part record: part size %d, want %d", r.PartSize, ps)
	}
	done := make([]bool, n)
	for _, i := range r.Done {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("part record: part %d of %d", i, n)
		}
		done[i] = true
	}
	return done, nil
}

type hashResult struct {
	prefix int64 // bytes hashed: the finished prefix
	err    error
}

// hashParts hashes parts in file order as their indices arrive on ready,
// reading them back from the page cache with ReadAt.
func hashParts(f *os.File, size, ps int64, n int, ready <-chan int, stop <-chan struct{}, h hash.Hash) hashResult {
	have := make([]bool, n)
	next := 0
	buf := make([]byte, 4<<20)
	for i := range ready {
		have[i] = true
		for next < n && have[next] {
			select {
			case <-stop:
				return hashResult{prefix: int64(next) * ps}
			default:
			}
			from, to := int64(next)*ps, min(int64(next+1)*ps, size)
			if _, err := io.CopyBuffer(h, io.NewSectionReader(f, from, to-from), buf); err != nil {
				return hashResult{prefix: from, err: fmt.Errorf("cache: reading back %s: %w", f.Name(), err)}
			}
			next++
		}
	}
	if next < n {
		return hashResult{prefix: int64(next) * ps, err: errors.New("download stopped")}
	}
	return hashResult{prefix: size}
}

// hashMapped hashes a mapped download in file order as its bytes arrive:
// it follows the part being received at the front of the file instead of
// waiting for whole parts, so the sequential hash overlaps the download
// from the first byte and ends soon after the last. ready is closed when
// the downloads have stopped; stop says they failed.
func hashMapped(d *dest, size int64, ready <-chan int, stop <-chan struct{}, h hash.Hash) hashResult {
	var pos int64 // bytes hashed
	closed := false
	for pos < size {
		i := pos / d.ps
		avail := int64(i)*d.ps + d.filled[i].Load()
		if avail > pos {
			to := min(avail, pos+4<<20)
			h.Write(d.mem[pos:to])
			pos = to
			continue
		}
		if closed {
			return hashResult{prefix: pos, err: errors.New("download stopped")}
		}
		select {
		case <-stop:
			return hashResult{prefix: pos}
		case _, ok := <-ready:
			closed = !ok
		case <-d.more:
		}
	}
	return hashResult{prefix: size}
}

// fillRange downloads [off, end) into f, retrying 5xx answers, dropped
// connections and stalls from where they stopped. An attempt resets the
// retry count only when it brings what MinRate asks of a RateWindow, so a
// server that sends a few bytes per request and stalls runs out of
// retries. h, if not nil, sees the bytes in order.
func (c *Client) fillRange(ctx context.Context, j *job, d *dest, f *os.File, off, end int64, h hash.Hash) error {
	enough := max(1, int64(float64(c.opts.MinRate)*c.opts.RateWindow.Seconds()))
	var last error
	for attempt := 0; off < end; attempt++ {
		if attempt >= c.opts.Retries {
			return fmt.Errorf("giving up at byte %d after %d attempts that brought under %s each: %w", off, attempt, formatBytes(enough), last)
		}
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		n, err := c.getRange(ctx, j, d, f, off, end, h)
		off += n
		if n >= enough {
			attempt = -1
		}
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case err != nil && isFinal(err):
			return err
		case err != nil:
			last = err
		case off < end:
			last = fmt.Errorf("connection closed at byte %d of %d", off, end)
		}
	}
	return nil
}

// getRange makes one ranged GET of [off, end) and copies what arrives into
// f at its offset, returning the bytes written. The request is abandoned
// when no byte arrives for StallTimeout.
func (c *Client) getRange(ctx context.Context, j *job, d *dest, f *os.File, off, end int64, h hash.Hash) (int64, error) {
	select {
	case j.conns <- struct{}{}:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	defer func() { <-j.conns }()
	d.open.Add(1)
	defer d.open.Add(-1)
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(c.opts.StallTimeout, func() { cancel(c.stallCause()) })
	defer timer.Stop()
	idle := func(r io.Reader) io.Reader {
		return &idleReader{r: r, timer: timer, d: c.opts.StallTimeout, count: &d.received}
	}

	hdr := http.Header{"Accept-Encoding": {"identity"}}
	if off > 0 || end < d.file.Size {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end-1))
	}
	resp, err := c.send(actx, http.MethodGet, d.u, hdr)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body := resp.Body
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if err := checkRange(resp.Header.Get("Content-Range"), off, end, d.file.Size); err != nil {
			return 0, err
		}
	case http.StatusOK:
		// The whole file: skip what we have (a server that ignores Range).
		if resp.ContentLength >= 0 && resp.ContentLength != d.file.Size {
			return 0, fmt.Errorf("the whole file came with Content-Length %d, the Hub lists %d bytes", resp.ContentLength, d.file.Size)
		}
		if _, err := io.CopyN(io.Discard, idle(body), off); err != nil {
			return 0, stalled(actx, err)
		}
	default:
		if resp.Request.URL.Host != c.host {
			// A CDN's refusal (an expired signature, say): a new request
			// to the Hub brings a fresh redirect, so it may be retried.
			return 0, fmt.Errorf("CDN %s answered %s", clip(resp.Request.URL.Host), statusLine(resp.StatusCode))
		}
		return 0, c.apiError(resp.StatusCode, resp.Header, j.info.RepoID, j.info.Commit, d.file.Path)
	}
	if d.mem != nil && h == nil {
		populate(d.mem[off:end])
		n, err := readInto(d.mem[off:end], idle(body), d.bar, func(k int64) { d.arrived(off, off+k) })
		return n, stalled(actx, err)
	}
	n, err := copyAt(f, off, idle(io.LimitReader(body, end-off)), h, d.bar)
	return n, stalled(actx, err)
}

// stalled names a read cut off by the stall timer or the rate watchdog.
func stalled(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrStalled) {
		return cause
	}
	return err
}

// checkRange checks a 206 answer's Content-Range against the request for
// [off, end) of a file of size bytes: it must start at off and lie in the
// file (it may end early; the rest is asked for again).
func checkRange(cr string, off, end, size int64) error {
	first, last, total, err := parseContentRange(cr)
	switch {
	case err != nil:
		return fmt.Errorf("asked for bytes %d-%d: %w", off, end-1, err)
	case first != off || last >= size || (total >= 0 && total != size):
		return fmt.Errorf("asked for bytes %d-%d of %d, got Content-Range %s", off, end-1, size, clip(cr))
	}
	return nil
}

// idleReader pushes a stall timer back on every read that brings bytes,
// and counts them (skipped ones too: the link is alive) for the watchdog.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
	count *atomic.Int64
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
		r.count.Add(int64(n))
	}
	return n, err
}

// copyAt copies body into f from offset off (and into h, if not nil),
// counting progress; it returns the bytes written, also on error. It
// writes what each read brings, so a killed process keeps what arrived.
func copyAt(f *os.File, off int64, body io.Reader, h hash.Hash, bar *fileBar) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, rerr := body.Read(buf)
		if k > 0 {
			if _, err := f.WriteAt(buf[:k], off+n); err != nil {
				return n, fmt.Errorf("cache: %w", err)
			}
			if h != nil {
				h.Write(buf[:k])
			}
			n += int64(k)
			bar.add(int64(k))
		}
		if rerr == io.EOF {
			return n, nil // the caller compares n with what it asked for
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// readInto reads body into dst (a mapped range of the file) until dst is
// full or the body ends, counting progress; it returns the bytes read,
// also on error. The socket's bytes land in the page cache with one copy.
// After each read, got learns how many bytes dst holds.
func readInto(dst []byte, body io.Reader, bar *fileBar, got func(int64)) (int64, error) {
	var n int
	for n < len(dst) {
		k, err := body.Read(dst[n:min(n+1<<20, len(dst))])
		n += k
		if k > 0 {
			bar.add(int64(k))
			got(int64(n))
		}
		if err == io.EOF {
			return int64(n), nil // the caller compares n with what it asked for
		}
		if err != nil {
			return int64(n), err
		}
	}
	return int64(n), nil
}
