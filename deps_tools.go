//go:build tools

// This file pins the modules that packages under construction will import,
// so that go.mod stays stable while they are written. Remove when all are used.
package lowbit

import (
	_ "github.com/ebitengine/purego"
	_ "github.com/eliben/go-sentencepiece"
	_ "github.com/klauspost/compress/zip"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/nikolalohinski/gonja/v2"
	_ "github.com/schollz/progressbar/v3"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/term"
)
