package serve

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Timeouts of the HTTP server: a client has this long to send its headers,
// and a connection idle this long is closed. Responses have no write
// timeout, as a generation streams for as long as it takes.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
)

// Serve answers on ln until ctx ends; then it stops accepting, gives the
// requests in flight (and those queued) grace to finish, cancels those still
// running (their generations stop at the next token) and returns nil once
// every handler has returned.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	var inFlight sync.WaitGroup
	h := s.Handler()
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inFlight.Add(1)
			defer inFlight.Done()
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          log.New(io.Discard, "", 0), // TLS probes and resets are not the operator's business
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		cancelRequests()
		hs.Close()
	}
	inFlight.Wait()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
