// Package servetest loads the tiny fixture model as a scheduled runner, for
// the tests of the server and of its clients.
package servetest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"lowbit/chat"
	"lowbit/internal/fixture"
	"lowbit/model"
	"lowbit/sched"
	"lowbit/tokenizer"
)

// chatTemplateConfig gives a fixture model a chat template.
const chatTemplateConfig = `{"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true,
  "chat_template": "{% for m in messages %}{{ bos_token if loop.first }}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}`

// Options shape the runner's scheduler.
type Options struct {
	// Slots are the sequences generated at once (0: 1).
	Slots int
	// Queue and Lock are the scheduler's (sched.Options): a test holds
	// Lock to stop the steps, so that requests wait.
	Queue int
	Lock  sync.Locker
}

// Runner loads the fixture Llama (a context of 256 positions, on the CPU)
// and returns a runner scheduled on it, as lowbit serve makes one, and,
// when withTemplate, a chat template (else nil).
func Runner(t testing.TB, withTemplate bool, o Options) (*chat.Runner, *tokenizer.ChatTemplate) {
	t.Helper()
	dir := t.TempDir()
	if err := fixture.Llama().Write(dir); err != nil {
		t.Fatal(err)
	}
	if withTemplate {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(chatTemplateConfig), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(context.Background(), dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slots := max(o.Slots, 1)
	s, err := m.NewSession(model.SessionOptions{Slots: slots, Batch: 64 + slots})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sched.New(s, sched.Options{Chunk: 64, Queue: o.Queue, Lock: o.Lock})
	if err != nil {
		t.Fatal(err)
	}
	r, err := chat.NewScheduled(sc, tok)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := tokenizer.LoadChatTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r, tpl
}
