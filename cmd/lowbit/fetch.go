package main

import (
	"context"
	"io"

	"lowbit/convert"
	"lowbit/hub"
)

// hubFetcher lets the convert pipeline download through the hub client.
type hubFetcher struct{ c *hub.Client }

func (f hubFetcher) Fetch(ctx context.Context, repoID, revision string) (*convert.Snapshot, error) {
	s, err := f.c.Snapshot(ctx, repoID, revision, nil)
	if err != nil {
		return nil, err
	}
	return &convert.Snapshot{Dir: s.Dir, RepoID: s.RepoID, Revision: s.Revision, Commit: s.Commit}, nil
}

// newFetcher builds the hub client from the environment (HF_ENDPOINT,
// HF_TOKEN, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE) and the flags.
func newFetcher(offline bool, workers int, progress io.Writer) (convert.Fetcher, error) {
	opts := hub.OptionsFromEnv()
	if offline {
		opts.Offline = true
	}
	if workers > 0 {
		opts.Workers = workers
	}
	opts.Progress = progress
	c, err := hub.New(opts)
	if err != nil {
		return nil, err
	}
	return hubFetcher{c}, nil
}
