package hub

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Bounds on what a server may announce, checked before anything is sized
// or planned by it, so a hostile or broken Hub ends in an error naming the
// limit instead of a panic or an allocation the size of a lie.
const (
	// maxFileSize bounds one file: far above the largest file the Hub
	// stores (its LFS limit is 50 GB), far below what int64 arithmetic on
	// offsets and part counts could overflow.
	maxFileSize = 1 << 40
	// maxRepoFiles bounds the revision API's file list (the Hub itself
	// asks repos to stay under 100,000 files).
	maxRepoFiles = 100_000
	// maxAPIBody bounds the revision API's answer: room for maxRepoFiles
	// entries, each a path and its hashes.
	maxAPIBody = 32 << 20
	// maxPathLen bounds a repo path (Linux's PATH_MAX).
	maxPathLen = 4096
	// maxHeaderBytes bounds a response's headers (a signed CDN redirect
	// takes a few KiB).
	maxHeaderBytes = 1 << 20
	// maxParts bounds the parts of one parallel download: a larger file
	// gets larger parts, so the planner's state stays small.
	maxParts = 1 << 16
	// maxRecordSize bounds a part record file (maxParts indices).
	maxRecordSize = 1 << 20
	// maxSeconds bounds a duration setting (a day).
	maxSeconds = 86400
)

// checkSize refuses a file size outside [0, maxFileSize]; what names the
// field or header that announced it.
func checkSize(what string, n int64) error {
	if n < 0 {
		return fmt.Errorf("%s %d is negative", what, n)
	}
	if n > maxFileSize {
		return fmt.Errorf("%s %d is over the %s limit on one file", what, n, formatBytes(maxFileSize))
	}
	return nil
}

// clip quotes a string a server sent, cut short, for an error message.
func clip(s string) string {
	const n = 80
	if len(s) > n {
		return strconv.Quote(s[:n]) + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// checkLocation refuses a redirect anywhere but an http(s) URL with a host.
func checkLocation(u *url.URL) error {
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("hub: redirect to %s: not an http(s) URL", clip(u.Redacted()))
	}
	return nil
}

// parseContentRange reads "bytes first-last/total" of a 206 answer; total
// is -1 for "*".
func parseContentRange(s string) (first, last, total int64, err error) {
	bad := func() (int64, int64, int64, error) {
		return 0, 0, 0, fmt.Errorf("Content-Range %s is not \"bytes first-last/total\"", clip(s))
	}
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return bad()
	}
	span, size, ok := strings.Cut(rest, "/")
	a, b, ok2 := strings.Cut(span, "-")
	if !ok || !ok2 {
		return bad()
	}
	if first, err = strconv.ParseInt(a, 10, 64); err != nil || first < 0 {
		return bad()
	}
	if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
		return bad()
	}
	total = -1
	if size != "*" {
		if total, err = strconv.ParseInt(size, 10, 64); err != nil || total <= last {
			return bad()
		}
	}
	return first, last, total, nil
}

// MaxWorkers bounds Options.Workers: more connections than this to one Hub
// only queue up, and each holds a buffer.
const MaxWorkers = 256
