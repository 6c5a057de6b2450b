package testmodels

import (
	"os"
	"testing"
)

func TestPathFindsStories(t *testing.T) {
	p := Path(t, "stories260K-hf/config.json")
	if st, err := os.Stat(p); err != nil || st.Size() == 0 {
		t.Fatalf("stat %s: %v", p, err)
	}
}
