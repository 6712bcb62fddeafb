// Renders a ledger snapshot (GET /v1/memory, or a plan's predicted ledger):
// the phases as one stacked bar (free at start = Σ phase deltas + final
// free), the allocators × categories chart and table with their totals,
// the runtime peak against the reserved slack, and the KV pools.
import { bytes, int, el, color } from './format.js';

// The seven categories of ARCHITECTURE.md §3 in their order, then the two
// remainders every allocator explains.
const knownCategories = ['weights', 'kv_cache', 'activations', 'runtime_metadata', 'workspace', 'graph', 'context'];
const remainders = ['cached', 'rounding'];

const bytesAxis = { ticks: { callback: (v) => bytes(v) } };
const tooltipBytes = { callbacks: { label: (c) => `${c.dataset.label}: ${bytes(c.raw)} (${int(c.raw)} B)` } };

// wrapLabel breaks a long axis label into lines of at most n characters
// (Chart.js draws an array as lines), so narrow screens never cut it.
export function wrapLabel(text, n = 22) {
  const lines = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + 1 + word.length > n) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines.length > 1 ? lines : text;
}

function upsertChart(canvas, config) {
  const existing = Chart.getChart(canvas);
  if (existing) {
    existing.data = config.data;
    existing.update('none');
    return existing;
  }
  return new Chart(canvas, config);
}

// categoriesOf lists the category names present, known ones first.
export function categoriesOf(allocators) {
  const seen = new Set();
  for (const a of allocators) for (const k of Object.keys(a.categories ?? {})) seen.add(k);
  const rest = [...seen].filter((k) => !knownCategories.includes(k) && !remainders.includes(k)).sort();
  return [...knownCategories.filter((k) => seen.has(k)), ...rest];
}

// phaseTotals returns the numbers the phase bar stacks.
export function phaseTotals(snap) {
  const phases = snap.phases ?? [];
  const start = snap.start_free_bytes ?? (phases[0]?.free_before_bytes ?? 0);
  const finalFree = phases.length ? phases[phases.length - 1].free_after_bytes : (snap.free_bytes ?? start);
  const sumDelta = phases.reduce((s, p) => s + p.delta_bytes, 0);
  return { start, finalFree, sumDelta, balanced: sumDelta + finalFree === start };
}

function renderPhases(prefix, snap) {
  const phases = snap.phases ?? [];
  const t = phaseTotals(snap);
  const datasets = phases.map((p, i) => ({ label: p.name, data: [p.delta_bytes], backgroundColor: color(i) }));
  datasets.push({ label: 'free after ready', data: [t.finalFree], backgroundColor: '#d9dde4' });
  upsertChart(document.getElementById(`${prefix}-phases`), {
    type: 'bar',
    data: { labels: ['free at start'], datasets },
    options: {
      indexAxis: 'y', animation: false, maintainAspectRatio: false,
      scales: { x: { stacked: true, ...bytesAxis, max: t.start > 0 ? t.start : undefined }, y: { stacked: true } },
      plugins: { tooltip: tooltipBytes, legend: { position: 'bottom', labels: { boxWidth: 12 } } },
    },
  });
  const sum = document.getElementById(`${prefix}-phase-sum`);
  sum.replaceChildren(
    `free at start ${bytes(t.start)} = Σ phase deltas ${bytes(t.sumDelta)} + final free ${bytes(t.finalFree)} `,
    el('span', { class: t.balanced ? 'check-ok' : 'check-bad', text: t.balanced ? '✓ balances to the byte' : `✗ off by ${int(t.start - t.sumDelta - t.finalFree)} B` }),
  );
  sum.dataset.start = t.start;
  sum.dataset.sum = t.sumDelta + t.finalFree;
  const table = document.getElementById(`${prefix}-phase-table`);
  const head = el('tr', {}, ...['phase', 'free before', 'delta', 'free after', 'log line'].map((h) => el('th', { text: h })));
  const rows = phases.map((p) => el('tr', {},
    el('td', { text: p.name }), el('td', { text: bytes(p.free_before_bytes) }), el('td', { text: bytes(p.delta_bytes) }),
    el('td', { text: bytes(p.free_after_bytes) }),
    el('td', { class: 'mono', text: `avail mem=${(p.avail_gib ?? 0).toFixed(2)} GiB, mem usage=${(p.usage_gib ?? 0).toFixed(2)} GiB` })));
  table.replaceChildren(el('thead', {}, head), el('tbody', {}, ...rows));
}

function renderAllocators(prefix, snap) {
  const allocs = snap.allocators ?? [];
  const cats = categoriesOf(allocs);
  const cols = [...cats, ...remainders];
  const valueOf = (a, c) => (c === 'cached' ? a.cached_bytes ?? 0 : c === 'rounding' ? a.rounding_bytes ?? 0 : a.categories?.[c] ?? 0);
  const nonZero = cols.filter((c) => allocs.some((a) => valueOf(a, c) !== 0));
  upsertChart(document.getElementById(`${prefix}-alloc`), {
    type: 'bar',
    data: {
      labels: allocs.map((a) => a.name),
      datasets: nonZero.map((c, i) => ({ label: c, data: allocs.map((a) => valueOf(a, c)), backgroundColor: color(i) })),
    },
    options: {
      animation: false, maintainAspectRatio: false,
      scales: { x: { stacked: true }, y: { stacked: true, ...bytesAxis } },
      // Below the chart, where a long category name has the whole width.
      plugins: { tooltip: tooltipBytes, legend: { position: 'bottom', labels: { boxWidth: 12 } } },
    },
  });
  const colTotals = Object.fromEntries(cols.map((c) => [c, allocs.reduce((s, a) => s + valueOf(a, c), 0)]));
  const held = allocs.reduce((s, a) => s + (a.device_bytes ?? 0), 0);
  const table = document.getElementById(`${prefix}-alloc-table`);
  const head = el('tr', {}, el('th', { text: 'allocator' }), el('th', { text: 'kind' }), ...cols.map((c) => el('th', { text: c })), el('th', { text: 'device bytes' }));
  const rows = allocs.map((a) => {
    const explained = cols.reduce((s, c) => s + valueOf(a, c), 0);
    const ok = explained === a.device_bytes;
    return el('tr', {}, el('td', { text: a.name }), el('td', { text: a.kind ?? '' }),
      ...cols.map((c) => el('td', { title: `${int(valueOf(a, c))} B`, text: bytes(valueOf(a, c)) })),
      el('td', { class: ok ? '' : 'check-bad', title: ok ? `${int(a.device_bytes)} B, fully explained` : `explains ${int(explained)} B`, text: bytes(a.device_bytes) }));
  });
  const foot = el('tr', { id: `${prefix}-alloc-total` }, el('td', { text: 'total' }), el('td'),
    ...cols.map((c) => el('td', { 'data-bytes': colTotals[c], text: bytes(colTotals[c]) })),
    el('td', { 'data-bytes': held, text: bytes(held) }));
  table.replaceChildren(el('thead', {}, head), el('tbody', {}, ...rows), el('tfoot', {}, foot));

  const used = (snap.total_bytes ?? 0) - (snap.free_bytes ?? 0);
  const sum = document.getElementById(`${prefix}-alloc-sum`);
  const ok = held === used;
  sum.replaceChildren(
    `Σ allocators ${bytes(held)} (${int(held)} B) = device total ${bytes(snap.total_bytes)} − free ${bytes(snap.free_bytes)} = ${bytes(used)} `,
    el('span', { class: ok ? 'check-ok' : 'check-bad', text: ok ? '✓' : `✗ off by ${int(used - held)} B` }),
  );
  sum.dataset.held = held;
  sum.dataset.used = used;
}

function renderSlack(prefix, snap) {
  const rt = snap.runtime;
  const headroom = snap.budget?.headroom_bytes;
  const { finalFree } = phaseTotals(snap);
  const slackLabel = headroom !== undefined ? 'reserved slack (headroom)' : 'free after ready';
  const slack = headroom ?? finalFree;
  const labels = [slackLabel];
  const data = [slack];
  const colors = ['#d9dde4'];
  // The runtime peak the slack must hold is the growth above what the
  // caching allocator held when serving began (workspaces and graph pools
  // are in the phases already).
  const base = rt?.baseline_reserved_bytes ?? 0;
  const aboveAlloc = rt ? Math.max(0, (rt.peak_allocated_bytes ?? 0) - base) : 0;
  const aboveReserved = rt ? (rt.peak_above_baseline_bytes ?? Math.max(0, (rt.peak_reserved_bytes ?? 0) - base)) : 0;
  if (rt) {
    labels.push('runtime peak allocated (above serving baseline)', 'runtime peak reserved (above serving baseline)');
    data.push(aboveAlloc, aboveReserved);
    colors.push('#2f6fed', '#e8853d');
  }
  for (const p of snap.peaks ?? []) {
    labels.push(`predicted peak: ${p.name}`);
    data.push(p.bytes);
    colors.push('#8e6bd1');
  }
  upsertChart(document.getElementById(`${prefix}-slack`), {
    type: 'bar',
    data: { labels: labels.map((l) => wrapLabel(l)), datasets: [{ label: 'bytes', data, backgroundColor: colors }] },
    options: {
      indexAxis: 'y', animation: false, maintainAspectRatio: false,
      scales: { x: { ...bytesAxis, beginAtZero: true } },
      plugins: { legend: { display: false }, tooltip: { callbacks: { title: (items) => labels[items[0].dataIndex], label: (c) => `${bytes(c.raw)} (${int(c.raw)} B)` } } },
    },
  });
  const peak = rt ? Math.max(aboveReserved, aboveAlloc) : Math.max(0, ...(snap.peaks ?? []).map((p) => p.bytes));
  const sum = document.getElementById(`${prefix}-slack-sum`);
  if (peak > 0 && slack > 0) {
    const pct = (100 * peak) / slack;
    sum.replaceChildren(`peak ${bytes(peak)} is ${pct.toFixed(1)}% of ${slackLabel} ${bytes(slack)} `,
      el('span', { class: pct <= 100 ? 'check-ok' : 'check-bad', text: pct <= 100 ? '✓ fits' : '✗ exceeds the slack' }));
  } else {
    sum.textContent = `${slackLabel}: ${bytes(slack)}${rt ? '' : ' (no runtime allocator reported)'}`;
  }
}

// renderKVTable lists every pool the configurator declared: its kind
// (full, window with its window, latent, state), encoding, the layers it
// serves, capacity and use in tokens (pages) or request slots, and bytes.
// The live ledger (not a plan) adds what the prefix cache alone holds of
// each token pool: evictable pages, counted free in the use.
function renderKVTable(prefix, snap) {
  const pools = snap.kv_pools ?? [];
  const table = document.getElementById(`${prefix}-kv-table`);
  if (!pools.length) {
    table.replaceChildren();
    return;
  }
  const live = prefix === 'mem';
  const head = el('tr', {}, ...['KV pool', 'kind', 'encoding', 'layers', 'capacity', 'in use', 'free pages', ...(live ? ['prefix cache'] : []), 'bytes/unit', 'pool bytes']
    .map((h) => el('th', { text: h })));
  const rows = pools.map((p) => {
    const slots = p.unit === 'request';
    const kind = p.kind === 'window' ? `window ${int(p.window)}` : (p.kind ?? 'full');
    const capacity = slots ? `${int(p.slots)} slots` : `${int(p.capacity_tokens)} tokens (${int(p.pages)} pages of ${int(p.page_size)})`;
    const used = slots ? `${int(p.used_slots)} slots` : `${int(p.used_tokens)} tokens`;
    const pct = p.pages > 0 ? ` (${((100 * (p.pages - p.free_pages)) / p.pages).toFixed(1)}%)` : '';
    return el('tr', {}, el('td', { text: p.name }), el('td', { text: kind }), el('td', { text: p.kv_dtype || '—' }),
      el('td', { text: int(p.layers ?? 0) }), el('td', { text: capacity }), el('td', { text: used + pct }),
      el('td', { text: int(p.free_pages) }),
      live ? el('td', { class: 'cached', 'data-pages': slots ? '' : String(p.cached_pages ?? 0), text: slots ? '—' : cachedText(p) }) : null,
      el('td', { text: `${int(p.cell_bytes)} B/${slots ? 'slot' : 'token'}` }),
      el('td', { text: bytes(p.bytes) }));
  });
  table.replaceChildren(el('thead', {}, head), el('tbody', {}, ...rows));
}

// cachedText is a token pool's pages only the prefix cache holds, in
// tokens and as a share of the pool.
export function cachedText(p) {
  const pages = p.cached_pages ?? 0;
  const pct = p.pages > 0 ? (100 * pages) / p.pages : 0;
  return `${int(p.cached_tokens ?? pages * (p.page_size ?? 0))} tokens (${pct.toFixed(1)}%)`;
}

// renderLedger draws snap into the elements whose ids start with prefix.
export function renderLedger(prefix, snap) {
  renderPhases(prefix, snap);
  renderAllocators(prefix, snap);
  renderSlack(prefix, snap);
  renderKVTable(prefix, snap);
}
