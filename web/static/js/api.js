// Fetch helpers: the host's error shape, bearer keys, and SSE streams.
//
// With --api-key the host answers every route but /health and this page's
// static files with 401 unless the request carries the key, the page's own
// JSON included. The page sends the key typed in #api-key as a bearer
// header on every request it makes (never in a cookie, so a cross-site
// page cannot ride on it; never in the URL, so it is not logged). The key
// stays in this tab's sessionStorage so a reload keeps it.

const apiKeyStore = 'kvhost.api-key';
const apiKey = () => document.getElementById('api-key')?.value.trim() ?? '';
const adminKey = () => document.getElementById('admin-key')?.value.trim() ?? '';

// storedAPIKey is the key this tab saved; saveAPIKey saves (or, empty,
// forgets) it.
export function storedAPIKey() {
  try { return sessionStorage.getItem(apiKeyStore) ?? ''; } catch { return ''; }
}
export function saveAPIKey(k) {
  try {
    if (k) sessionStorage.setItem(apiKeyStore, k);
    else sessionStorage.removeItem(apiKeyStore);
  } catch { /* storage disabled: the key lives in the field only */ }
}

// APIError carries the HTTP status and the host's message.
export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(kind, extra = {}) {
  const h = { ...extra };
  const k = kind === 'admin' ? adminKey() : kind === 'api' ? apiKey() : '';
  if (k) h.Authorization = `Bearer ${k}`;
  return h;
}

async function failure(resp) {
  let msg = `${resp.status} ${resp.statusText}`;
  try {
    const text = await resp.text();
    try {
      const j = JSON.parse(text);
      if (j?.error?.message) msg = `${resp.status}: ${j.error.message}`;
    } catch {
      if (text.trim()) msg = `${resp.status}: ${text.trim().slice(0, 300)}`;
    }
  } catch { /* body unreadable: keep the status line */ }
  return new APIError(resp.status, msg);
}

// request sends a request with the key of kind: 'api' (the default: every
// host route but /admin needs it when the host has one) or 'admin'.
export async function request(method, url, { kind = 'api', body, contentType, signal } = {}) {
  const extra = contentType ? { 'Content-Type': contentType } : {};
  const resp = await fetch(url, { method, headers: headers(kind, extra), body, signal, cache: 'no-store' });
  if (!resp.ok) throw await failure(resp);
  return resp;
}

export async function getJSON(url, kind = 'api') {
  const resp = await request('GET', url, { kind });
  return resp.json();
}

// sse yields the parsed JSON of each "data:" event of a text/event-stream
// response until [DONE] or the end of the body.
export async function* sse(resp) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      yield JSON.parse(data);
    }
  }
}

// Sampler names follow sdk/sampler.ValidName.
export const samplerNameRE = /^[a-z0-9][a-z0-9._-]{0,63}$/;
