// A layers × modules heatmap as an ARIA grid: one focusable cell at a time (roving tabindex),
// arrow keys move, Home/End go to the row's ends, Enter (or click) opens the cell's detail.
// Focusing a cell also shows its value in the caption line (tooltip for keyboard users).
import { h } from './dom.js';
import { colourAt, inkAt } from './format.js';
import { cellKey } from './group.js';
import { rove } from './ui.js';

// grid: {rows, cols, cells} from group.buildGrid; value(recs) -> number|null; scale(v) -> t;
// format(v) -> string; onOpen({layer, module, recs}); log: the scale is logarithmic (legend).
export function heatmap({ grid, value, scale, format, label, onOpen, log = false }) {
  const info = h('div.cell-info', { 'aria-live': 'polite', text: 'Focus or hover a cell for its value; Enter opens its tensors.' });
  const cellsEls = [];
  const rowName = (l) => (l === null ? 'other' : 'layer ' + l);
  let first = true;
  const body = grid.rows.map((layer, ri) => h('tr', null,
    h('th', { scope: 'row', text: layer === null ? '—' : String(layer) }),
    grid.cols.map((mod, ci) => {
      const recs = grid.cells.get(cellKey(layer, mod));
      if (!recs) {
        const td = h('td.empty', { role: 'gridcell', 'aria-label': `${rowName(layer)} ${mod}: no tensor` });
        td.dataset.r = ri; td.dataset.c = ci;
        cellsEls.push(td);
        td.tabIndex = -1;
        return td;
      }
      const v = value(recs);
      const t = scale(v);
      const text = `${rowName(layer)} · ${mod}: ${label} ${format(v)} (${recs.length} tensor${recs.length > 1 ? 's' : ''})`;
      const td = h('td.cell', {
        role: 'gridcell',
        title: text,
        'aria-label': text,
        tabindex: first ? 0 : -1,
        style: { 'background-color': colourAt(t), color: inkAt(t) },
        onfocus: () => { info.textContent = text; },
        onmouseenter: () => { info.textContent = text; },
        onclick: () => { rove(cellsEls, td); onOpen({ layer, module: mod, recs }); },
      });
      td.dataset.r = ri; td.dataset.c = ci; td.dataset.layer = layer === null ? '' : layer; td.dataset.module = mod;
      first = false;
      cellsEls.push(td);
      return td;
    })));
  const table = h('table.heatmap', { role: 'grid', 'aria-label': `${label} by layer and module` },
    h('thead', null, h('tr', null, h('th', { text: 'layer' }), grid.cols.map((c) => h('th', { scope: 'col', class: 'col-head', title: c, text: c })))),
    h('tbody', null, body));
  const at = (r, c) => cellsEls.find((e) => Number(e.dataset.r) === r && Number(e.dataset.c) === c);
  table.addEventListener('keydown', (e) => {
    const td = e.target.closest('td');
    if (!td) return;
    const r = Number(td.dataset.r), c = Number(td.dataset.c);
    let next = null;
    if (e.key === 'ArrowRight') next = at(r, c + 1);
    else if (e.key === 'ArrowLeft') next = at(r, c - 1);
    else if (e.key === 'ArrowDown') next = at(r + 1, c);
    else if (e.key === 'ArrowUp') next = at(r - 1, c);
    else if (e.key === 'Home') next = at(r, 0);
    else if (e.key === 'End') next = at(r, grid.cols.length - 1);
    else if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      const recs = grid.cells.get(cellKey(grid.rows[r], grid.cols[c]));
      if (recs) onOpen({ layer: grid.rows[r], module: grid.cols[c], recs });
      return;
    } else return;
    e.preventDefault();
    if (next) {
      rove(cellsEls, next);
      if (next.classList.contains('empty')) info.textContent = next.getAttribute('aria-label');
    }
  });
  // Legend: the colour ramp from the lowest to the highest value shown.
  const vals = [...grid.cells.values()].map(value).filter((v) => v !== null && v !== undefined && Number.isFinite(v));
  const legend = vals.length ? h('div.legend', { 'aria-hidden': 'true' },
    h('span', { text: format(Math.min(...vals)) }),
    h('span.ramp', null, [0, 0.2, 0.4, 0.6, 0.8, 1].map((t) => h('span.swatch', { style: { 'background-color': colourAt(t) } }))),
    h('span', { text: format(Math.max(...vals)) + (log ? ' (log scale)' : '') })) : null;
  return h('div.heatmap-wrap', null, h('div.heatmap-scroll', null, table), legend, info);
}
