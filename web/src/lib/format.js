// Pure formatting helpers (no DOM): used by the pages and by the tests, so a number on the page
// can be compared with the JSON it came from.

const kUnits = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

// 1023 -> "1023 B", 1536 -> "1.50 KiB", 10 MiB -> "10.0 MiB"; null/undefined -> "—".
export function fmtBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '—';
  const neg = n < 0;
  let v = Math.abs(n);
  let u = 0;
  while (v >= 1024 && u < kUnits.length - 1) { v /= 1024; u++; }
  const s = u === 0 ? String(v) : v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  return (neg ? '-' : '') + s + ' ' + kUnits[u];
}

// A float for tables: `digits` significant digits (4), exponent form for very small/large values.
export function fmtNum(x, digits = 4) {
  if (x === null || x === undefined) return '—';
  if (typeof x !== 'number') return String(x);
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '+Inf' : '-Inf';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a < 1e-3 || a >= 1e6) return x.toExponential(digits - 1);
  return String(Number(x.toPrecision(digits)));
}

// Cosines sit near 1 for fine-tunes: 6 significant digits keep 0.99997 from reading as 1.
export function fmtCos(x) {
  return fmtNum(x, 6);
}

export function fmtPercent(f) {
  if (f === null || f === undefined || Number.isNaN(f)) return '—';
  return (f * 100).toFixed(f > 0 && f < 0.001 ? 3 : 1) + '%';
}

// Integers with thin grouping: 102714 -> "102,714".
export function fmtInt(n) {
  if (n === null || n === undefined) return '—';
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

// "2026-11-24T17:09:34Z" -> "2026-11-24 17:09:34 UTC" (UTC, so tests and screenshots agree).
export function fmtTime(s) {
  if (!s) return '—';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return String(s);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC');
}

// "sha256:0123456789abcdef..." -> "0123456789ab".
export function shortDigest(d) {
  if (!d) return '—';
  const s = String(d);
  const i = s.indexOf(':');
  return s.slice(i + 1, i + 13);
}

export function fmtShape(shape) {
  return Array.isArray(shape) ? '[' + shape.join(', ') + ']' : '—';
}

// The colour scale of the heatmaps: t in [0,1] -> an "rgb(r, g, b)" string from a pale
// yellow (no change) through orange to a dark red (the most change); null -> grey.
const kStops = [
  [255, 255, 229], [254, 227, 145], [254, 153, 41], [217, 95, 14], [153, 52, 4], [80, 20, 4],
];
export function colourAt(t) {
  if (t === null || t === undefined || Number.isNaN(t)) return 'rgb(221, 221, 221)';
  const x = Math.min(1, Math.max(0, t)) * (kStops.length - 1);
  const i = Math.min(kStops.length - 2, Math.floor(x));
  const f = x - i;
  const c = kStops[i].map((v, k) => Math.round(v + (kStops[i + 1][k] - v) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// Text colour readable on colourAt(t).
export function inkAt(t) {
  return t !== null && t !== undefined && t > 0.55 ? '#fff' : '#111';
}

// Maps values to [0,1]: linear, or logarithmic over the positive values (for quantities that
// span decades: relative change, max abs change, bytes). Returns a function v -> t|null.
// Log scale: 0 (no change) -> 0; positive values -> [kFloor, 1], so a changed cell never looks
// like an unchanged one; the range covers at least `span` decades below the maximum, so values
// that differ by a few percent get nearly the same colour.
const kFloor = 0.15;
export function makeScale(values, { log = false, min = undefined, max = undefined, span = 3 } = {}) {
  const vs = values.filter((v) => v !== null && v !== undefined && Number.isFinite(v) && (!log || v > 0));
  if (!vs.length) return (v) => (log && v === 0 ? 0 : null);
  let lo = min !== undefined ? min : Math.min(...vs);
  let hi = max !== undefined ? max : Math.max(...vs);
  if (log) {
    hi = Math.log10(hi);
    lo = Math.min(Math.log10(lo > 0 ? lo : Math.min(...vs)), hi - span);
    return (v) => {
      if (v === null || v === undefined || !Number.isFinite(v)) return null;
      if (v <= 0) return 0;
      return kFloor + (1 - kFloor) * Math.min(1, Math.max(0, (Math.log10(v) - lo) / (hi - lo)));
    };
  }
  return (v) => {
    if (v === null || v === undefined || !Number.isFinite(v)) return null;
    return hi === lo ? (v === 0 ? 0 : 1) : (v - lo) / (hi - lo);
  };
}
