package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"lowbit/serve"
	"lowbit/serve/loadgen"
	"lowbit/serve/servetest"
)

func TestServeFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--parallel", "0"}, "--parallel 0: want 1 to 512"},
		{[]string{"--parallel", "600"}, "--parallel 600: want 1 to 512"},
		{[]string{"--parallel", "64", "--chunk", "500"}, "--chunk 500 with --parallel 64: a step would hold 563 tokens, over 512; lower one of them"},
		{[]string{"--chunk", "-1"}, "--chunk -1: want 1 or more"},
		{[]string{"--kv-budget", "lots"}, `--kv-budget "lots": want a size such as 8GiB or 512MB`},
		{[]string{"--queue", "0"}, "--queue 0: want 1 or more"},
		{[]string{"--port", "70000"}, "--port 70000: want 0 to 65535"},
		{[]string{"--max-body", "0"}, "--max-body 0: want 1 or more"},
	}
	for _, c := range cases {
		_, err := run(t, append([]string{"serve", "no-such-model"}, c.args...)...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestServeSIGTERM runs lowbit serve as a child process: it answers, logs
// each request, and on SIGTERM stops and exits 0.
func TestServeSIGTERM(t *testing.T) {
	dir := chatFixture(t, 256)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Each position of the fixture's cache takes 384 bytes: 200 KiB hold
	// 133 positions for each of 4 slots.
	cmd := exec.Command(self, "serve", dir, "--port", "0", "--device", "cpu", "--json", "--parallel", "4", "--kv-budget", "200KiB")
	cmd.Env = append(os.Environ(), asLowbit+"=1", apiKeyEnv+"=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	listening := regexp.MustCompile(`serving 1 model\(s\) on (http://\S+)/v1`)
	var base string
	slots := false
	for base == "" && lines.Scan() {
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
		}
		slots = slots || strings.Contains(lines.Text(), ": 4 slot(s) of 133 positions, KV cache 199.5 KiB")
	}
	if !slots {
		t.Error("no line telling the slots")
	}
	if base == "" {
		t.Fatalf("no listening line: %v", lines.Err())
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model": "`+dir+`", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"object":"chat.completion"`) {
		t.Fatalf("%s: %s", resp.Status, body)
	}
	if !lines.Scan() {
		t.Fatal("no log line")
	}
	var entry struct {
		Method, Path     string
		Status           int
		CompletionTokens int      `json:"completion_tokens"`
		TTFT             *float64 `json:"ttft_ms"`
		ITL              *float64 `json:"itl_ms"`
	}
	if err := json.Unmarshal(lines.Bytes(), &entry); err != nil || entry.Path != "/v1/chat/completions" || entry.Status != 200 || entry.CompletionTokens != 2 ||
		entry.TTFT == nil || !(*entry.TTFT > 0) || entry.ITL == nil {
		t.Errorf("log line %q: %v", lines.Text(), err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v\n%s", err, rest)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lowbit serve did not stop after SIGTERM")
	}
	if !strings.Contains(string(rest), "lowbit: stopped") {
		t.Errorf("stderr after SIGTERM: %q", rest)
	}
}

func TestLoadtest(t *testing.T) {
	r, tpl := servetest.Runner(t, true, servetest.Options{Slots: 4})
	srv, err := serve.New([]serve.Model{{Name: "tiny", Runner: r, Template: tpl}}, serve.Options{APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	t.Setenv(apiKeyEnv, "k")
	args := []string{"loadtest", ts.URL, "-n", "6", "-c", "3", "--prompt-words", "5", "--max-tokens", "3"}
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Successful requests:                 6", "Failed requests:                     0", "------------- Time to First Token --------------", "P99 ITL (ms):"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var rep loadgen.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Completed != 6 || rep.Model != "tiny" {
		t.Errorf("--json: %v %+v", err, rep)
	}
}

// FuzzKVBudget: any --kv-budget is a size of 0 or more, or an error
// naming the flag.
func FuzzKVBudget(f *testing.F) {
	for _, s := range []string{"8GiB", "512MB", "1.5 gib", "0", "", "12", "1e9", "-3GB", "99999999999999999999EiB", "GiB", ".", "1,000kb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := kvBudget(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--kv-budget ") {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("%q: %d bytes", s, n)
		}
	})
}

func TestKVBudget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{{"", 0}, {"8GiB", 8 << 30}, {"512MB", 512e6}, {"200KiB", 200 << 10}, {"1024", 1024}} {
		if got, err := kvBudget(tc.in); err != nil || got != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
