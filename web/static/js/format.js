// Number formatting shared by the panels. GiB = 2^30 B, as the ledger says.

export const GiB = 2 ** 30;

export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const a = Math.abs(n);
  if (a >= GiB) return `${(n / GiB).toFixed(2)} GiB`;
  if (a >= 2 ** 20) return `${(n / 2 ** 20).toFixed(1)} MiB`;
  if (a >= 2 ** 10) return `${(n / 2 ** 10).toFixed(1)} KiB`;
  return `${n} B`;
}

export const int = (n) => (n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US'));

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// A categorical palette that stays readable when stacked.
export const palette = ['#2f6fed', '#e8853d', '#3aa67a', '#c54b8c', '#8e6bd1', '#d4b13f', '#4bb3c5', '#8c8c8c', '#b85c5c', '#6d8c3a'];
export const color = (i) => palette[i % palette.length];

export function status(node, text, kind = '') {
  node.textContent = text;
  node.className = `status ${kind}`;
}
