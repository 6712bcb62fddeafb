// The Memory tab: the live ledger from GET /v1/memory and a live chart of
// KV pool use per pool (pages, or slots of a state pool, in use).
import { getJSON } from './api.js';
import { renderLedger } from './ledger.js';
import { color } from './format.js';

const maxPoints = 90;
let kvChart;

function kvPush(pools) {
  const canvas = document.getElementById('mem-kv-live');
  if (!kvChart) {
    kvChart = new Chart(canvas, {
      type: 'line',
      data: { labels: [], datasets: [] },
      options: {
        animation: false, maintainAspectRatio: false,
        scales: { y: { min: 0, max: 100, ticks: { callback: (v) => `${v}%` } }, x: { ticks: { maxTicksLimit: 6 } } },
        plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } },
          tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${c.raw.toFixed(1)}%` } } },
        elements: { point: { radius: 0 } },
      },
    });
  }
  const d = kvChart.data;
  d.labels.push(new Date().toLocaleTimeString('en-GB'));
  for (const p of pools) {
    const label = p.kind ? `${p.name} (${p.kind})` : p.name;
    let ds = d.datasets.find((x) => x.label === label);
    if (!ds) {
      ds = { label, data: new Array(d.labels.length - 1).fill(null), borderColor: color(d.datasets.length), tension: 0.2 };
      d.datasets.push(ds);
    }
    ds.data.push(p.pages > 0 ? (100 * (p.pages - p.free_pages)) / p.pages : 0);
  }
  for (const ds of d.datasets) while (ds.data.length < d.labels.length) ds.data.push(null);
  if (d.labels.length > maxPoints) {
    d.labels.shift();
    for (const ds of d.datasets) ds.data.shift();
  }
  kvChart.update('none');
}

// refreshMemory loads /v1/memory and redraws; it returns the snapshot.
export async function refreshMemory() {
  const snap = await getJSON('/v1/memory', 'api');
  renderLedger('mem', snap);
  return snap;
}

// startMemory polls the ledger (for the KV chart through /ui/api/work when
// the host wires it, which is cheaper than a full ledger snapshot).
export function startMemory(cfg, onError) {
  const tick = async () => {
    try {
      if (cfg.work) {
        const w = await getJSON('/ui/api/work');
        kvPush(w.kv_pools ?? []);
      } else {
        const snap = await refreshMemory();
        kvPush(snap.kv_pools ?? []);
      }
    } catch (e) {
      onError('memory', e);
    }
  };
  refreshMemory().then((snap) => kvPush(snap.kv_pools ?? []), (e) => onError('memory', e));
  setInterval(tick, 2000);
  setInterval(() => refreshMemory().catch((e) => onError('memory', e)), 10000);
}
