package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestManyClients sends 1,000 requests from 16 clients, a fifth of which
// disconnect at a random moment: every other request gets a well-formed
// answer, and afterwards no goroutine is left behind and the heap has not
// grown.
func TestManyClients(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 requests: skipped under -short")
	}
	s, ts := newTestServer(t, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	settle := func() (int, uint64) {
		client.CloseIdleConnections()
		ts.CloseClientConnections()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return runtime.NumGoroutine(), m.HeapInuse
	}
	// One request first, so that lazily started goroutines and buffers exist before counting.
	if err := oneRequest(context.Background(), client, ts.URL, 0); err != nil {
		t.Fatal(err)
	}
	goroutines, heap := settle()

	const requests, clients = 1000, 16
	var next, cancelled, answered atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for {
				i := int(next.Add(1))
				if i > requests {
					return
				}
				ctx, cancel := context.WithCancel(context.Background())
				disconnect := rng.IntN(5) == 0
				if disconnect {
					time.AfterFunc(time.Duration(rng.IntN(2000))*time.Microsecond, cancel)
				}
				err := oneRequest(ctx, client, ts.URL, i)
				cancel()
				switch {
				case err == nil:
					answered.Add(1)
				case disconnect && ctx.Err() != nil:
					cancelled.Add(1)
				default:
					t.Errorf("request %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if answered.Load()+cancelled.Load() != requests {
		t.Errorf("%d answered + %d cancelled of %d", answered.Load(), cancelled.Load(), requests)
	}
	t.Logf("%d answered, %d cancelled", answered.Load(), cancelled.Load())
	waitFor(t, "the queues to empty", func() bool {
		r1, w1 := load(s, "tiny")
		r2, w2 := load(s, "plain")
		return r1+w1+r2+w2 == 0
	})

	var nowG int
	var nowHeap uint64
	for range 100 {
		if nowG, nowHeap = settle(); nowG <= goroutines {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if nowG > goroutines {
		t.Errorf("%d goroutines after the run, %d before", nowG, goroutines)
	}
	if nowHeap > heap+16<<20 {
		t.Errorf("heap in use %d MiB after the run, %d MiB before", nowHeap>>20, heap>>20)
	}
}

// oneRequest sends the i-th request (chat or completion, streamed or not)
// and checks its answer's shape.
func oneRequest(ctx context.Context, client *http.Client, url string, i int) error {
	stream := i%2 == 0
	path, body := "/v1/completions", fmt.Sprintf(`{"model": "plain", "prompt": "the dog %d", "max_tokens": 2, "stream": %v}`, i, stream)
	if i%3 == 0 {
		path, body = "/v1/chat/completions", fmt.Sprintf(`{"model": "tiny", "messages": [{"role": "user", "content": "the cat %d"}], "max_tokens": 2, "stream": %v}`, i, stream)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	if !stream {
		var v struct {
			ID      string            `json:"id"`
			Choices []json.RawMessage `json:"choices"`
			Usage   *usage            `json:"usage"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.ID == "" || len(v.Choices) != 1 || v.Usage == nil || v.Usage.TotalTokens != v.Usage.PromptTokens+v.Usage.CompletionTokens {
			return fmt.Errorf("a malformed answer (%v): %s", err, b)
		}
		return nil
	}
	events := bytes.Split(bytes.TrimSpace(b), []byte("\n\n"))
	if len(events) < 2 || string(events[len(events)-1]) != "data: [DONE]" {
		return fmt.Errorf("a malformed stream: %q", b)
	}
	for _, e := range events[:len(events)-1] {
		data, ok := bytes.CutPrefix(e, []byte("data: "))
		var v struct {
			ID      string            `json:"id"`
			Choices []json.RawMessage `json:"choices"`
		}
		if !ok || json.Unmarshal(data, &v) != nil || v.ID == "" || len(v.Choices) != 1 {
			return fmt.Errorf("a malformed event: %q", e)
		}
	}
	return nil
}
