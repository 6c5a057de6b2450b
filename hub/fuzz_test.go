package hub

import (
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
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := parseRevision("org/m", "main", data)
		if err != nil {
			return
		}
		for _, fi := range info.Files {
			if checkRelPath(fi.Path) != nil || fi.Size < 0 {
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
