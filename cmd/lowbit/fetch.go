package main

import (
	"context"
	"fmt"
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

// newHubClient builds the hub client from the environment (HF_ENDPOINT,
// HF_TOKEN, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_HUB_DOWNLOAD_TIMEOUT)
// and the flags. Progress bars go to progress, one-line notices (a cached
// snapshot used while the Hub is unreachable) to notices; nil silences
// either.
func newHubClient(offline bool, workers int, progress, notices io.Writer) (*hub.Client, error) {
	if workers > hub.MaxWorkers {
		return nil, fmt.Errorf("--workers %d is over the limit of %d", workers, hub.MaxWorkers)
	}
	opts := hub.OptionsFromEnv()
	opts.Offline = opts.Offline || offline
	if workers > 0 {
		opts.Workers = workers
	}
	opts.Progress, opts.Notices = progress, notices
	if notices == nil {
		opts.Notices = io.Discard
	}
	return hub.New(opts)
}

// newFetcher is newHubClient for the convert pipeline.
func newFetcher(offline bool, workers int, progress, notices io.Writer) (convert.Fetcher, error) {
	c, err := newHubClient(offline, workers, progress, notices)
	if err != nil {
		return nil, err
	}
	return hubFetcher{c}, nil
}
