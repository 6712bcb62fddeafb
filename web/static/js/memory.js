// The Memory tab: the live ledger from GET /v1/memory and a live chart of
// KV pool use per pool (pages, or slots of a state pool, in use) with the
// share only the prefix cache holds (dashed), and the prefix cache's hit
// rate.
import { getJSON } from './api.js';
import { renderLedger } from './ledger.js';
import { color, el, int } from './format.js';

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
    if (p.unit === 'request') continue;
    // Pages only the prefix cache holds (part of the use above; evictable).
    const clabel = `${label} cached`;
    let cs = d.datasets.find((x) => x.label === clabel);
    if (!cs) {
      cs = { label: clabel, data: new Array(d.labels.length - 1).fill(null), borderColor: ds.borderColor, borderDash: [4, 4], tension: 0.2 };
      d.datasets.push(cs);
    }
    cs.data.push(p.pages > 0 ? (100 * (p.cached_pages ?? 0)) / p.pages : 0);
  }
  for (const ds of d.datasets) while (ds.data.length < d.labels.length) ds.data.push(null);
  if (d.labels.length > maxPoints) {
    d.labels.shift();
    for (const ds of d.datasets) ds.data.shift();
  }
  kvChart.update('none');
}

// renderPrefix states the prefix cache's hit rate since start (prompt
// tokens served from the cache over those looked up at admission, from
// /ui/api/work's prefix_cache: null when the cache is off, undefined when
// the host reports no work) and the share of the token pools' pages only
// the cache holds (from the pools' cached_pages, /v1/memory's too).
export function renderPrefix(pools, pc) {
  const node = document.getElementById('mem-prefix');
  const tok = pools.filter((p) => p.unit !== 'request');
  const pages = tok.reduce((s, p) => s + (p.pages ?? 0), 0);
  const cached = tok.reduce((s, p) => s + (p.cached_pages ?? 0), 0);
  const cachedTokens = tok.reduce((s, p) => s + (p.cached_tokens ?? 0), 0);
  const share = pages > 0 ? (100 * cached) / pages : 0;
  node.dataset.cachedShare = share.toFixed(1);
  if (pc === null) {
    node.dataset.hitRate = '';
    node.replaceChildren('prefix cache off (--disable-radix-cache, or a model with recurrent state)');
    return;
  }
  const parts = [];
  if (pc) {
    const rate = pc.queries_tokens > 0 ? (100 * pc.hits_tokens) / pc.queries_tokens : 0;
    node.dataset.hitRate = rate.toFixed(1);
    parts.push(el('b', { text: `prefix cache hit rate ${rate.toFixed(1)}%` }),
      ` (${int(pc.hits_tokens)} of ${int(pc.queries_tokens)} prompt tokens served from the cache since start) · `);
  } else {
    node.dataset.hitRate = '';
    parts.push('prefix cache hit rate: see /metrics · ');
  }
  parts.push(`cached ${int(cachedTokens)} tokens, ${share.toFixed(1)}% of the token pools' pages (the dashed lines: held by the cache alone, evicted before anyone is preempted)`);
  node.replaceChildren(...parts);
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
        renderPrefix(w.kv_pools ?? [], w.prefix_cache);
      } else {
        const snap = await refreshMemory();
        kvPush(snap.kv_pools ?? []);
        renderPrefix(snap.kv_pools ?? [], undefined);
      }
    } catch (e) {
      onError('memory', e);
    }
  };
  refreshMemory().then((snap) => {
    kvPush(snap.kv_pools ?? []);
    if (!cfg.work) renderPrefix(snap.kv_pools ?? [], undefined);
  }, (e) => onError('memory', e));
  if (cfg.work) getJSON('/ui/api/work').then((w) => renderPrefix(w.kv_pools ?? [], w.prefix_cache), (e) => onError('memory', e));
  setInterval(tick, 2000);
  setInterval(() => refreshMemory().catch((e) => onError('memory', e)), 10000);
}
