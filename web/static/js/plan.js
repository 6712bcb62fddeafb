// The Plan tab: `kvhost plan` in the page — a bundled model config and a
// GPU preset in, the predicted ledger out.
import { getJSON } from './api.js';
import { renderLedger } from './ledger.js';
import { bytes, el, int, status } from './format.js';

async function run(ev) {
  ev.preventDefault();
  const st = document.getElementById('plan-status');
  const model = document.getElementById('plan-model').value;
  const gpu = document.getElementById('plan-gpu').value;
  status(st, 'planning…');
  try {
    const rep = await getJSON(`/ui/api/plan?model=${encodeURIComponent(model)}&gpu=${encodeURIComponent(gpu)}`);
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
