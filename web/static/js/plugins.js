// The Plugins tab: configurators and samplers, and the sampler admin
// actions (upload = swap to a new version, remove) through the admin API
// with the key typed into the page.
import { getJSON, request, samplerNameRE } from './api.js';
import { el, int, status } from './format.js';

// Checks the API makes too, done first so a bad file never leaves the page.
const wasmMagic = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
export const maxUploadBytes = 64 << 20;

let samplers = [];
export const currentSamplers = () => samplers;

// validateUpload returns an error message, or '' when the upload may go.
export function validateUpload(name, header, size, adminKey) {
  if (!samplerNameRE.test(name)) return `name "${name}" is not a valid policy name: lowercase letters, digits, '.', '_' and '-', 1–64 bytes, starting with a letter or digit`;
  if (size === 0) return 'the module is empty';
  if (size > maxUploadBytes) return `the module is ${size} bytes, over the ${maxUploadBytes}-byte limit`;
  if (header.length < 8 || wasmMagic.some((b, i) => header[i] !== b)) return 'the file is not a WebAssembly module (no \\0asm version 1 header)';
  if (!adminKey) return 'type the admin key first (top right)';
  return '';
}

const short = (s) => (s ? `${s.slice(0, 12)}…` : '–');
// One spelling in the page: the registries say "builtin", people read
// "built-in".
const source = (s) => (s === 'builtin' ? 'built-in' : s);
// adminOn is false when the host runs without an admin key: nothing can be
// uploaded or removed, and the page says so instead of failing on submit.
let adminOn = true;

function samplerRows(list, refresh) {
  const head = el('tr', {}, ...['name', 'version', 'ABI', 'source', 'sha256', 'calls', 'failures', 'parameters', ''].map((h) => el('th', { text: h })));
  const rows = list.map((p) => el('tr', { 'data-name': p.name },
    el('td', { text: p.name }), el('td', { class: 'version', text: p.version }), el('td', { text: String(p.abi ?? '–') }),
    el('td', { class: 'mono', text: source(p.source) }), el('td', { class: 'mono', title: p.sha256, text: short(p.sha256) }),
    el('td', { text: int(p.calls) }), el('td', { text: int(p.failures) }),
    el('td', { class: 'mono', text: (p.params ?? []).map((x) => x.name).join(', ') || '–' }),
    el('td', {},
      el('button', { class: 'small ghost', type: 'button', disabled: !adminOn, title: adminOn ? undefined : 'the admin API is off', onclick: () => {
        document.getElementById('upload-name').value = p.name;
        document.getElementById('upload-file').click();
      }, text: 'swap…' }), ' ',
      el('button', { class: 'small danger', type: 'button', disabled: !adminOn, title: adminOn ? undefined : 'the admin API is off', onclick: () => removeSampler(p.name, refresh), text: 'remove' }))));
  return [el('thead', {}, head), el('tbody', {}, ...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 9, class: 'sub', text: 'no samplers loaded' }))]))];
}

function configuratorRows(list) {
  const head = el('tr', {}, ...['name', 'version', 'ABI', 'source', 'sha256', 'calls', 'failures'].map((h) => el('th', { text: h })));
  const rows = list.map((p) => el('tr', { 'data-name': p.name },
    el('td', { text: p.name }), el('td', { text: p.version || '–' }), el('td', { text: String(p.abi ?? '–') }),
    el('td', { class: 'mono', text: source(p.source) }), el('td', { class: 'mono', title: p.sha256, text: short(p.sha256) }),
    el('td', { text: int(p.calls) }), el('td', { text: int(p.failures) })));
  return [el('thead', {}, head), el('tbody', {}, ...rows)];
}

async function removeSampler(name, refresh) {
  const st = document.getElementById('upload-status');
  if (!document.getElementById('admin-key').value.trim()) {
    status(st, 'type the admin key first (top right)', 'err');
    return;
  }
  if (!window.confirm(`Remove sampler ${name}? Requests naming it will be refused.`)) return;
  try {
    await request('DELETE', `/admin/samplers/${encodeURIComponent(name)}`, { kind: 'admin' });
    status(st, `removed ${name}`, 'ok');
  } catch (e) {
    status(st, `remove ${name}: ${e.message}`, 'err');
  }
  await refresh();
}

async function upload(ev, refresh) {
  ev.preventDefault();
  const st = document.getElementById('upload-status');
  const name = document.getElementById('upload-name').value.trim();
  const file = document.getElementById('upload-file').files[0];
  if (!file) {
    status(st, 'choose a .wasm module', 'err');
    return;
  }
  const header = new Uint8Array(await file.slice(0, 8).arrayBuffer());
  const msg = validateUpload(name, header, file.size, document.getElementById('admin-key').value.trim());
  if (msg) {
    status(st, msg, 'err');
    return;
  }
  const btn = document.getElementById('upload-submit');
  btn.disabled = true;
  status(st, `uploading ${file.name} (${int(file.size)} bytes) as ${name}…`);
  try {
    const resp = await request('PUT', `/admin/samplers/${encodeURIComponent(name)}`, { kind: 'admin', body: file, contentType: 'application/wasm' });
    let info = {};
    try { info = await resp.json(); } catch { /* an empty body is fine */ }
    const v = info.version ?? info.descriptor?.version;
    status(st, `${name} swapped${v ? ` to version ${v}` : ''}`, 'ok');
  } catch (e) {
    status(st, `upload ${name}: ${e.message}`, 'err');
  } finally {
    btn.disabled = false;
  }
  await refresh();
}

export function startPlugins(cfg, onError) {
  const refresh = async () => {
    if (!cfg.plugins) return;
    try {
      const { plugins } = await getJSON('/ui/api/plugins');
      samplers = plugins.filter((p) => p.kind === 'sampler');
      document.getElementById('plugins-samplers').replaceChildren(...samplerRows(samplers, refresh));
      document.getElementById('plugins-configurators').replaceChildren(...configuratorRows(plugins.filter((p) => p.kind === 'configurator')));
      document.dispatchEvent(new CustomEvent('kvhost:samplers', { detail: samplers }));
    } catch (e) {
      onError('plugins', e);
    }
  };
  document.getElementById('upload-form').addEventListener('submit', (ev) => upload(ev, refresh));
  adminOn = cfg.admin !== false;
  if (!adminOn) {
    document.getElementById('upload-off').hidden = false;
    for (const e of document.querySelectorAll('#upload-form input, #upload-form button')) e.disabled = true;
  }
  if (!cfg.plugins) {
    document.getElementById('plugins-samplers').replaceChildren(el('tr', {}, el('td', { class: 'sub', text: 'This host does not list its plugins to the dashboard.' })));
  }
  refresh();
  setInterval(refresh, 5000);
  return refresh;
}
