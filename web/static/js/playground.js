// The Playground tab: a prompt (completion mode) or a conversation (chat
// mode), a sampler with a form built from its declared parameter schema,
// and the streamed answer — shown as text (spaces, newlines, UTF-8 as the
// model wrote them), with each completion token's logprob on hover.
import { request, sse, getJSON } from './api.js';
import { el, status } from './format.js';

let samplers = [];
let controller;
let model;
let mode = 'completion';
// The chat so far: {role, content} in order.
const history = [];

// The standard OpenAI knobs shown when no sampler is picked (the server's
// default policy).
const defaultParams = [
  { name: 'temperature', type: 'float', min: 0, max: 2, default: 1 },
  { name: 'top_p', type: 'float', min: 0, max: 1, default: 1 },
];

function selected() {
  const name = document.getElementById('play-sampler').value;
  return samplers.find((s) => s.name === name);
}

// builtFor is the policy version the parameter form was built for: a
// refreshed sampler list that still holds it keeps the form (and what the
// user typed into it).
let builtFor;

function formKey(s) {
  return s ? `${s.name}@${s.version}` : '';
}

function buildParams() {
  const s = selected();
  builtFor = formKey(s);
  const fs = document.getElementById('play-params');
  const params = s ? s.params ?? [] : defaultParams;
  fs.replaceChildren(el('legend', { text: s ? `${s.name} ${s.version} parameters` : 'Parameters (server default sampler)' }),
    ...params.map((p) => el('label', {}, `${p.name} (${p.min}–${p.max})`,
      el('input', { type: 'number', name: p.name, 'data-type': p.type, min: p.min, max: p.max,
        step: p.type === 'int' ? 1 : 'any', value: p.default, required: true }))));
  if (!params.length) fs.append(el('span', { class: 'sub', text: 'this policy declares no parameters' }));
}

function setSamplers(list, defaultSampler) {
  samplers = list;
  const sel = document.getElementById('play-sampler');
  const keep = sel.value || defaultSampler || '';
  sel.replaceChildren(el('option', { value: '', text: '(server default)' }), ...list.map((s) => el('option', { value: s.name, text: `${s.name} ${s.version}` })));
  sel.value = list.some((s) => s.name === keep) ? keep : '';
  if (formKey(selected()) !== builtFor) buildParams();
}

// readParams validates the form like the API does (type, range) and
// returns the values, or throws with the bad field named.
function readParams() {
  const out = {};
  for (const input of document.querySelectorAll('#play-params input')) {
    const v = Number(input.value);
    const lo = Number(input.min);
    const hi = Number(input.max);
    if (input.value === '' || Number.isNaN(v)) throw new Error(`${input.name}: not a number`);
    if (input.dataset.type === 'int' && !Number.isInteger(v)) throw new Error(`${input.name}: ${v} is not an integer`);
    if (v < lo || v > hi) throw new Error(`${input.name}: ${v} is out of range [${lo}, ${hi}]`);
    out[input.name] = v;
  }
  return out;
}

const tip = () => document.getElementById('tok-tip');

function showTip(ev) {
  const t = ev.target.closest('.tok');
  if (!t || t.dataset.lp === undefined) return;
  const box = tip();
  const lp = Number(t.dataset.lp);
  const top = JSON.parse(t.dataset.top || '{}');
  const piece = t.dataset.piece !== undefined && t.dataset.piece !== t.textContent ? ` (token ${JSON.stringify(t.dataset.piece)})` : '';
  box.replaceChildren(el('div', {}, el('b', { text: JSON.stringify(t.textContent) }), piece, ` logprob ${lp.toFixed(4)} (p = ${(100 * Math.exp(lp)).toFixed(1)}%)`),
    el('table', {}, ...Object.entries(top).sort((a, b) => b[1] - a[1]).map(([k, v]) => el('tr', {}, el('td', { text: JSON.stringify(k) }), el('td', { text: v.toFixed(4) })))));
  box.hidden = false;
  const r = t.getBoundingClientRect();
  box.style.left = `${Math.round(r.left)}px`;
  box.style.top = `${Math.round(r.bottom + 6)}px`;
}

const utf8 = new TextEncoder();
const text8 = new TextDecoder();

// charStart moves a byte index forward to the start of a UTF-8 character,
// so a token that ends inside a character hands the rest to the next.
function charStart(b, i) {
  while (i < b.length && (b[i] & 0xc0) === 0x80) i++;
  return i;
}

// appendChoice shows a completion chunk's text, split into one span per
// token by the logprobs' text_offset (bytes into the generated text; seen
// counts the bytes before this chunk). The text is the model's output as
// text; the token as the tokenizer names it ("▁the", "<0x0A>") only shows
// in the hover tip.
function appendChoice(out, choice, seen) {
  const text = choice.text ?? '';
  const b = utf8.encode(text);
  const lp = choice.logprobs;
  const offs = lp?.text_offset;
  if (!lp || !Array.isArray(lp.tokens) || !lp.tokens.length || !Array.isArray(offs) || offs.length !== lp.tokens.length) {
    if (text) out.append(el('span', { class: 'tok', text }));
    return b.length;
  }
  const starts = offs.map((o) => charStart(b, Math.max(0, Math.min(b.length, o - seen))));
  if (starts[0] > 0) out.append(el('span', { class: 'tok', text: text8.decode(b.subarray(0, starts[0])) }));
  lp.tokens.forEach((piece, i) => {
    const end = i + 1 < starts.length ? starts[i + 1] : b.length;
    const span = el('span', { class: 'tok', text: text8.decode(b.subarray(starts[i], Math.max(starts[i], end))) });
    span.dataset.piece = piece;
    const v = lp.token_logprobs?.[i];
    if (v !== null && v !== undefined) {
      span.dataset.lp = v;
      // Shade by probability: confident tokens stay pale.
      const p = Math.exp(v);
      span.style.background = `rgba(232, 133, 61, ${(0.45 * (1 - p)).toFixed(3)})`;
    }
    if (lp.top_logprobs?.[i]) span.dataset.top = JSON.stringify(lp.top_logprobs[i]);
    out.append(span);
  });
  return b.length;
}

function renderChat(pending) {
  const box = document.getElementById('play-chat');
  box.replaceChildren(...history.map((m) => el('div', { class: `msg ${m.role}` }, el('span', { class: 'role', text: m.role }), m.content)));
  if (pending) box.append(pending);
  if (!history.length && !pending) box.append(el('p', { class: 'sub', text: 'Type a message and press Send; the conversation is kept until you clear it.' }));
}

// setMode switches the tab between completion and chat.
function setMode(m) {
  mode = m;
  const chat = m === 'chat';
  document.getElementById('play-output').hidden = chat;
  document.getElementById('play-chat').hidden = !chat;
  document.getElementById('play-clear').hidden = !chat;
  document.getElementById('play-logprobs-label').hidden = chat;
  document.getElementById('play-output-hint').hidden = chat;
  document.getElementById('play-prompt-label').textContent = chat ? 'Message' : 'Prompt';
  document.getElementById('play-output-title').textContent = chat ? 'Conversation' : 'Output';
  document.getElementById('play-run').textContent = chat ? 'Send' : 'Generate';
  const prompt = document.getElementById('play-prompt');
  if (chat && prompt.value === 'Once upon a time') prompt.value = 'Tell me a story about a cat.';
  if (chat) renderChat();
}

async function run(ev) {
  ev.preventDefault();
  const st = document.getElementById('play-status');
  const out = document.getElementById('play-output');
  let params;
  try {
    params = readParams();
  } catch (e) {
    status(st, e.message, 'err');
    return;
  }
  const s = selected();
  const text = document.getElementById('play-prompt').value;
  const body = { max_tokens: Number(document.getElementById('play-max').value), stream: true };
  if (mode === 'chat') {
    if (!text.trim()) {
      status(st, 'type a message first', 'err');
      return;
    }
    body.messages = [...history, { role: 'user', content: text }];
  } else {
    body.prompt = text;
    body.logprobs = Number(document.getElementById('play-logprobs').value);
  }
  if (model) body.model = model;
  if (s) {
    body.sampler = s.name;
    body.sampler_params = params;
  } else {
    Object.assign(body, params);
  }
  if (mode === 'chat') return runChat(body, text, st);
  out.replaceChildren(el('span', { class: 'prompt sub', text: body.prompt }));
  delete out.dataset.done;
  controller = new AbortController();
  document.getElementById('play-run').disabled = true;
  document.getElementById('play-stop').disabled = false;
  status(st, 'streaming…');
  let n = 0;
  let seen = 0;
  const t0 = performance.now();
  try {
    const resp = await request('POST', '/v1/completions', { kind: 'api', body: JSON.stringify(body), contentType: 'application/json', signal: controller.signal });
    for await (const chunk of sse(resp)) {
      if (chunk.error) throw new Error(chunk.error.message ?? 'stream error');
      for (const c of chunk.choices ?? []) {
        seen += appendChoice(out, c, seen);
        n += c.logprobs?.tokens?.length ?? (c.text ? 1 : 0);
        if (c.finish_reason) status(st, `finished (${c.finish_reason})`);
      }
      status(st, `${n} tokens, ${((1000 * n) / (performance.now() - t0)).toFixed(1)} tokens/s`);
    }
    status(st, `done: ${n} tokens in ${((performance.now() - t0) / 1000).toFixed(2)} s`, 'ok');
    out.dataset.done = 'true';
  } catch (e) {
    if (e.name === 'AbortError') status(st, `stopped after ${n} tokens`);
    else {
      status(st, e.message, 'err');
      out.append(el('div', { class: 'err', text: e.message }));
    }
  } finally {
    document.getElementById('play-run').disabled = false;
    document.getElementById('play-stop').disabled = true;
  }
}

// runChat streams the assistant's answer to the conversation plus the new
// user message; both join the history once the answer is complete.
async function runChat(body, text, st) {
  const answer = el('div', { class: 'msg assistant' }, el('span', { class: 'role', text: 'assistant' }));
  const box = document.getElementById('play-chat');
  history.push({ role: 'user', content: text });
  renderChat(answer);
  delete box.dataset.done;
  controller = new AbortController();
  document.getElementById('play-run').disabled = true;
  document.getElementById('play-stop').disabled = false;
  status(st, 'streaming…');
  let reply = '';
  const t0 = performance.now();
  try {
    const resp = await request('POST', '/v1/chat/completions', { kind: 'api', body: JSON.stringify(body), contentType: 'application/json', signal: controller.signal });
    for await (const chunk of sse(resp)) {
      if (chunk.error) throw new Error(chunk.error.message ?? 'stream error');
      for (const c of chunk.choices ?? []) {
        const d = c.delta?.content ?? '';
        if (d) {
          reply += d;
          answer.append(d);
        }
        if (c.finish_reason) status(st, `finished (${c.finish_reason})`);
      }
    }
    history.push({ role: 'assistant', content: reply });
    document.getElementById('play-prompt').value = '';
    status(st, `done in ${((performance.now() - t0) / 1000).toFixed(2)} s`, 'ok');
    box.dataset.done = 'true';
  } catch (e) {
    history.pop(); // the user message had no answer: it can be sent again
    if (e.name === 'AbortError') status(st, 'stopped');
    else {
      status(st, e.message, 'err');
      answer.append(el('div', { class: 'err', text: e.message }));
    }
  } finally {
    renderChat(box.dataset.done ? undefined : answer);
    document.getElementById('play-run').disabled = false;
    document.getElementById('play-stop').disabled = true;
  }
}

export function startPlayground(cfg) {
  for (const r of document.querySelectorAll('input[name="play-mode"]')) r.addEventListener('change', () => r.checked && setMode(r.value));
  document.getElementById('play-clear').addEventListener('click', () => {
    history.length = 0;
    renderChat();
    status(document.getElementById('play-status'), 'conversation cleared');
  });
  document.getElementById('play-sampler').addEventListener('change', buildParams);
  document.getElementById('play-form').addEventListener('submit', run);
  document.getElementById('play-stop').addEventListener('click', () => controller?.abort());
  const out = document.getElementById('play-output');
  out.addEventListener('mouseover', showTip);
  out.addEventListener('mouseout', () => { tip().hidden = true; });
  document.addEventListener('kvhost:samplers', (e) => setSamplers(e.detail, cfg.default_sampler));
  setSamplers([], cfg.default_sampler);
  getJSON('/v1/models', 'api').then((m) => { model = m?.data?.[0]?.id; }, () => { /* model stays unset: the host takes its only model */ });
}
