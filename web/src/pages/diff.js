// #/r/<name>/diff/<from>/<to> — what changed between two versions and what it costs to ship:
// value-diff heatmap (layers × modules, switchable metric), patch-bytes heatmap from the
// patch's piece report, a sortable per-tensor table, the whole-model summary, and the
// structural diff when the structures differ. Diff and patch report load independently
// (`?async=1`, progress while they compute).
import { h, clear, route, append } from '../lib/dom.js';
import { getJson, getAsync, repoPath, enc } from '../lib/api.js';
import { fmtBytes, fmtCos, fmtInt, fmtNum, fmtPercent, fmtShape, shortDigest, makeScale } from '../lib/format.js';
import { buildGrid, combineMetrics, groupOf, kMetrics, colourValue } from '../lib/group.js';
import { heatmap } from '../lib/heatmap.js';
import { sortableTable, progressBox, errorBox } from '../lib/ui.js';
import { filePatchTotals, filePatchText, cosineText, cosineValue, relL2Text } from '../lib/report.js';

export async function diffPage(root, { name, from, to }, ctx) {
  const q = `from=${enc(from)}&to=${enc(to)}`;
  const state = { diff: null, report: null, metric: kMetrics[0] };

  const label = (d) => h('a', { href: route('r', name, 'v', d), title: d, text: shortDigest(d) });
  const title = h('h1', null, name, ': ', label(from), ' → ', label(to));
  const summary = h('dl#summary.facts');
  const structBox = h('section#structure');
  const valuesBox = h('div#values-map');
  const patchBox = h('div#patch-map');
  const detail = h('section#detail', { tabindex: -1, 'aria-live': 'polite' });
  const tableBox = h('div#tensor-table');
  const metricSel = h('div.metric-switch', { role: 'radiogroup', 'aria-label': 'heatmap metric' },
    kMetrics.map((m, i) => h('label', null,
      h('input', { type: 'radio', name: 'metric', value: m.key, checked: i === 0, onchange: () => { state.metric = m; renderValues(); } }),
      ' ' + m.label)));

  root.appendChild(h('section', null,
    h('nav.crumbs', null, h('a', { href: '#/', text: 'repositories' }), ' / ', h('a', { href: route('r', name), text: name }), ' / ', h('span', { text: 'diff' })),
    title,
    h('h2', { text: 'Summary' }), summary,
    structBox,
    h('h2', { text: 'Change by layer and module' }), metricSel, valuesBox,
    h('h2', { text: 'Patch bytes by layer and module' }), patchBox,
    detail,
    h('h2', { text: 'Tensors' }), tableBox));

  // Tags for the title (best effort: the page works without them).
  ctx.guard(getJson(repoPath(name, 'blz/versions'), { signal: ctx.signal }).then((doc) => {
    const tagOf = (d) => { const v = (doc.versions || []).find((x) => x.digest === d); return v && v.tags && v.tags.length ? v.tags.join(', ') : null; };
    for (const [d, a] of [[from, title.children[0]], [to, title.children[1]]]) {
      const t = tagOf(d);
      if (t) a.textContent = `${t} (${shortDigest(d)})`;
    }
  }).catch(() => {}));

  const vp = progressBox('value diff');
  valuesBox.appendChild(vp.el);
  const pp = progressBox('patch');
  patchBox.appendChild(pp.el);
  renderSummary();

  const diffDone = getAsync(repoPath(name, `blz/diff?${q}`), { onProgress: vp.update, signal: ctx.signal })
    .then((d) => { state.diff = d; renderSummary(); renderStructure(); renderValues(); renderTable(); })
    .catch((e) => { if (e.name !== 'AbortError') clear(valuesBox).appendChild(errorBox(e)); });
  const reportDone = getAsync(repoPath(name, `blz/patch-report?${q}`), { onProgress: pp.update, signal: ctx.signal })
    .then((r) => { state.report = r; renderSummary(); renderPatch(); renderTable(); })
    .catch((e) => { if (e.name !== 'AbortError') clear(patchBox).appendChild(errorBox(e)); });
  ctx.guard(diffDone);
  ctx.guard(reportDone);

  // One record per tensor: value-diff fields, plus the patch piece (patch_bytes, codec).
  function records() {
    const byName = new Map();
    const v = state.diff && state.diff.values;
    if (v) {
      for (const t of v.tensors || []) byName.set(t.name, { ...t, status: t.changed > 0 ? 'changed' : 'identical' });
      for (const t of v.added || []) byName.set(t.name, { ...t, status: 'added' });
      for (const t of v.removed || []) byName.set(t.name, { ...t, status: 'removed' });
      for (const t of v.not_comparable || []) byName.set(t.name, { ...t, status: 'not comparable' });
    }
    if (state.report) {
      for (const p of state.report.pieces || []) {
        if (p.kind && p.kind !== 'tensor') continue;
        const r = byName.get(p.name) || { name: p.name, status: null };
        r.patch_bytes = p.patch_bytes; r.codec = p.codec; r.target_bytes = p.target_bytes;
        byName.set(p.name, r);
      }
    }
    return [...byName.values()];
  }

  function renderSummary() {
    clear(summary);
    const add = (k, v, id) => summary.append(h('dt', { text: k }), h('dd', { id, text: v }));
    const r = state.report;
    if (r) {
      add('patch size', fmtBytes(r.patch_bytes), 'sum-patch');
      add('full size', fmtBytes(r.target_bytes), 'sum-full');
      add('patch / full', r.target_bytes ? fmtPercent(r.patch_bytes / r.target_bytes) : '—', 'sum-ratio');
      add('patch pieces', `${fmtInt(r.identical)} identical, ${fmtInt(r.patched)} patched, ${fmtInt(r.added)} added, ${fmtInt((r.removed || []).length)} removed`, 'sum-pieces');
    } else {
      add('patch size', 'computing…', 'sum-patch');
    }
    const v = state.diff && state.diff.values;
    if (v) {
      const ts = v.tensors || [];
      const changed = ts.filter((t) => t.changed > 0).length;
      add('identical tensors', fmtInt(ts.length - changed), 'sum-identical');
      add('changed tensors', fmtInt(changed), 'sum-changed');
      add('added tensors', fmtInt((v.added || []).length), 'sum-added');
      add('removed tensors', fmtInt((v.removed || []).length), 'sum-removed');
      if ((v.not_comparable || []).length) add('not comparable', fmtInt(v.not_comparable.length), 'sum-notcomparable');
      const m = v.model || {};
      add('model relative L2', relL2Text(m), 'sum-rel-l2');
      add('model changed fraction', fmtPercent(m.fraction_changed), 'sum-fraction');
      add('model cosine', cosineText(m), 'sum-cosine');
    } else {
      add('value diff', 'computing…', 'sum-values');
    }
  }

  function renderStructure() {
    clear(structBox);
    const s = state.diff.structure;
    if (!s || s.hash_equal) return;
    // Long lists start folded (a <details> per list).
    const list = (title, items, fmt) => (items && items.length
      ? h('details', { open: items.length <= 100 },
        h('summary', null, h('h3', { text: `${title} (${items.length})` })),
        h('ul.struct-list', null, items.map((x) => h('li', { text: fmt(x) }))))
      : null);
    append(structBox, [
      h('h2', { text: 'Structural diff' }),
      h('p.alarm', { text: `The structures differ${s.format_equal ? '' : ' (different formats)'}: a patch between them cannot reuse the tensor layout.` }),
      list('metadata added', s.metadata_added, (x) => (typeof x === 'string' ? x : JSON.stringify(x))),
      list('metadata removed', s.metadata_removed, (x) => (typeof x === 'string' ? x : JSON.stringify(x))),
      list('metadata changed', s.metadata_changed, (x) => `${x.key}: ${JSON.stringify(x.old_value)} → ${JSON.stringify(x.new_value)}`),
      list('tensors added', s.tensors_added, String),
      list('tensors removed', s.tensors_removed, String),
      list('tensors changed', s.tensor_changes, (x) => `${x.name}: ${x.dtype_old} ${fmtShape(x.shape_old)} → ${x.dtype_new} ${fmtShape(x.shape_new)}`)]);
  }

  function openCell({ layer, module, recs }) {
    clear(detail);
    const full = new Map(records().map((r) => [r.name, r]));
    const rows = recs.map((r) => full.get(r.name) || r);
    detail.append(
      h('h2', { text: `Layer ${layer === null ? '— (outside layers)' : layer} · ${module}` }),
      h('ul.detail-list', null, rows.map((r) => h('li', null,
        h('code', { text: r.name }), ' ',
        h('span', { text: [
          r.status,
          r.rel_l2 !== undefined ? `rel L2 ${relL2Text(r)}` : null,
          r.fraction_changed !== undefined ? `changed ${fmtPercent(r.fraction_changed)}` : null,
          r.cosine !== undefined ? `cos ${cosineText(r)}` : null,
          r.max_abs_change !== undefined ? `max |Δ| ${fmtNum(r.max_abs_change)}` : null,
          r.patch_bytes !== undefined ? `patch ${fmtBytes(r.patch_bytes)} (${r.codec})` : null,
        ].filter(Boolean).join(' · ') })))));
    detail.focus();
  }

  function renderValues() {
    const v = state.diff && state.diff.values;
    if (!v) return;
    clear(valuesBox);
    const recs = v.tensors || [];
    if (!recs.length) { valuesBox.appendChild(h('p', { text: 'No tensors with comparable values.' })); return; }
    const grid = buildGrid(recs);
    const m = state.metric;
    const value = (cell) => { const c = combineMetrics(cell); return c ? c[m.key] : null; };
    const all = [...grid.cells.values()].map((c) => colourValue(m, value(c)));
    const scale = makeScale(all, { log: m.log, min: m.min, max: m.max });
    valuesBox.appendChild(heatmap({
      grid, label: m.label,
      value, scale: (x) => scale(colourValue(m, x)),
      format: m.key === 'fraction_changed' ? fmtPercent : m.key === 'cosine' ? fmtCos : fmtNum,
      onOpen: openCell,
      log: m.log,
    }));
  }

  function renderPatch() {
    clear(patchBox);
    const pieces = (state.report.pieces || []).filter((p) => !p.kind || p.kind === 'tensor');
    if (!pieces.length) { patchBox.appendChild(h('p', { text: 'No tensor pieces in this patch.' })); return; }
    const grid = buildGrid(pieces);
    const value = (cell) => cell.reduce((s, p) => s + (p.patch_bytes || 0), 0);
    const scale = makeScale([...grid.cells.values()].map(value), { log: true });
    patchBox.appendChild(heatmap({ grid, label: 'patch bytes', value, scale, format: fmtBytes, onOpen: openCell, log: true }));
    // Per file: its header piece plus its tensors' pieces (a file whose tensors were all
    // patched is not "0 B (identical)" because its header was).
    const files = filePatchTotals(state.report.pieces);
    if (files.length) {
      patchBox.appendChild(h('p.files-note', { text: 'Files: ' + files.map(filePatchText).join('; ') }));
    }
  }

  function renderTable() {
    const rows = records().map((r) => ({ ...r, ...groupOf(r.name) }));
    clear(tableBox).appendChild(sortableTable({
      columns: [
        { key: 'name', label: 'tensor', cls: () => 'name' },
        { key: 'layer', label: 'layer', num: true, cell: (r) => (r.layer === null ? '—' : String(r.layer)) },
        { key: 'module', label: 'module' },
        { key: 'status', label: 'status', cell: (r) => r.status || '—' },
        { key: 'rel_l2', label: 'rel L2', num: true, cell: (r) => relL2Text(r) },
        { key: 'fraction_changed', label: 'changed', num: true, cell: (r) => fmtPercent(r.fraction_changed) },
        { key: 'cosine', label: 'cosine', num: true, sort: cosineValue, cell: (r) => cosineText(r) },
        { key: 'max_abs_change', label: 'max |Δ|', num: true, cell: (r) => fmtNum(r.max_abs_change) },
        { key: 'patch_bytes', label: 'patch', num: true, cell: (r) => fmtBytes(r.patch_bytes) },
        { key: 'codec', label: 'codec', cell: (r) => r.codec || '—' },
      ],
      rows,
      sortKey: 'patch_bytes',
      sortDir: -1,
      rowClass: (r) => (r.status === 'changed' ? null : r.status ? 'st-' + r.status.replace(/\s/g, '-') : null),
      onOpen: (r) => openCell({ ...groupOf(r.name), recs: [r] }),
    }).el);
  }
}
