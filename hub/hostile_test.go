package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"lowbit/hub/hubtest"
)

// hostileHub is a Hub that answers the revision API of any repo with
// revision and every resolve URL with resolve (nil: 404).
func hostileHub(t *testing.T, revision, resolve http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/models/"):
			revision(w, r)
		case resolve != nil:
			resolve(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hostileOptions retry once, soon; the stall limits are long, for cases
// that a slow machine must not end by a stall instead (TestTrickle sets
// short ones).
func hostileOptions(endpoint, cache string) Options {
	return Options{Endpoint: endpoint, CacheDir: cache, Workers: 4, PartSize: 64 << 10, Retries: 2}
}

// expectFailure downloads org/m with o and wants an error saying each of
// wants, reached on its own (not by the test's guard deadline), with under
// 300 MiB allocated on the way (by the whole process: parallel subtests
// allocate little).
func expectFailure(t *testing.T, o Options, wants ...string) error {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = c.Snapshot(ctx, "org/m", "main", nil)
	runtime.ReadMemStats(&after)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("err = %v, want an error of its own", err)
	}
	t.Log(err)
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err = %v\nwant it to say %q", err, w)
		}
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 300<<20 {
		t.Errorf("allocated %d MiB", n>>20)
	}
	if len(err.Error()) > 1000 {
		t.Errorf("an error of %d bytes", len(err.Error()))
	}
	return err
}

var (
	testCommit = strings.Repeat("a", 40)
	testOID    = strings.Repeat("b", 64)
)

// revisionBody is a revision API answer listing siblings (JSON objects).
func revisionBody(siblings ...string) string {
	return `{"sha":"` + testCommit + `","siblings":[` + strings.Join(siblings, ",") + `]}`
}

func serve(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }
}

// TestHostileRevision feeds revision API answers that announce impossible
// sizes, too many files, escaping paths or too many bytes: each ends in
// an error naming the field and the limit, before anything is sized by it.
func TestHostileRevision(t *testing.T) {
	lfs := func(size string) string {
		return `{"rfilename":"model.safetensors","lfs":{"sha256":"` + testOID + `","size":` + size + `}}`
	}
	plain := func(size string) string {
		return `{"rfilename":"model.safetensors","size":` + size + `,"blobId":"` + testCommit + `"}`
	}
	named := func(path string) string { return `{"rfilename":` + strconv.Quote(path) + `,"size":1}` }
	var many strings.Builder
	many.WriteString(`{"sha":"` + testCommit + `","siblings":[`)
	for i := range maxRepoFiles + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"rfilename":"f%d"}`, i)
	}
	many.WriteString(`]}`)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"lfs.size 2^63-1", serve(revisionBody(lfs("9223372036854775807"))), "file model.safetensors: lfs.size 9223372036854775807 is over the 1.00 TiB limit on one file"},
		{"lfs.size 2^62", serve(revisionBody(lfs("4611686018427387904"))), "lfs.size 4611686018427387904 is over the 1.00 TiB limit"},
		{"lfs.size negative", serve(revisionBody(lfs("-1"))), "lfs.size -1 is negative"},
		{"size 2^63-1", serve(revisionBody(plain("9223372036854775807"))), "file model.safetensors: size 9223372036854775807 is over the 1.00 TiB limit"},
		{"size negative", serve(revisionBody(plain("-5"))), "size -5 is negative"},
		{"size past int64", serve(revisionBody(plain("18446744073709551616"))), "number 18446744073709551616 into Go struct field sibling.size"},
		{"size fractional", serve(revisionBody(plain("1.5"))), "sibling.size"},
		{"size as text", serve(revisionBody(plain(`"12"`))), "sibling.size"},
		{"too many files", serve(many.String()), "lists over 100000 files"},
		{"path with ..", serve(revisionBody(named("a/../../etc/passwd"))), `file path "a/../../etc/passwd" is not a plain relative path`},
		{"absolute path", serve(revisionBody(named("/etc/passwd"))), `file path "/etc/passwd" is not a relative path`},
		{"long path", serve(revisionBody(named(strings.Repeat("a", 5000)))), "is over the 4096-byte limit"},
		{"huge sha", serve(`{"sha":"` + strings.Repeat("z", 1<<20) + `"}`), "gave no commit sha (got \"zzzz"},
		{"body over the limit", serve(`{"x":"` + strings.Repeat(" ", maxAPIBody) + `"}`), "the answer is over the 32.0 MiB limit"},
		{"Content-Length over the limit", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(1<<40))
			w.WriteHeader(http.StatusOK)
		}, "the answer is over the 32.0 MiB limit (Content-Length 1099511627776)"},
		{"not an object", serve(`[]`), "want an object"},
		{"siblings not a list", serve(`{"sha":"` + testCommit + `","siblings":{}}`), "siblings: a list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := hostileHub(t, tc.handler, nil)
			expectFailure(t, hostileOptions(srv.URL, t.TempDir()), "hub: revision API for org/m@main", tc.want)
		})
	}
}

// TestHostileHeaders answers the HEAD a client makes for a file the
// revision API lists without hashes with impossible sizes and etags.
func TestHostileHeaders(t *testing.T) {
	sha1 := strings.Repeat("c", 40)
	tests := []struct {
		name   string
		header map[string]string
		want   string
	}{
		{"X-Linked-Size 2^63-1", map[string]string{"X-Linked-Etag": testOID, "X-Linked-Size": "9223372036854775807"}, "X-Linked-Size 9223372036854775807 is over the 1.00 TiB limit on one file"},
		{"X-Linked-Size 2^62", map[string]string{"X-Linked-Etag": testOID, "X-Linked-Size": "4611686018427387904"}, "X-Linked-Size 4611686018427387904 is over the 1.00 TiB limit"},
		{"X-Linked-Size negative", map[string]string{"X-Linked-Etag": testOID, "X-Linked-Size": "-1"}, "X-Linked-Size -1 is negative"},
		{"X-Linked-Size garbage", map[string]string{"X-Linked-Etag": testOID, "X-Linked-Size": "12abc"}, `X-Linked-Size "12abc" is not a byte count`},
		{"X-Linked-Size past int64", map[string]string{"X-Linked-Etag": testOID, "X-Linked-Size": "99999999999999999999"}, "X-Linked-Size \"99999999999999999999\" is not a byte count"},
		{"Content-Length 2^62", map[string]string{"ETag": sha1, "Content-Length": "4611686018427387904"}, "Content-Length 4611686018427387904 is over the 1.00 TiB limit"},
		{"Content-Length garbage", map[string]string{"ETag": sha1, "Content-Length": "12abc"}, `bad Content-Length "12abc"`},
		{"X-Linked-Etag not a sha256", map[string]string{"X-Linked-Etag": "zz", "X-Linked-Size": "5"}, `X-Linked-Etag "zz" is not a sha256`},
		{"X-Linked-Etag huge", map[string]string{"X-Linked-Etag": strings.Repeat("e", 100<<10), "X-Linked-Size": "5"}, "… (102400 bytes)"},
		{"no etag", map[string]string{"Content-Length": "5"}, "the Hub gave no usable etag"},
		{"headers over the limit", map[string]string{"X-Filler": strings.Repeat("f", 2<<20)}, "server response headers exceeded 1048576 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := hostileHub(t, serve(revisionBody(`{"rfilename":"model.safetensors"}`)), func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header()[k] = []string{v} // as sent, not canonicalised or checked
				}
				w.WriteHeader(http.StatusOK)
			})
			expectFailure(t, hostileOptions(srv.URL, t.TempDir()), "org/m/model.safetensors", tc.want)
		})
	}
}

// TestHostileDownload answers the file's GETs with ranges, lengths and
// redirects that do not fit the file the revision API listed.
func TestHostileDownload(t *testing.T) {
	data := randomBytes(200_000, 9)
	sum := sha256.Sum256(data)
	rev := serve(revisionBody(fmt.Sprintf(`{"rfilename":"model.safetensors","lfs":{"sha256":"%s","size":%d}}`, hex.EncodeToString(sum[:]), len(data))))
	partial := func(cr string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", cr)
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[:100])
		}
	}
	redirect := func(loc string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", loc)
			w.WriteHeader(http.StatusFound)
		}
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"Content-Range elsewhere", partial("bytes 5-104/200000"), `got Content-Range "bytes 5-104/200000"`},
		{"Content-Range garbage", partial("bytes x-y/z"), `Content-Range "bytes x-y/z" is not "bytes first-last/total"`},
		{"Content-Range other total", partial("bytes 0-99/999"), `of 200000, got Content-Range "bytes 0-99/999"`},
		{"Content-Range past the file", partial("bytes 0-9999999999/99999999999"), "got Content-Range"},
		{"Content-Range huge numbers", partial("bytes 0-99999999999999999999/*"), "is not \"bytes first-last/total\""},
		{"whole file of another length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(1<<40))
			w.WriteHeader(http.StatusOK)
		}, "the whole file came with Content-Length 1099511627776, the Hub lists 200000 bytes"},
		{"redirect to ftp", redirect("ftp://example.com/x"), `redirect to "ftp://example.com/x": not an http(s) URL`},
		{"redirect without a host", redirect("http:///x"), "not an http(s) URL"},
		{"redirect garbage", redirect("http://[::1"), `failed to parse Location header "http://[::1"`},
		{"redirect loop", redirect("/org/m/resolve/x"), "too many redirects"},
		{"redirect to a huge URL", redirect("http://127.0.0.1:1/" + strings.Repeat("p", 100<<10) + "?sig=secret"), `Get "http://127.0.0.1:1/pppp`},
		{"status line huge", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Error-Message", strings.Repeat("m", 100<<10))
			w.WriteHeader(http.StatusForbidden)
		}, "403 Forbidden: not authorized"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := hostileHub(t, rev, tc.handler)
			for _, parts := range []int64{64 << 10, 1 << 30} { // parallel parts, one stream
				o := hostileOptions(srv.URL, t.TempDir())
				o.PartSize = parts
				expectFailure(t, o, "org/m", tc.want)
			}
		})
	}
}

// TestTrickle serves the file through servers that stall after a few
// bytes per request or trickle it far slower than any link: each ends in
// ErrStalled, by the rate watchdog or by running out of retries (which
// once reset on every byte); a slow but real rate completes.
func TestTrickle(t *testing.T) {
	tests := []struct {
		name          string
		faults        hubtest.Faults
		stall, window time.Duration
		want          []string // none: success
	}{
		{"a few bytes per request, then a stall", hubtest.Faults{StallAfter: 10}, time.Second, 300 * time.Millisecond,
			[]string{"download stalled: under 1.0 KiB/s for 300ms (", "arrived; HF_HUB_DOWNLOAD_MIN_RATE and HF_HUB_DOWNLOAD_RATE_WINDOW set the limit)"}},
		{"a few bytes per request, retried", hubtest.Faults{StallAfter: 10}, 100 * time.Millisecond, time.Hour,
			[]string{"after 2 attempts that brought under 3.5 MiB each: download stalled: no data from the server for 100ms (HF_HUB_DOWNLOAD_TIMEOUT)"}},
		{"a trickle", hubtest.Faults{Rate: 200}, time.Second, 300 * time.Millisecond, []string{"download stalled: under 1.0 KiB/s for 300ms"}},
		{"slow but real", hubtest.Faults{Rate: 4 << 20}, time.Second, 300 * time.Millisecond, nil},
	}
	for _, tc := range tests {
		for _, parts := range []int64{64 << 10, 1 << 30} {
			t.Run(fmt.Sprintf("%s/parts %d", tc.name, parts), func(t *testing.T) {
				t.Parallel()
				repo := testRepo()
				s := hubtest.Start(t, map[string]*hubtest.Repo{"org/m": repo})
				f := tc.faults
				s.SetFaults("model.safetensors", &f)
				o := hostileOptions(s.Hub.URL, t.TempDir())
				o.PartSize = parts
				o.StallTimeout, o.MinRate, o.RateWindow = tc.stall, 1<<10, tc.window
				if tc.want == nil {
					c, _ := New(o)
					if _, err := c.Snapshot(context.Background(), "org/m", "main", nil); err != nil {
						t.Fatal(err)
					}
					return
				}
				err := expectFailure(t, o, append(tc.want, "org/m/model.safetensors")...)
				if !errors.Is(err, ErrStalled) {
					t.Errorf("not ErrStalled: %v", err)
				}
			})
		}
	}
}

// TestPlanParts keeps the parts of any allowed size under maxParts.
func TestPlanParts(t *testing.T) {
	tests := []struct {
		size, partSize, wantPS int64
		wantN                  int
	}{
		{300_000, 64 << 10, 64 << 10, 5},
		{0, 64 << 10, 64 << 10, 0},
		{maxFileSize, 32 << 20, 32 << 20, 32768},
		{maxFileSize, 1, maxFileSize / maxParts, maxParts},
		{maxFileSize - 1, 1, maxFileSize / maxParts, maxParts},
		{5, 0, 1, 5},
	}
	for _, tc := range tests {
		if ps, n := planParts(tc.size, tc.partSize); ps != tc.wantPS || n != tc.wantN {
			t.Errorf("planParts(%d, %d) = %d, %d; want %d, %d", tc.size, tc.partSize, ps, n, tc.wantPS, tc.wantN)
		}
	}
}

// TestNoSpace announces a file of the largest allowed size: unless the
// disk has that much free, the download is refused before it starts.
func TestNoSpace(t *testing.T) {
	cache := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(cache, &st); err != nil || uint64(st.Bavail)*uint64(st.Bsize) >= maxFileSize || st.Blocks == 0 {
		t.Skip("the temp dir has 1 TiB free, or no size")
	}
	srv := hostileHub(t, serve(revisionBody(`{"rfilename":"model.safetensors","lfs":{"sha256":"`+testOID+`","size":`+strconv.Itoa(maxFileSize)+`}}`)), nil)
	expectFailure(t, hostileOptions(srv.URL, cache), "hub: org/m@main: the download needs 1.00 TiB in", "free")
}

// TestHugeRecord leaves a part record far over maxRecordSize: it is not
// read whole, and the download starts over and completes.
func TestHugeRecord(t *testing.T) {
	repo := testRepo()
	s := hubtest.Start(t, map[string]*hubtest.Repo{"org/model": repo})
	c, cache := newClient(t, s, nil)
	data := repo.Files["model.safetensors"]
	part := cache + "/models--org--model/blobs/" + etagOf(s, "model.safetensors", data) + ".incomplete"
	if err := mkdirWrite(part+".parts", []byte(`{"part_size":65536,"done":[`+strings.Repeat("0,", maxRecordSize)+`0]}`)); err != nil {
		t.Fatal(err)
	}
	if err := mkdirWrite(part, data); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(context.Background(), "org/model", "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, snap.Dir+"/model.safetensors", data)
}

// TestLimitsFromEnv reads the download limits from the environment, and
// refuses values that are not numbers of seconds or bytes.
func TestLimitsFromEnv(t *testing.T) {
	tests := []struct {
		timeout, rate, window string
		want                  Options // the three limits
		err                   string
	}{
		{"", "", "", Options{}, ""},
		{"2.5", "2048", "10", Options{StallTimeout: 2500 * time.Millisecond, MinRate: 2048, RateWindow: 10 * time.Second}, ""},
		{"abc", "", "", Options{}, `HF_HUB_DOWNLOAD_TIMEOUT="abc" is not a number of seconds`},
		{"", "", "-3", Options{}, `HF_HUB_DOWNLOAD_RATE_WINDOW="-3" is not a number of seconds`},
		{"1e300", "", "", Options{}, `HF_HUB_DOWNLOAD_TIMEOUT="1e300" is not a number of seconds (0 to 86400)`},
		{"", "1.5", "", Options{}, `HF_HUB_DOWNLOAD_MIN_RATE="1.5" is not a positive number of bytes a second`},
	}
	for _, tc := range tests {
		t.Setenv("HF_HUB_CACHE", t.TempDir())
		t.Setenv("HF_HUB_DOWNLOAD_TIMEOUT", tc.timeout)
		t.Setenv("HF_HUB_DOWNLOAD_MIN_RATE", tc.rate)
		t.Setenv("HF_HUB_DOWNLOAD_RATE_WINDOW", tc.window)
		o := OptionsFromEnv()
		_, err := New(o)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err = %v, want %q", tc, err, tc.err)
			}
			continue
		}
		if err != nil || o.StallTimeout != tc.want.StallTimeout || o.MinRate != tc.want.MinRate || o.RateWindow != tc.want.RateWindow {
			t.Errorf("%+v: %v, %v, %v (%v)", tc, o.StallTimeout, o.MinRate, o.RateWindow, err)
		}
	}
}
