// Entry point: tabs, the shared error banner, and each panel's start.
import { getJSON, storedAPIKey, saveAPIKey } from './api.js';
import { startMemory } from './memory.js';
import { startWork } from './work.js';
import { startPlugins } from './plugins.js';
import { startPlayground } from './playground.js';
import { startPlan } from './plan.js';

const errors = new Map();

// onError shows the latest failure of each panel in the banner instead of
// the console, and clears it when the panel recovers (see clearError).
function onError(panel, e) {
  errors.set(panel, e.status === 401 ? `${panel}: ${e.message} — type the API key (top right)` : `${panel}: ${e.message}`);
  const b = document.getElementById('banner');
  b.textContent = [...errors.values()].join(' · ');
  b.hidden = false;
}

function selectTab(name) {
  for (const btn of document.querySelectorAll('#tabs button')) btn.setAttribute('aria-selected', String(btn.dataset.tab === name));
  for (const s of document.querySelectorAll('main > section')) s.hidden = s.id !== name;
  if (window.location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
  // Charts in hidden sections have no size until shown.
  for (const c of document.querySelectorAll(`#${name} canvas`)) Chart.getChart(c)?.resize();
}

// askForKey says the host wants an API key (or refused the one given) and
// points at the field.
function askForKey() {
  const input = document.getElementById('api-key');
  input.classList.add('wanted');
  input.focus();
  const b = document.getElementById('banner');
  b.textContent = `${input.value ? 'The host refused this API key' : 'This host needs its API key'}: type it in the API key field (top right) and press Enter.`;
  b.hidden = false;
}

async function main() {
  const keyInput = document.getElementById('api-key');
  keyInput.value = storedAPIKey();
  // A new key restarts the page with it: config, panels and polls all
  // begin again authenticated.
  keyInput.addEventListener('change', () => {
    saveAPIKey(keyInput.value.trim());
    window.location.reload();
  });
  for (const btn of document.querySelectorAll('#tabs button')) btn.addEventListener('click', () => selectTab(btn.dataset.tab));
  const fromHash = () => {
    const name = window.location.hash.slice(1);
    return document.getElementById(name)?.classList.contains('tab') ? name : null;
  };
  selectTab(fromHash() ?? 'memory');
  // Links, back/forward and typed #tab URLs switch tabs after load too.
  window.addEventListener('hashchange', () => {
    const name = fromHash();
    if (name) selectTab(name);
  });
  let cfg;
  try {
    cfg = await getJSON('/ui/api/config');
  } catch (e) {
    if (e.status === 401) {
      // Nothing but the shell is readable without the key: ask for it
      // and start no panel (each would only fail the same way).
      askForKey();
      document.body.dataset.ready = 'true';
      document.body.dataset.needsKey = 'true';
      return;
    }
    onError('dashboard', e);
    cfg = { work: false, plugins: false, plan: false, plan_models: [], plan_gpus: [], default_sampler: '' };
  }
  window.kvhostConfig = cfg;
  // Clear a panel's error when the admin key changes: the next try may pass.
  document.getElementById('admin-key').addEventListener('change', () => {
    errors.clear();
    document.getElementById('banner').hidden = true;
  });
  startMemory(cfg, onError);
  startWork(cfg, onError);
  startPlayground(cfg);
  startPlugins(cfg, onError);
  startPlan(cfg);
  document.body.dataset.ready = 'true';
}

main();
