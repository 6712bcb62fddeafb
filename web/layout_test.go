package web

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// overflowJS lists what does not fit the viewport's width: the page's own
// horizontal scroll, elements reaching past the right edge (except inside a
// .scroll box, which scrolls on purpose), and text clipped in its box.
const overflowJS = `(() => {
  const w = window.innerWidth, out = [];
  const doc = document.documentElement.scrollWidth;
  if (doc > w) out.push('page scrolls sideways: ' + doc + ' > ' + w);
  for (const e of document.querySelectorAll('main section:not([hidden]) *, header *')) {
    if (e.closest('.scroll') || e.closest('[hidden]') || e.offsetParent === null) continue;
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > w + 1) out.push('past the edge: ' + e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + e.className + ' right=' + Math.round(r.right));
  }
  for (const e of document.querySelectorAll('label, th, h2, nav button, .tile .k, .tile .v, legend, button')) {
    if (e.closest('.scroll') || e.offsetParent === null) continue;
    if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow !== 'visible') out.push('clipped: ' + e.tagName.toLowerCase() + ' "' + e.textContent.trim().slice(0, 40) + '"');
  }
  return out.slice(0, 20);
})()`

// chartClipJS lists chart text the canvas cuts: axis labels wider than
// their axis, legend items past the chart's edge.
const chartClipJS = `(() => {
  const out = [];
  for (const c of document.querySelectorAll('main section:not([hidden]) canvas')) {
    const ch = Chart.getChart(c);
    if (!ch || c.offsetParent === null) continue;
    for (const s of Object.values(ch.scales)) {
      const widest = s._labelSizes?.widest?.width ?? 0;
      if (s.axis === 'y' && s.position === 'left' && widest > s.width + 1) out.push(c.id + ': ' + s.id + ' labels ' + Math.round(widest) + ' px in ' + Math.round(s.width));
      if (s.left < -1) out.push(c.id + ': axis ' + s.id + ' starts off the canvas');
    }
    for (const b of ch.legend?.legendHitBoxes ?? []) {
      if (b.left < 0 || b.left + b.width > ch.width + 1) out.push(c.id + ': legend item past the edge');
    }
  }
  return out;
})()`

// TestE2ELayoutWidths draws every tab at 1024 px (a small laptop) and 390 px
// (a phone) wide and measures, in the DOM, that nothing reaches past the
// viewport and no label is clipped, in the DOM or on a chart's canvas.
// Screenshots: layout-<width>-<tab>.png.
func TestE2ELayoutWidths(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping browser tests in -short mode")
	}
	p := openPage(t)
	for _, width := range []int64{1024, 390} {
		p.do(fmt.Sprintf("viewport %d", width), chromedp.EmulateViewport(width, 900),
			chromedp.Navigate(p.url+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
		p.waitJS("ledger drawn", `document.getElementById('mem-phase-sum').dataset.start !== undefined`)
		for _, tab := range []string{"memory", "work", "plugins", "playground", "plan"} {
			p.tab(tab)
			switch tab {
			case "work":
				p.waitJS("errors listed with their message", `document.querySelector('#work-errors td.msg')?.textContent === 'the request queue is full; retry later'`)
			case "plugins":
				p.waitJS("samplers listed", `!!document.querySelector('#plugins-samplers tr[data-name="typical"]')`)
			case "plan":
				p.do("plan", setValue("#plan-gpu", "H200"), chromedp.Click(chromedp.CSS("#plan-run")))
				p.waitJS("plan drawn", `document.getElementById('plan-phase-sum').dataset.start !== undefined`)
			}
			if w := eval[int64](p, `window.innerWidth`); w != width {
				t.Fatalf("viewport is %d px wide, want %d", w, width)
			}
			bad := append(eval[[]string](p, overflowJS), eval[[]string](p, chartClipJS)...)
			p.shot(fmt.Sprintf("layout-%d-%s", width, tab))
			if len(bad) > 0 {
				t.Errorf("%d px, %s tab: %s", width, tab, strings.Join(bad, "; "))
			}
		}
	}
}

func TestE2EPlaygroundTextAndChat(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping browser tests in -short mode")
	}
	p := openPage(t)
	close(p.host.release)
	p.do("load", chromedp.EmulateViewport(390, 900), chromedp.Navigate(p.url+"/#playground"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
	p.waitJS("playground from the hash", `!document.getElementById('playground').hidden`)
	long := strings.Repeat("supercalifragilistic", 8)
	p.do("generate", setValue("#play-prompt", long), chromedp.Click(chromedp.CSS("#play-run")))
	p.waitJS("stream done", `document.getElementById('play-output').dataset.done === 'true'`)
	text := eval[string](p, `[...document.querySelectorAll('#play-output .tok')].map((e) => e.textContent).join('')`)
	if want := strings.Join(streamTokens, ""); text != want {
		t.Fatalf("output text %q, want %q (text, not token pieces)", text, want)
	}
	all := eval[string](p, `document.getElementById('play-output').textContent`)
	if strings.ContainsAny(all, "▁") || strings.Contains(all, "<0x0A>") {
		t.Fatalf("token pieces shown as text: %q", all)
	}
	if lines := eval[int](p, `document.getElementById('play-output').innerText.split('\n').length`); lines < 2 {
		t.Errorf("the newline token did not break the line (%d lines)", lines)
	}
	if wraps := eval[bool](p, `(() => { const o = document.getElementById('play-output'); return o.scrollWidth <= o.clientWidth; })()`); !wraps {
		t.Errorf("a long word does not wrap in the output")
	}
	box := eval[[]float64](p, `(() => { const r = document.querySelectorAll('#play-output .tok[data-lp]')[3].getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`)
	p.do("hover", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, box[0], box[1]))
	p.waitJS("tip names the token piece", `document.getElementById('tok-tip').textContent.includes('(token "▁little")')`)
	p.shot("playground-text-390")

	// Chat mode keeps the conversation and streams each answer.
	p.do("chat mode", chromedp.Click(chromedp.CSS(`input[name="play-mode"][value="chat"]`)))
	p.waitJS("chat shown", `!document.getElementById('play-chat').hidden && document.getElementById('play-output').hidden && document.getElementById('play-run').textContent === 'Send'`)
	for i, msg := range []string{"Tell me about a cat", "And then?"} {
		p.do("send", setValue("#play-prompt", msg), chromedp.Click(chromedp.CSS("#play-run")))
		p.waitJS("answer", fmt.Sprintf(`document.querySelectorAll('#play-chat .msg.assistant').length === %d && document.getElementById('play-chat').dataset.done === 'true'`, i+1))
	}
	got := eval[[]string](p, `[...document.querySelectorAll('#play-chat .msg')].map((m) => m.className.replace('msg ', '') + ':' + m.lastChild.textContent)`)
	reply := p.host.chatReply
	want := []string{"user:Tell me about a cat", "assistant:" + reply, "user:And then?", "assistant:" + reply}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	p.host.mu.Lock()
	var last struct {
		Messages []map[string]string `json:"messages"`
		Stream   bool                `json:"stream"`
	}
	_ = json.Unmarshal(p.host.chatBodies[len(p.host.chatBodies)-1], &last)
	p.host.mu.Unlock()
	if len(last.Messages) != 3 || last.Messages[1]["role"] != "assistant" || last.Messages[1]["content"] != reply || !last.Stream {
		t.Fatalf("second chat request %+v: want the history and the new message, streamed", last)
	}
	if bad := eval[[]string](p, overflowJS); len(bad) > 0 {
		t.Errorf("chat at 390 px: %v", bad)
	}
	p.shot("playground-chat-390")
	p.do("clear", chromedp.Click(chromedp.CSS("#play-clear")))
	p.waitJS("cleared", `document.querySelectorAll('#play-chat .msg').length === 0`)
}

func TestE2ETabsFollowHash(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping browser tests in -short mode")
	}
	p := openPage(t)
	p.do("load", chromedp.Navigate(p.url+"/#plugins"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
	p.waitJS("plugins from the hash", `!document.getElementById('plugins').hidden`)
	p.do("hash to plan", chromedp.Evaluate[chromedp.Void](`window.location.hash = '#plan'`))
	p.waitJS("plan after a hash change", `!document.getElementById('plan').hidden && document.getElementById('plugins').hidden && document.querySelector('#tabs button[data-tab="plan"]').getAttribute('aria-selected') === 'true'`)
	p.do("back", chromedp.NavigateBack())
	p.waitJS("plugins after back", `!document.getElementById('plugins').hidden`)
}

func TestE2EAdminOffAndPlanFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping browser tests in -short mode")
	}
	p := openPage(t, func(h *fakeHost) { h.adminOn = false })
	p.do("load", chromedp.Navigate(p.url+"/#plugins"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
	p.waitJS("samplers listed", `!!document.querySelector('#plugins-samplers tr[data-name="typical"]')`)
	p.waitJS("upload disabled with a note", `!document.getElementById('upload-off').hidden && document.getElementById('upload-submit').disabled && document.getElementById('upload-file').disabled && [...document.querySelectorAll('#plugins-samplers button')].every((b) => b.disabled)`)
	if note := eval[string](p, `document.getElementById('upload-off').textContent`); !strings.Contains(note, "--admin-key") {
		t.Errorf("note %q does not say how to turn the admin API on", note)
	}
	// One spelling: "built-in", never "builtin", in what the page shows.
	if body := eval[string](p, `document.body.innerText`); strings.Contains(strings.ToLower(body), "builtin") || !strings.Contains(body, "built-in") {
		t.Errorf("the page spells built-in otherwise: %q", body)
	}
	p.shot("plugins-admin-off")

	p.tab("plan")
	p.do("plan that does not fit", setValue("#plan-gpu", "L40S"), chromedp.Click(chromedp.CSS("#plan-run")))
	p.waitJS("failure explained", `!document.getElementById('plan-failure').hidden`)
	why := eval[string](p, `document.getElementById('plan-failure').textContent`)
	for _, want := range []string{"does not fit on L40S", "post-capture-kv", "1.35 GiB short", "--device-memory", "25942MiB"} {
		if !strings.Contains(why, want) {
			t.Errorf("explanation %q lacks %q", why, want)
		}
	}
	p.shot("plan-failure")
}
