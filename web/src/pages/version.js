// #/r/<name>/v/<digest> — one version: files, tensors (filter + sort), metadata (config.json,
// GGUF keys, small JSON files), and tensor statistics with the NaN/Inf alarms highlighted.
import { h, clear, route } from '../lib/dom.js';
import { getJson, getAsync, repoPath, enc } from '../lib/api.js';
import { fmtBytes, fmtTime, fmtInt, fmtNum, fmtShape, fmtPercent, shortDigest } from '../lib/format.js';
import { sortableTable, progressBox, errorBox, jsonTree, copyField } from '../lib/ui.js';
import { nonFiniteOf } from '../lib/report.js';

export async function versionPage(root, { name, digest }, ctx) {
  const v = await getJson(repoPath(name, `blz/version?digest=${enc(digest)}`), { signal: ctx.signal });
  const files = v.files || [];
  const tensors = v.tensors || [];
  const md = v.metadata || {};

  const filter = h('input#tensor-filter', { type: 'search', placeholder: 'filter tensors by name or dtype', 'aria-label': 'filter tensors' });
  const tensorCount = h('p.count', { 'aria-live': 'polite' });
  const tt = sortableTable({
    columns: [
      { key: 'name', label: 'name', cls: () => 'name' },
      { key: 'dtype', label: 'dtype' },
      { key: 'shape', label: 'shape', sort: (r) => (r.shape || []).reduce((a, b) => a * b, 1), cell: (r) => fmtShape(r.shape), num: true },
      { key: 'bytes', label: 'bytes', num: true, cell: (r) => fmtBytes(r.bytes) },
      { key: 'file', label: 'file' },
    ],
    rows: tensors,
  });
  const applyFilter = () => {
    const q = filter.value.trim().toLowerCase();
    const rows = q ? tensors.filter((t) => t.name.toLowerCase().includes(q) || String(t.dtype).toLowerCase() === q) : tensors;
    tt.setRows(rows);
    tensorCount.textContent = `${fmtInt(rows.length)} of ${fmtInt(tensors.length)} tensors`;
  };
  filter.addEventListener('input', applyFilter);

  const statsBox = h('div#stats');
  // The NaN/Inf alarm sits at the top of the page (issue 24: it was ~2,900 px down, under the
  // tensor list); filled when the statistics arrive.
  const banner = h('div#nan-banner', { role: 'status', 'aria-live': 'polite', hidden: true });
  root.appendChild(h('section', null,
    h('nav.crumbs', null, h('a', { href: '#/', text: 'repositories' }), ' / ', h('a', { href: route('r', name), text: name }), ' / ', h('span', { text: shortDigest(v.digest) })),
    h('h1', null, name, ' ', (v.tags || []).map((t) => h('span.tag', { text: t }))),
    banner,
    h('dl.facts', null,
      h('dt', { text: 'digest' }), h('dd', null, h('code', { text: v.digest })),
      h('dt', { text: 'format' }), h('dd#format', { text: v.format || '—' }),
      h('dt', { text: 'size' }), h('dd#size', { text: fmtBytes(v.size) }),
      h('dt', { text: 'pushed' }), h('dd', { text: fmtTime(v.pushed) }),
      h('dt', { text: 'structure' }), h('dd', null, h('code', { text: v.structure || '—' })),
      h('dt', { text: 'pull' }), h('dd', null, copyField(`blz pull ${location.host}/${name}@${v.digest}`, 'pull command'))),
    h('h2', { text: `Files (${files.length})` }),
    h('div#files', null, sortableTable({
      columns: [
        { key: 'path', label: 'path', cls: () => 'name' },
        { key: 'kind', label: 'kind' },
        { key: 'bytes', label: 'bytes', num: true, cell: (r) => fmtBytes(r.bytes) },
      ],
      rows: files,
    }).el),
    h('h2', { text: `Tensors (${tensors.length})` }),
    h('form.filter', { role: 'search', onsubmit: (e) => e.preventDefault() }, filter), tensorCount,
    h('div#tensors', null, tt.el),
    h('h2', { text: 'Metadata' }),
    metadataView(md),
    h('h2', { text: 'Statistics' }),
    statsBox));
  applyFilter();

  const prog = progressBox('statistics');
  statsBox.appendChild(prog.el);
  ctx.guard(getAsync(repoPath(name, `blz/stats?digest=${enc(digest)}`), { onProgress: prog.update, signal: ctx.signal })
    .then((doc) => {
      const st = doc.stats || doc;
      clear(statsBox).appendChild(statsView(st));
      const nf = nonFiniteOf(st.summary);
      if (nf) {
        const n = (st.tensors || []).filter((r) => r.all_non_finite || (r.nan || 0) + (r.pos_inf || 0) + (r.neg_inf || 0) > 0).length;
        banner.className = 'alarm nan-banner';
        banner.textContent = `⚠ This version has NaN/Inf values: ${fmtInt(n)} tensor${n === 1 ? '' : 's'} (${fmtInt(nf.all)} entirely non-finite; ${fmtInt(nf.nan)} NaN, ${fmtInt(nf.inf)} Inf in all). See Statistics below.`;
        banner.hidden = false;
      }
    })
    .catch((e) => { if (e.name !== 'AbortError') clear(statsBox).appendChild(errorBox(e)); }));
}

function metadataView(md) {
  const parts = [];
  if (md.config) parts.push(h('h3', { text: 'config.json' }), h('div#config', null, jsonTree(md.config)));
  if (md.gguf) {
    const keys = Object.entries(md.gguf).map(([key, value]) => ({ key, value }));
    parts.push(h('h3', { text: `GGUF keys (${keys.length})` }), h('div#gguf-keys', null, sortableTable({
      columns: [
        { key: 'key', label: 'key', cls: () => 'name' },
        { key: 'value', label: 'value', sort: (r) => JSON.stringify(r.value), cell: (r) => valueText(r.value) },
      ],
      rows: keys,
    }).el));
  }
  for (const [path, doc] of Object.entries(md.files || {})) {
    if (path === 'config.json' && md.config) continue;
    parts.push(h('h3', { text: path }), jsonTree(doc));
  }
  if (!parts.length) parts.push(h('p', { text: 'No metadata.' }));
  return h('div.metadata', null, parts);
}

function valueText(v) {
  if (Array.isArray(v)) {
    const head = JSON.stringify(v.slice(0, 8));
    return v.length > 8 ? `${head.slice(0, -1)}, …] (${fmtInt(v.length)} items)` : head;
  }
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.length > 300 ? s.slice(0, 300) + '…' : s;
}

function statsView(st) {
  const s = st.summary || {};
  const rows = st.tensors || [];
  const alarm = (r) => r.all_non_finite || (r.nan || 0) + (r.pos_inf || 0) + (r.neg_inf || 0) > 0;
  const alarms = rows.filter(alarm);
  const summary = h('p.stats-summary', {
    class: alarms.length ? 'alarm' : 'ok',
    text: alarms.length
      ? `⚠ ${alarms.length} tensor${alarms.length > 1 ? 's' : ''} with NaN/Inf values (${fmtInt(s.all_non_finite || 0)} entirely non-finite; ${fmtInt(s.nan || 0)} NaN, ${fmtInt((s.pos_inf || 0) + (s.neg_inf || 0))} Inf in all).`
      : `All ${fmtInt(rows.length)} tensors finite.`,
  });
  return h('div', null, summary, sortableTable({
    columns: [
      { key: 'name', label: 'name', cls: () => 'name' },
      { key: 'dtype', label: 'dtype' },
      { key: 'min', label: 'min', num: true, cell: (r) => fmtNum(r.min) },
      { key: 'max', label: 'max', num: true, cell: (r) => fmtNum(r.max) },
      { key: 'mean', label: 'mean', num: true, cell: (r) => fmtNum(r.mean) },
      { key: 'std', label: 'std', num: true, cell: (r) => fmtNum(r.std) },
      { key: 'zero_fraction', label: 'zeros', num: true, cell: (r) => fmtPercent(r.zero_fraction) },
      { key: 'nan', label: 'NaN', num: true, cell: (r) => fmtInt(r.nan) },
      { key: 'inf', label: 'Inf', num: true, sort: (r) => (r.pos_inf || 0) + (r.neg_inf || 0), cell: (r) => fmtInt((r.pos_inf || 0) + (r.neg_inf || 0)) },
    ],
    rows,
    rowClass: (r) => (alarm(r) ? 'alarm' : null),
  }).el);
}
