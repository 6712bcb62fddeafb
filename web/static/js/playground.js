// The Playground tab: a prompt, a sampler with a form built from its
// declared parameter schema, and the streamed completion with per-token
// logprobs on hover.
import { request, sse, getJSON } from './api.js';
import { el, status } from './format.js';

let samplers = [];
let controller;
let model;

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

function buildParams() {
  const s = selected();
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
  buildParams();
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
  box.replaceChildren(el('div', {}, el('b', { text: JSON.stringify(t.textContent) }), ` logprob ${lp.toFixed(4)} (p = ${(100 * Math.exp(lp)).toFixed(1)}%)`),
    el('table', {}, ...Object.entries(top).sort((a, b) => b[1] - a[1]).map(([k, v]) => el('tr', {}, el('td', { text: JSON.stringify(k) }), el('td', { text: v.toFixed(4) })))));
  box.hidden = false;
  const r = t.getBoundingClientRect();
  box.style.left = `${Math.round(r.left)}px`;
  box.style.top = `${Math.round(r.bottom + 6)}px`;
}

function appendChoice(out, choice) {
  const lp = choice.logprobs;
  if (lp && Array.isArray(lp.tokens) && lp.tokens.length) {
    lp.tokens.forEach((tok, i) => {
      const v = lp.token_logprobs?.[i];
      const span = el('span', { class: 'tok', text: tok });
      if (v !== null && v !== undefined) {
        span.dataset.lp = v;
        // Shade by probability: confident tokens stay pale.
        const p = Math.exp(v);
        span.style.background = `rgba(232, 133, 61, ${(0.45 * (1 - p)).toFixed(3)})`;
      }
      if (lp.top_logprobs?.[i]) span.dataset.top = JSON.stringify(lp.top_logprobs[i]);
      out.append(span);
    });
  } else if (choice.text) {
    out.append(el('span', { class: 'tok', text: choice.text }));
  }
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
  const body = {
    prompt: document.getElementById('play-prompt').value,
    max_tokens: Number(document.getElementById('play-max').value),
    stream: true,
  };
  const nlp = Number(document.getElementById('play-logprobs').value);
  body.logprobs = nlp;
  if (model) body.model = model;
  if (s) {
    body.sampler = s.name;
    body.sampler_params = params;
  } else {
    Object.assign(body, params);
  }
  out.replaceChildren(el('span', { class: 'prompt sub', text: body.prompt }));
  controller = new AbortController();
  document.getElementById('play-run').disabled = true;
  document.getElementById('play-stop').disabled = false;
  status(st, 'streaming…');
  let n = 0;
  const t0 = performance.now();
  try {
    const resp = await request('POST', '/v1/completions', { kind: 'api', body: JSON.stringify(body), contentType: 'application/json', signal: controller.signal });
    for await (const chunk of sse(resp)) {
      if (chunk.error) throw new Error(chunk.error.message ?? 'stream error');
      for (const c of chunk.choices ?? []) {
        appendChoice(out, c);
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

export function startPlayground(cfg) {
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
