package hub

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseRevision feeds arbitrary revision API answers: no panic, and
// every accepted file path stays inside the snapshot.
func FuzzParseRevision(f *testing.F) {
	sha := strings.Repeat("a", 40)
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"config.json","size":3,"blobId":"` + sha + `"}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"m.safetensors","lfs":{"sha256":"` + strings.Repeat("b", 64) + `","size":9}}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"../x"}]}`))
	f.Add([]byte(`{"sha":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"m.safetensors","lfs":{"sha256":"` + strings.Repeat("b", 64) + `","size":9223372036854775807}}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"m","size":4611686018427387904},{"rfilename":"n","size":-1}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","cardData":{"a":[1,2,{"b":null}]},"siblings":[{},{"rfilename":"a/b"}],"siblings":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := parseRevision("org/m", "main", data)
		if err != nil {
			return
		}
		if !isHex(info.Commit, 40) || len(info.Files) > maxRepoFiles {
			t.Fatalf("accepted commit %q with %d files", info.Commit, len(info.Files))
		}
		for _, fi := range info.Files {
			if checkRelPath(fi.Path) != nil || fi.Size < 0 || fi.Size > maxFileSize {
				t.Fatalf("accepted file %+v", fi)
			}
			if fi.SHA256 != "" && !isHex(fi.SHA256, 64) {
				t.Fatalf("accepted sha256 %q", fi.SHA256)
			}
		}
	})
}

// FuzzFnmatch checks that matching never panics and that a pattern
// without wildcards matches only itself.
func FuzzFnmatch(f *testing.F) {
	f.Add("*.safetensors", "model.safetensors")
	f.Add("[!a-c]?x*", "dqxyz")
	f.Add("a[", "a[")
	f.Add("[]]", "]")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		got := fnmatch(pattern, name)
		if !strings.ContainsAny(pattern, "*?[") && got != (pattern == name) {
			t.Fatalf("fnmatch(%q, %q) = %v", pattern, name, got)
		}
		if fnmatch("*", name) != true {
			t.Fatalf("* does not match %q", name)
		}
	})
}

// FuzzParseRecord reads arbitrary part records: no panic, and accepted
// part indices are in range.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"part_size":65536,"done":[0,2]}`), int64(65536), 4)
	f.Add([]byte(`{"part_size":65536,"done":[9]}`), int64(65536), 4)
	f.Add([]byte(`nope`), int64(1), 1)
	f.Fuzz(func(t *testing.T, data []byte, ps int64, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		done, err := parseRecord(data, ps, n)
		if err == nil && len(done) != n {
			t.Fatalf("%d flags for %d parts", len(done), n)
		}
	})
}

// FuzzResponseHeaders feeds arbitrary headers to what reads them: the
// HEAD metadata (X-Linked-Etag, ETag, X-Linked-Size, Content-Length), a
// 206's Content-Range and a redirect's Location. No panic, and whatever is
// accepted is within bounds: a size nothing can overflow on, a range
// inside its total, a redirect to an http(s) host.
func FuzzResponseHeaders(f *testing.F) {
	oid := strings.Repeat("b", 64)
	f.Add(`"`+oid+`"`, `"`+strings.Repeat("c", 40)+`"`, "1234", int64(-1), "bytes 0-99/100", "https://cdn.example/x?sig=1")
	f.Add("", `W/"`+strings.Repeat("c", 40)+`"`, "", int64(4611686018427387904), "bytes 5-4/9", "ftp://x")
	f.Add(oid, "", "9223372036854775807", int64(0), "bytes 0-99999999999999999999/*", "http:///x")
	f.Add(oid, "", "-1", int64(7), "bytes -1-5/9", "/relative")
	f.Fuzz(func(t *testing.T, linkedEtag, etag, linkedSize string, contentLength int64, contentRange, location string) {
		h := http.Header{}
		for k, v := range map[string]string{"X-Linked-Etag": linkedEtag, "Etag": etag, "X-Linked-Size": linkedSize} {
			if v != "" {
				h.Set(k, v)
			}
		}
		if fi, err := fileMeta(FileInfo{Path: "m"}, h, contentLength); err == nil {
			if fi.Size < 0 || fi.Size > maxFileSize || !isHex(fi.etag(), 64) && !isHex(fi.etag(), 40) {
				t.Fatalf("accepted %+v", fi)
			}
		}
		if first, last, total, err := parseContentRange(contentRange); err == nil {
			if first < 0 || last < first || total != -1 && total <= last {
				t.Fatalf("accepted %q as %d-%d/%d", contentRange, first, last, total)
			}
			if checkRange(contentRange, first, last+1, max(total, last+1)) != nil {
				t.Fatalf("%q does not fit the range it names", contentRange)
			}
		}
		if u, err := url.Parse(location); err == nil && checkLocation(u) == nil {
			if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
				t.Fatalf("accepted a redirect to %q", location)
			}
		}
	})
}
