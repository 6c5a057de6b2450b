// Package hub downloads models from the HuggingFace Hub the way
// huggingface_hub does, into the same cache (HF_HUB_CACHE, default
// ~/.cache/huggingface/hub): blobs named by etag, snapshots/{commit} as
// relative symlinks to them, refs/{revision} holding the commit. A model
// Python tools downloaded is used without a byte fetched, and the other way
// round. Files are verified against the Hub's sha256 before they enter the
// cache, resume from blobs/{etag}.incomplete, arrive in parallel ranged parts,
// and are guarded by per-blob lock files so several processes can share the cache.
package hub

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the public Hub.
const DefaultEndpoint = "https://huggingface.co"

// Options configure a Client; OptionsFromEnv fills them as huggingface_hub would.
type Options struct {
	// Endpoint is the Hub's base URL (HF_ENDPOINT).
	Endpoint string
	// Token authenticates requests to the endpoint (HF_TOKEN, else $HF_HOME/token).
	Token string
	// CacheDir is the hub cache (HF_HUB_CACHE, else $HF_HOME/hub).
	CacheDir string
	// Offline uses the cache only (HF_HUB_OFFLINE=1).
	Offline bool
	// Workers bounds parallel files and parts (at most MaxWorkers).
	Workers int
	// PartSize is the size of a ranged part of a large file (default 32 MiB).
	PartSize int64
	// Retries bounds attempts per request on 5xx, dropped connections and
	// stalls (default 5); an attempt resets the count only when it brings
	// at least what MinRate asks of a RateWindow, so a server that sends a
	// few bytes per request cannot keep a download alive.
	Retries int
	// StallTimeout abandons and retries a request that brings no byte for
	// this long (default 30s; HF_HUB_DOWNLOAD_TIMEOUT, in seconds), so a
	// stalled server cannot hang a download.
	StallTimeout time.Duration
	// MinRate and RateWindow end a file's download when, over RateWindow of
	// time with a request of it open, it receives fewer than MinRate bytes a
	// second (defaults 1 KiB/s and 60s; HF_HUB_DOWNLOAD_MIN_RATE in bytes a
	// second, HF_HUB_DOWNLOAD_RATE_WINDOW in seconds): a server trickling
	// bytes far slower than any real link ends in an error, not a hang.
	MinRate    int64
	RateWindow time.Duration
	// Progress receives progress bars (nil: none).
	Progress io.Writer
	// Notices receives one-line notices, such as a fall back to the cache
	// when the Hub cannot be reached (nil: Progress).
	Notices io.Writer
	// HTTPClient sends the requests (tests inject one; nil: a default with timeouts).
	HTTPClient *http.Client

	// envErr is an environment variable OptionsFromEnv could not read; New
	// reports it, so a typo is an error rather than a silent default.
	envErr error
}

// OptionsFromEnv reads the environment as huggingface_hub does: HF_ENDPOINT,
// HF_TOKEN (else HUGGING_FACE_HUB_TOKEN, else the file HF_TOKEN_PATH or
// $HF_HOME/token), HF_HOME (else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface), HF_HUB_CACHE, HF_HUB_OFFLINE and
// HF_HUB_DOWNLOAD_TIMEOUT; and lowbit's own HF_HUB_DOWNLOAD_MIN_RATE and
// HF_HUB_DOWNLOAD_RATE_WINDOW. A value it cannot read makes New fail.
func OptionsFromEnv() Options {
	home := os.Getenv("HF_HOME")
	if home == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			if h, err := os.UserHomeDir(); err == nil {
				base = filepath.Join(h, ".cache")
			}
		}
		home = filepath.Join(base, "huggingface")
	}
	o := Options{Endpoint: os.Getenv("HF_ENDPOINT"), CacheDir: os.Getenv("HF_HUB_CACHE")}
	if o.CacheDir == "" {
		o.CacheDir = filepath.Join(home, "hub")
	}
	o.Token = strings.TrimSpace(os.Getenv("HF_TOKEN"))
	if o.Token == "" {
		o.Token = strings.TrimSpace(os.Getenv("HUGGING_FACE_HUB_TOKEN")) // the older name
	}
	if o.Token == "" {
		path := os.Getenv("HF_TOKEN_PATH")
		if path == "" {
			path = filepath.Join(home, "token") // what `huggingface-cli login` writes
		}
		if b, err := os.ReadFile(path); err == nil {
			o.Token = strings.TrimSpace(string(b))
		}
	}
	switch strings.ToLower(os.Getenv("HF_HUB_OFFLINE")) {
	case "1", "true", "yes", "on":
		o.Offline = true
	}
	o.StallTimeout = envSeconds("HF_HUB_DOWNLOAD_TIMEOUT", &o.envErr)
	o.RateWindow = envSeconds("HF_HUB_DOWNLOAD_RATE_WINDOW", &o.envErr)
	if v := os.Getenv("HF_HUB_DOWNLOAD_MIN_RATE"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			o.envErr = cmp.Or(o.envErr, fmt.Errorf("hub: HF_HUB_DOWNLOAD_MIN_RATE=%q is not a positive number of bytes a second", v))
		}
		o.MinRate = n
	}
	return o
}

// envSeconds reads a duration in seconds ("30", "2.5") from the variable
// name (0 when unset), recording the first unreadable one in errp.
func envSeconds(name string, errp *error) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || !(s > 0 && s <= maxSeconds) {
		*errp = cmp.Or(*errp, fmt.Errorf("hub: %s=%q is not a number of seconds (0 to %d)", name, v, maxSeconds))
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// Client talks to one Hub endpoint and one cache.
type Client struct {
	opts Options
	host string // the endpoint's host: the only one that gets the token
	http *http.Client
	// noMap makes parallel downloads write with WriteAt and hash by
	// reading parts back, as where the file cannot be mapped (tests).
	noMap bool
}

// New checks the options and builds a client.
func New(opts Options) (*Client, error) {
	if opts.envErr != nil {
		return nil, opts.envErr
	}
	if opts.Endpoint == "" {
		opts.Endpoint = DefaultEndpoint
	}
	opts.Endpoint = strings.TrimRight(opts.Endpoint, "/")
	ep, err := url.Parse(opts.Endpoint)
	if err != nil || (ep.Scheme != "http" && ep.Scheme != "https") || ep.Host == "" {
		return nil, fmt.Errorf("hub: endpoint %q is not an http(s) URL", opts.Endpoint)
	}
	if opts.CacheDir == "" {
		return nil, errors.New("hub: no cache directory (set HF_HUB_CACHE or HF_HOME)")
	}
	if opts.Workers <= 0 {
		opts.Workers = max(4, runtime.GOMAXPROCS(0))
	}
	if opts.Workers > MaxWorkers {
		return nil, fmt.Errorf("hub: %d workers is over the limit of %d parallel downloads", opts.Workers, MaxWorkers)
	}
	if opts.PartSize <= 0 || opts.PartSize > maxFileSize {
		opts.PartSize = 32 << 20
	}
	if opts.Retries <= 0 {
		opts.Retries = 5
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 30 * time.Second
	}
	if opts.MinRate <= 0 {
		opts.MinRate = 1 << 10
	}
	if opts.RateWindow <= 0 {
		opts.RateWindow = 60 * time.Second
	}
	hc := opts.HTTPClient
	if hc == nil {
		// HTTP/1.1 only: parallel parts get a TCP connection each, which
		// moves large files faster than streams multiplexed on one.
		var protos http.Protocols
		protos.SetHTTP1(true)
		hc = &http.Client{Transport: &http.Transport{
			Proxy:                  http.ProxyFromEnvironment,
			Protocols:              &protos,
			TLSHandshakeTimeout:    30 * time.Second,
			ResponseHeaderTimeout:  60 * time.Second,
			IdleConnTimeout:        90 * time.Second,
			MaxIdleConnsPerHost:    64,
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxHeaderBytes,
		}}
	}
	c := &Client{opts: opts, host: ep.Host}
	// Copy the client so the redirect policy (which strips credentials on
	// the way to another host) does not change the caller's.
	cp := *hc
	cp.CheckRedirect = c.checkRedirect
	c.http = &cp
	return c, nil
}

// checkRedirect follows up to 10 redirects and never sends the token to a
// host other than the endpoint's (a CDN gets a signed URL instead).
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("hub: too many redirects")
	}
	if err := checkLocation(req.URL); err != nil {
		return err
	}
	if req.URL.Host != c.host {
		req.Header.Del("Authorization")
	}
	return nil
}

// Errors a caller can tell apart with errors.Is.
var (
	ErrGated            = errors.New("gated repository")
	ErrUnauthorized     = errors.New("not authorized")
	ErrRepoNotFound     = errors.New("repository not found")
	ErrRevisionNotFound = errors.New("revision not found")
	ErrEntryNotFound    = errors.New("file not found in repository")
	ErrOffline          = errors.New("offline and not in the cache")
	ErrChecksum         = errors.New("checksum mismatch")
	// ErrStalled: a download received less than Options.MinRate over
	// Options.RateWindow, or no byte for Options.StallTimeout on every try.
	ErrStalled = errors.New("download stalled")
	// ErrUnreachable: the Hub could not be reached at all (DNS, a refused
	// or unreachable connection).
	ErrUnreachable = errors.New("cannot reach the Hub")
)

// RepoInfo is what the revision API says of a repo at a revision.
type RepoInfo struct {
	RepoID, Revision, Commit string
	Files                    []FileInfo
}

// FileInfo is one file of a repo.
type FileInfo struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// SHA256 is the LFS object id ("" for files kept in git).
	SHA256 string `json:"sha256,omitempty"`
	// BlobID is the git blob id (of the LFS pointer for LFS files).
	BlobID string `json:"blob_id,omitempty"`
}

// etag is the name of the file's blob in the cache, as huggingface_hub names it.
func (f FileInfo) etag() string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.BlobID
}

// Snapshot is a downloaded revision in the cache; Dir is
// snapshots/{commit}, whose files are links into blobs/.
type Snapshot struct {
	Dir      string     `json:"path"`
	RepoID   string     `json:"repo_id"`
	Revision string     `json:"revision"`
	Commit   string     `json:"commit"`
	Files    []FileInfo `json:"files"`
}

// DefaultInclude lists the files conversion needs (Snapshot's include nil).
func DefaultInclude() []string {
	return []string{"config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
		"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
		"chat_template.jinja", "added_tokens.json"}
}
