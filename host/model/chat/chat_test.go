package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func loadTemplate(t testing.TB, name, bos, eos string) *Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	tmpl, err := New(string(src), bos, eos)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return tmpl
}

func msgs(pairs ...string) []Message {
	out := make([]Message, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Message{Role: pairs[i], Content: pairs[i+1]})
	}
	return out
}

func TestRenderRealTemplates(t *testing.T) {
	const (
		llama3BOS = "<|begin_of_text|>"
		llama3EOS = "<|eot_id|>"
		qwenSys   = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
	)
	tests := []struct {
		name      string
		file      string
		bos, eos  string
		msgs      []Message
		genPrompt bool
		want      string
	}{
		{
			name: "llama3 system+user trims content",
			file: "llama3-instruct.jinja", bos: llama3BOS, eos: llama3EOS,
			msgs:      msgs("system", "You are terse.", "user", "  Hi there \n"),
			genPrompt: true,
			want: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name: "llama3 multi-turn without generation prompt",
			file: "llama3-instruct.jinja", bos: llama3BOS, eos: llama3EOS,
			msgs: msgs("user", "2+2?", "assistant", "4", "user", "and 3+3?"),
			want: "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nand 3+3?<|eot_id|>",
		},
		{
			name: "qwen2.5 default system prompt",
			file: "qwen2.5-instruct.jinja", bos: "", eos: "<|im_end|>",
			msgs:      msgs("user", "Hello"),
			genPrompt: true,
			want:      qwenSys + "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "qwen2.5 own system, multi-turn",
			file: "qwen2.5-instruct.jinja", bos: "", eos: "<|im_end|>",
			msgs: msgs("system", "Be brief.", "user", "Hi", "assistant", "Hello!", "user", "Bye"),
			want: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n" +
				"<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n",
		},
		{
			name: "mistral alternating turns",
			file: "mistral-instruct.jinja", bos: "<s>", eos: "</s>",
			msgs:      msgs("user", "Hi", "assistant", "Hello", "user", "Bye"),
			genPrompt: true, // the template ignores it: [/INST] is the generation prompt
			want:      "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]",
		},
		{
			name: "llama2 system folded into first user turn, content stripped",
			file: "llama2-chat.jinja", bos: "<s>", eos: "</s>",
			msgs:      msgs("system", "Be nice.", "user", " Hi ", "assistant", "Hello ", "user", "Bye"),
			genPrompt: true,
			// strip() applies to the whole folded content, so the space
			// before "Hi" survives; the trailing one goes.
			want: "<s>[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\n Hi [/INST] Hello </s><s>[INST] Bye [/INST]",
		},
		{
			name: "llama2 without system",
			file: "llama2-chat.jinja", bos: "<s>", eos: "</s>",
			msgs: msgs("user", "Hi"),
			want: "<s>[INST] Hi [/INST]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := loadTemplate(t, tc.file, tc.bos, tc.eos)
			got, err := tmpl.Render(tc.msgs, tc.genPrompt)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tc.want {
				t.Errorf("Render mismatch\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}

// The Llama 3.2 template stamps today's date through strftime_now.
func TestRenderStrftimeNow(t *testing.T) {
	tmpl := loadTemplate(t, "llama3.2-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>")
	before := time.Now().Format("02 Jan 2006")
	got, err := tmpl.Render(msgs("system", "Be brief.", "user", "Hi"), true)
	after := time.Now().Format("02 Jan 2006")
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	want := func(date string) string {
		return "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
			"Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" +
			"Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"
	}
	if got != want(before) && got != want(after) {
		t.Errorf("Render mismatch\n got: %q\nwant: %q", got, want(before))
	}
}

func TestRenderRaiseException(t *testing.T) {
	tests := []struct {
		name, file string
		msgs       []Message
		wantMsg    string
	}{
		{"mistral system role", "mistral-instruct.jinja", msgs("system", "x", "user", "y"),
			"Conversation roles must alternate user/assistant/user/assistant/..."},
		{"mistral user twice", "mistral-instruct.jinja", msgs("user", "a", "user", "b"),
			"Conversation roles must alternate user/assistant/user/assistant/..."},
		{"mistral tool role", "mistral-instruct.jinja", msgs("user", "a", "tool", "b"),
			"Only user and assistant roles are supported!"},
		{"llama2 assistant first", "llama2-chat.jinja", msgs("assistant", "a"),
			"Conversation roles must alternate user/assistant/user/assistant/..."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := loadTemplate(t, tc.file, "<s>", "</s>")
			out, err := tmpl.Render(tc.msgs, true)
			if err == nil {
				t.Fatalf("Render succeeded with %q, want error", out)
			}
			var re *RenderError
			if !errors.As(err, &re) || re.Panicked {
				t.Fatalf("error %v (%T) is not a plain *RenderError", err, err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) || !strings.HasPrefix(err.Error(), "chat: render template: ") {
				t.Errorf("error %q does not carry %q with the package prefix", err, tc.wantMsg)
			}
		})
	}
}

func TestNewCompileError(t *testing.T) {
	for _, src := range []string{
		"{% for m in messages %}{{ m.content }}",      // unclosed for
		"{{ messages[0].content ",                     // unclosed expression
		"{% if add_generation_prompt %}x{% endfor %}", // mismatched end
	} {
		tmpl, err := New(src, "", "")
		if err == nil {
			t.Errorf("New(%q) = %v, want error", src, tmpl)
			continue
		}
		var ce *CompileError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "chat: compile template: ") {
			t.Errorf("New(%q) error %v (%T), want *CompileError with prefix", src, err, err)
		}
	}
}

func TestFallback(t *testing.T) {
	for _, src := range []string{"", "  \n\t"} {
		tmpl, err := New(src, "<s>", "</s>")
		if err != nil {
			t.Fatalf("New(%q): %v", src, err)
		}
		if !tmpl.IsFallback() || tmpl.BOS() != "<s>" || tmpl.EOS() != "</s>" {
			t.Fatalf("New(%q): fallback=%v bos=%q eos=%q", src, tmpl.IsFallback(), tmpl.BOS(), tmpl.EOS())
		}
		got, err := tmpl.Render(msgs("system", "Be brief.", "user", "Hi", "assistant", "Hello", "user", "Bye"), true)
		if err != nil {
			t.Fatal(err)
		}
		want := "system: Be brief.\nuser: Hi\nassistant: Hello\nuser: Bye\nassistant:"
		if got != want {
			t.Errorf("fallback\n got: %q\nwant: %q", got, want)
		}
		got, err = tmpl.Render(msgs("user", "Hi"), false)
		if err != nil {
			t.Fatal(err)
		}
		if want := "user: Hi\n"; got != want {
			t.Errorf("fallback without generation prompt: got %q want %q", got, want)
		}
	}
	real := loadTemplate(t, "llama2-chat.jinja", "<s>", "</s>")
	if real.IsFallback() {
		t.Error("a real template reports IsFallback")
	}
}

func TestRenderNoMessages(t *testing.T) {
	tmpl := loadTemplate(t, "qwen2.5-instruct.jinja", "", "<|im_end|>")
	if _, err := tmpl.Render(nil, true); !errors.Is(err, ErrNoMessages) {
		t.Fatalf("Render(nil) error %v, want ErrNoMessages", err)
	}
}

// Templates render concurrently (run with -race).
func TestRenderConcurrent(t *testing.T) {
	tmpl := loadTemplate(t, "qwen2.5-instruct.jinja", "", "<|im_end|>")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			content := strings.Repeat("x", g)
			want := "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
				"<|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n"
			for i := 0; i < 50; i++ {
				got, err := tmpl.Render(msgs("user", content), true)
				if err != nil || got != want {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent render mismatch (err=%v)", err)
	}
}

// Message contents are data, never template source: a content that looks like
// Jinja is copied verbatim.
func TestRenderContentIsNotTemplate(t *testing.T) {
	tmpl := loadTemplate(t, "llama3-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>")
	content := "{{ raise_exception('boom') }}{% for x in y %}"
	got, err := tmpl.Render(msgs("user", content), false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, content) {
		t.Errorf("content not verbatim in %q", got)
	}
}

func FuzzRender(f *testing.F) {
	files := []struct{ name, bos, eos string }{
		{"llama3-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"},
		{"qwen2.5-instruct.jinja", "", "<|im_end|>"},
		{"mistral-instruct.jinja", "<s>", "</s>"},
		{"llama2-chat.jinja", "<s>", "</s>"},
		{"llama3.2-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"},
	}
	tmpls := []*Template{}
	for _, fl := range files {
		tmpls = append(tmpls, loadTemplate(f, fl.name, fl.bos, fl.eos))
	}
	fb, err := New("", "<s>", "</s>")
	if err != nil {
		f.Fatal(err)
	}
	tmpls = append(tmpls, fb)

	f.Add("user", "Hi", "assistant", "Hello", uint8(2), true)
	f.Add("system", "{{ x }}", "user", "\xff\xfe", uint8(3), false)
	f.Add("tool", "", "", "{% endfor %}", uint8(1), true)
	f.Add("ipython", "{\"a\":1}", "assistant", "  ", uint8(4), true)
	f.Fuzz(func(t *testing.T, r1, c1, r2, c2 string, n uint8, gen bool) {
		// Build 1..8 messages cycling through the two fuzzed (role, content) pairs.
		count := int(n%8) + 1
		ms := make([]Message, count)
		for i := range ms {
			if i%2 == 0 {
				ms[i] = Message{Role: r1, Content: c1}
			} else {
				ms[i] = Message{Role: r2, Content: c2}
			}
		}
		for i, tmpl := range tmpls {
			out, err := tmpl.Render(ms, gen)
			var re *RenderError
			if errors.As(err, &re) && re.Panicked {
				t.Fatalf("template %d: the template engine panicked: %v", i, err)
			}
			if err != nil && !errors.As(err, &re) {
				t.Fatalf("template %d: error %v (%T) is not a *RenderError", i, err, err)
			}
			if tmpl.IsFallback() {
				if err != nil {
					t.Fatalf("fallback failed: %v", err)
				}
				if !strings.Contains(out, r1+": "+c1+"\n") {
					t.Fatalf("fallback output %q lacks the first message", out)
				}
			}
		}
	})
}
