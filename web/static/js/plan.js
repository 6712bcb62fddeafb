// The Plan tab: `kvhost plan` in the page — a bundled model config and a
// GPU preset in, the predicted ledger out.
import { renderLedger } from './ledger.js';
import { bytes, el, int, status } from './format.js';

// explain turns a plan that does not fit (the host's 422 with the budget's
// numbers) into what ran out and which value to change.
function explain(model, gpu, e) {
  const box = document.getElementById('plan-failure');
  const short = e.need_bytes - e.have_bytes;
  // Knobs are serve flags ("--device-memory") or SGLang's names
  // ("mem_fraction_static", kvhost's --mem-fraction-static).
  const knob = !e.knob ? '' : e.knob.startsWith('--') ? e.knob : `--${e.knob.replaceAll('_', '-')}`;
  box.replaceChildren(
    el('b', { text: `${model} does not fit on ${gpu}. ` }),
    `The ${e.phase} step needs ${bytes(e.need_bytes)} and has ${bytes(e.have_bytes)}: ${bytes(short)} short. `,
    knob ? el('span', {}, 'To make it fit, set ', el('code', { text: knob }), ' to ', el('b', { text: e.suggest }),
      knob === '--device-memory' ? ' (a GPU with at least that much memory: pick a larger preset, or serve with tensor parallelism)' : '', '.') : 'No setting makes it fit: it needs more memory.',
  );
  box.hidden = false;
}

async function run(ev) {
  ev.preventDefault();
  const st = document.getElementById('plan-status');
  const model = document.getElementById('plan-model').value;
  const gpu = document.getElementById('plan-gpu').value;
  document.getElementById('plan-failure').hidden = true;
  status(st, 'planning…');
  try {
    // A plain fetch: a failed plan's body carries the numbers to explain.
    const resp = await fetch(`/ui/api/plan?model=${encodeURIComponent(model)}&gpu=${encodeURIComponent(gpu)}`, { cache: 'no-store' });
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      if (body?.error?.type === 'insufficient_memory') {
        explain(model, gpu, body.error);
        document.getElementById('plan-summary').replaceChildren();
        status(st, 'does not fit', 'err');
        return;
      }
      throw new Error(`${resp.status}: ${body?.error?.message ?? resp.statusText}`);
    }
    const rep = body;
    // A plan.Report wraps the ledger; its budget and peaks sit beside it.
    const ledger = rep.ledger ?? rep;
    const snap = { ...ledger, budget: ledger.budget ?? rep.budget, peaks: rep.peaks ?? ledger.peaks };
    renderLedger('plan', snap);
    const b = snap.budget ?? {};
    document.getElementById('plan-summary').replaceChildren(
      `${model} on ${gpu}: `,
      el('b', { text: `${int(b.tokens)} KV tokens` }), ` in ${bytes(b.kv_budget_bytes)} of KV budget`,
      b.max_running_requests ? `, ${int(b.max_running_requests)} running requests` : '',
      rep.largest_peak ? `; largest runtime peak: ${rep.largest_peak}` : '');
    status(st, 'done', 'ok');
  } catch (e) {
    status(st, e.message, 'err');
  }
}

export function startPlan(cfg) {
  const models = document.getElementById('plan-model');
  const gpus = document.getElementById('plan-gpu');
  models.replaceChildren(...cfg.plan_models.map((m) => el('option', { value: m, text: m })));
  gpus.replaceChildren(...cfg.plan_gpus.map((g) => el('option', { value: g, text: g })));
  const form = document.getElementById('plan-form');
  form.addEventListener('submit', run);
  if (!cfg.plan) {
    document.getElementById('plan-run').disabled = true;
    status(document.getElementById('plan-status'), 'this host has no planner wired');
  }
}
