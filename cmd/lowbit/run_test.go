package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lowbit/internal/testmodels"
)

// runIn executes the CLI with stdin and returns stdout and stderr apart.
func runIn(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// storiesCopy copies the stories260K HF directory, so a test can change its files.
func storiesCopy(t *testing.T, skip ...string) string {
	t.Helper()
	src := testmodels.Path(t, "stories260K-hf")
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
next:
	for _, e := range entries {
		for _, s := range skip {
			if e.Name() == s {
				continue next
			}
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestRunCompletion(t *testing.T) {
	dir := testmodels.Path(t, "stories260K-hf")
	golden, err := os.ReadFile(testmodels.Path(t, "stories260K/expected_greedy_200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "Once upon a time"
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, text, stop string)
	}{
		{"greedy equals the golden output", []string{"--temp", "0", "-n", "40"}, func(t *testing.T, text, stop string) {
			if stop != "max_tokens" || !strings.HasPrefix(string(golden), prompt+text) || len(text) < 100 {
				t.Errorf("stop %s, text %q", stop, text)
			}
		}},
		{"stop string", []string{"--temp", "0", "-n", "40", "--stop", "Lily"}, func(t *testing.T, text, stop string) {
			if stop != "stop_string" || !strings.HasPrefix(string(golden), prompt+text+"Lily") {
				t.Errorf("stop %s, text %q", stop, text)
			}
		}},
		{"escaped newline stop", []string{"--temp", "0", "-n", "100", "--stop", `\n`}, func(t *testing.T, text, stop string) {
			if stop != "stop_string" || strings.Contains(text, "\n") || !strings.HasPrefix(string(golden), prompt+text+"\n") {
				t.Errorf("stop %s, text %q", stop, text)
			}
		}},
		{"context end", []string{"--temp", "0", "-n", "0", "--ctx", "16"}, func(t *testing.T, text, stop string) {
			if stop != "context" || !strings.HasPrefix(string(golden), prompt+text) {
				t.Errorf("stop %s, text %q", stop, text)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run", dir, prompt, "--device", "cpu", "--json"}, c.args...)
			out, _, err := runIn(t, "", args...)
			if err != nil {
				t.Fatal(err)
			}
			var res runJSON
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("--json output %q: %v", out, err)
			}
			if res.Stats.PromptTokens != 5 || res.Stats.Device != "cpu" || res.Stats.WeightBytes <= 0 || res.Stats.KVCacheBytes <= 0 {
				t.Errorf("stats %+v", res.Stats)
			}
			c.check(t, res.Text, res.Stop)
		})
	}
}

func TestRunStreamsAndSeeds(t *testing.T) {
	dir := testmodels.Path(t, "stories260K-hf")
	args := []string{"run", dir, "Once upon a time", "--device", "cpu", "--temp", "0.9", "--top-p", "0.9", "--seed", "7", "-n", "24", "--stats"}
	out1, errOut, err := runIn(t, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	out2, _, err := runIn(t, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	if out1 != out2 || len(out1) < 20 {
		t.Errorf("seed 7 gave %q then %q", out1, out2)
	}
	for _, want := range []string{"load time", "prompt eval time", "eval time", "tokens per second", "KV cache", "seed 7"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("--stats output lacks %q:\n%s", want, errOut)
		}
	}
	other, _, err := runIn(t, "", append(args[:len(args)-5], "--seed", "8", "-n", "24")...)
	if err != nil {
		t.Fatal(err)
	}
	if other == out1 {
		t.Errorf("seeds 7 and 8 sampled the same text %q", other)
	}
}

func TestRunChat(t *testing.T) {
	dir := storiesCopy(t)
	cfg := `{"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true,
	  "chat_template": "{% for m in messages %}{{ bos_token if loop.first }}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runIn(t, "Once upon a time\n\nThe dog ran\n/reset\nThe cat sat\n/exit\nnever read\n",
		"run", dir, "--device", "cpu", "--temp", "0", "-n", "8", "--json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var turns []runJSON
	for dec.More() {
		var r runJSON
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		turns = append(turns, r)
	}
	if len(turns) != 3 || turns[0].Prompt != "Once upon a time" || turns[2].Prompt != "The cat sat" {
		t.Fatalf("turns %+v", turns)
	}
	// The second turn carries the first in its history, yet prefills only its new part;
	// after /reset the third starts over.
	if turns[1].Stats.PromptTokens >= turns[0].Stats.PromptTokens+8+10 {
		t.Errorf("second turn prefilled %d tokens: history not reused", turns[1].Stats.PromptTokens)
	}
	if turns[2].Stats.PromptTokens < 8 {
		t.Errorf("turn after /reset prefilled %d tokens", turns[2].Stats.PromptTokens)
	}
	for _, tr := range turns {
		if tr.Text == "" || tr.Stats.GenTokens == 0 {
			t.Errorf("empty reply %+v", tr)
		}
	}
}

func TestRunChatWithoutTemplate(t *testing.T) {
	dir := testmodels.Path(t, "stories260K-hf")
	out, errOut, err := runIn(t, "Once upon a time\n", "run", dir, "--device", "cpu", "--temp", "0", "-n", "8")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "no chat template") || len(strings.TrimSpace(out)) == 0 {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
}

func TestRunBadInput(t *testing.T) {
	noTok := storiesCopy(t, "tokenizer.model")
	badManifest := storiesCopy(t)
	if err := os.WriteFile(filepath.Join(badManifest, "manifest.json"), []byte(`{"format": "lowbit", `), 0o644); err != nil {
		t.Fatal(err)
	}
	badTemplate := storiesCopy(t)
	if err := os.WriteFile(filepath.Join(badTemplate, "tokenizer_config.json"), []byte(`{"chat_template": "{% for m in messages %}{{ m.content "}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := testmodels.Path(t, "stories260K-hf")
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"missing model", "", []string{"run", filepath.Join(t.TempDir(), "nope"), "hi"}, "no such directory"},
		{"missing tokenizer", "", []string{"run", noTok, "hi"}, "tokenizer"},
		{"corrupt manifest", "", []string{"run", badManifest, "hi"}, "manifest"},
		{"prompt beyond the context", "", []string{"run", dir, strings.Repeat("Once upon a time ", 40), "--ctx", "32"}, "context holds 32"},
		{"bad template", "hi\n", []string{"run", badTemplate}, "chat template"},
		{"bad device", "", []string{"run", dir, "hi", "--device", "tpu"}, "--device"},
		{"negative -n", "", []string{"run", dir, "hi", "-n", "-1"}, "-n -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runIn(t, c.stdin, append(c.args, "--offline")...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error mentioning %q", err, c.want)
			}
		})
	}
}
