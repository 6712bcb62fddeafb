// The Work tab: running/waiting, tokens/s in and out (differences of the
// counters between two polls of /ui/api/work), preemptions, recent errors.
import { getJSON } from './api.js';
import { el, int } from './format.js';

const maxPoints = 90;
let prev;
let rateChart;
let queueChart;

function lineChart(id, series) {
  return new Chart(document.getElementById(id), {
    type: 'line',
    data: { labels: [], datasets: series.map(([label, c]) => ({ label, data: [], borderColor: c, tension: 0.2 })) },
    options: {
      animation: false, maintainAspectRatio: false, elements: { point: { radius: 0 } },
      scales: { y: { beginAtZero: true }, x: { ticks: { maxTicksLimit: 6 } } },
      plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } },
    },
  });
}

function push(chart, label, values) {
  chart.data.labels.push(label);
  values.forEach((v, i) => chart.data.datasets[i].data.push(v));
  if (chart.data.labels.length > maxPoints) {
    chart.data.labels.shift();
    for (const ds of chart.data.datasets) ds.data.shift();
  }
  chart.update('none');
}

// prefixRate is the share of looked-up prompt tokens the prefix cache
// served since start ('off' without a cache).
function prefixRate(pc) {
  if (pc === null || pc === undefined) return 'off';
  return pc.queries_tokens > 0 ? `${((100 * pc.hits_tokens) / pc.queries_tokens).toFixed(1)}%` : '–';
}

export function renderWork(w) {
  const t = Date.parse(w.time) / 1000;
  let rin = 0;
  let rout = 0;
  const first = !prev;
  if (prev && t > prev.t) {
    rin = (w.tokens_in - prev.in) / (t - prev.t);
    rout = (w.tokens_out - prev.out) / (t - prev.t);
  }
  prev = { t, in: w.tokens_in, out: w.tokens_out };
  const tiles = [
    ['running', int(w.running)], ['waiting', int(w.waiting)],
    ['tokens/s in', rin.toFixed(1)], ['tokens/s out', rout.toFixed(1)],
    ['KV in use', w.kv_usage === null || w.kv_usage === undefined ? '–' : `${(100 * w.kv_usage).toFixed(1)}%`],
    ['preemptions', int(w.preemptions)], ['requests', int(w.requests)], ['errors', int(w.errors)],
    ['graph / eager decode steps', `${int(w.graph_steps)} / ${int(w.eager_decode_steps)}`],
    ['prefix cache hits', prefixRate(w.prefix_cache)],
  ];
  document.getElementById('work-tiles').replaceChildren(...tiles.map(([k, v]) => el('div', { class: 'tile', 'data-key': k }, el('div', { class: 'v', text: v }), el('div', { class: 'k', text: k }))));
  rateChart ??= lineChart('work-rate', [['in', '#2f6fed'], ['out', '#e8853d']]);
  queueChart ??= lineChart('work-queue', [['running', '#3aa67a'], ['waiting', '#c54b8c']]);
  const label = new Date(t * 1000).toLocaleTimeString('en-GB');
  // The first poll has no previous counters to rate against.
  if (!first) push(rateChart, label, [rin, rout]);
  push(queueChart, label, [w.running, w.waiting]);
  const errs = w.recent_errors ?? [];
  const table = document.getElementById('work-errors');
  // What the client was told, and the request id that finds the log lines.
  table.replaceChildren(
    el('thead', {}, el('tr', {}, ...['time', 'route', 'status', 'message', 'request id', 'kind'].map((h) => el('th', { text: h })))),
    el('tbody', {}, ...(errs.length ? errs.map((e) => el('tr', {},
      el('td', { text: new Date(e.time).toLocaleTimeString('en-GB') }), el('td', { text: e.route }),
      el('td', { text: e.status ? String(e.status) : '–' }), el('td', { class: 'wrap msg', text: e.message || '–' }),
      el('td', { class: 'mono', title: e.request_id ?? '', text: e.request_id ? `${e.request_id.slice(0, 12)}${e.request_id.length > 12 ? '…' : ''}` : '–' }),
      el('td', { text: e.kind })))
      : [el('tr', {}, el('td', { colspan: 6, class: 'sub', text: 'no errors since start' }))])),
  );
}

export function startWork(cfg, onError) {
  if (!cfg.work) {
    document.getElementById('work-tiles').replaceChildren(el('p', { class: 'sub', text: 'This host does not report its load to the dashboard (no work source wired); see /metrics.' }));
    return;
  }
  const tick = () => getJSON('/ui/api/work').then(renderWork, (e) => onError('work', e));
  tick();
  setInterval(tick, 2000);
}
