// Small widgets shared by the pages: sortable keyboard-navigable tables, progress lines,
// error boxes, copy fields. All built with lib/dom.js (no HTML parsing).
import { h, clear } from './dom.js';

// Moves focus among `items` (roving tabindex): the focused one has tabindex 0, others -1.
export function rove(items, next) {
  for (const it of items) it.tabIndex = -1;
  if (next) { next.tabIndex = 0; next.focus(); }
}

// columns: [{key, label, num, sort: row -> comparable, cell: row -> string|Node, cls}]
// Returns {el, setRows(rows)}. Rows: Arrow keys/Home/End move, Enter calls onOpen(row).
export function sortableTable({ columns, rows, sortKey, sortDir = 1, onOpen, rowClass, caption, limit = 2000 }) {
  let data = rows || [];
  let key = sortKey || null;
  let dir = sortDir;
  let shown = limit;
  const thead = h('thead');
  const tbody = h('tbody');
  const foot = h('div.table-foot');
  const table = h('table.data', null, caption ? h('caption', { text: caption }) : null, thead, tbody);
  const el = h('div.table-wrap', null, table, foot);

  function sorted() {
    if (!key) return data;
    const col = columns.find((c) => c.key === key);
    const val = col.sort || ((r) => r[col.key]);
    return [...data].sort((a, b) => {
      const x = val(a), y = val(b);
      const xn = x === null || x === undefined, yn = y === null || y === undefined;
      if (xn || yn) return xn && yn ? 0 : xn ? 1 : -1; // empty values last either way
      return (x < y ? -1 : x > y ? 1 : 0) * dir;
    });
  }

  function renderHead() {
    clear(thead);
    thead.appendChild(h('tr', null, columns.map((c) => {
      const active = c.key === key;
      return h('th', { scope: 'col', class: c.num ? 'num' : null, 'aria-sort': active ? (dir > 0 ? 'ascending' : 'descending') : 'none' },
        c.nosort ? c.label : h('button.sort', {
          type: 'button',
          onclick: () => { if (key === c.key) dir = -dir; else { key = c.key; dir = c.num ? -1 : 1; } render(); },
        }, c.label, active ? (dir > 0 ? ' ▲' : ' ▼') : ''));
    })));
  }

  function renderBody() {
    clear(tbody);
    const list = sorted();
    list.slice(0, shown).forEach((r, i) => {
      const tr = h('tr', {
        tabindex: i === 0 ? 0 : -1,
        class: rowClass ? rowClass(r) : null,
        onkeydown: (e) => {
          const rowsEls = [...tbody.rows];
          const idx = rowsEls.indexOf(tr);
          let next = null;
          if (e.key === 'ArrowDown') next = rowsEls[idx + 1];
          else if (e.key === 'ArrowUp') next = rowsEls[idx - 1];
          else if (e.key === 'Home') next = rowsEls[0];
          else if (e.key === 'End') next = rowsEls[rowsEls.length - 1];
          else if (e.key === 'Enter' && onOpen && e.target === tr) { e.preventDefault(); onOpen(r, tr); return; }
          else return;
          e.preventDefault();
          if (next) rove(rowsEls, next);
        },
        onclick: onOpen ? (e) => { if (!e.target.closest('a,button,input')) onOpen(r, tr); } : null,
      }, columns.map((c) => {
        const v = c.cell ? c.cell(r) : r[c.key];
        return h('td', { class: [c.num ? 'num' : '', c.cls ? c.cls(r) : ''].filter(Boolean).join(' ') || null }, v);
      }));
      tbody.appendChild(tr);
    });
    clear(foot);
    if (list.length > shown) {
      foot.appendChild(h('button', { type: 'button', onclick: () => { shown = Infinity; renderBody(); } },
        `show all ${list.length} rows (${shown} shown)`));
    }
  }

  function render() { renderHead(); renderBody(); }
  render();
  return { el, setRows(r) { data = r; renderBody(); } };
}

// A progress line for a 202 computation: {phase, done, total, elapsed_ms}.
export function progressBox(label) {
  const text = h('span.progress-text', { text: `${label}: waiting…` });
  const bar = h('progress', { max: 1 });
  const el = h('div.progress', { role: 'status', 'aria-live': 'polite' }, text, ' ', bar);
  return {
    el,
    update(p) {
      const parts = [label + ':', p.phase || p.state || 'computing'];
      if (p.done !== null && p.done !== undefined && p.total) {
        parts.push(`${p.done}/${p.total}`);
        bar.max = p.total; bar.value = p.done;
      } else {
        bar.removeAttribute('value');
      }
      if (p.elapsed_ms !== undefined && p.elapsed_ms !== null) parts.push(`(${(p.elapsed_ms / 1000).toFixed(1)} s)`);
      text.textContent = parts.join(' ');
    },
  };
}

export function errorBox(err) {
  return h('div.error', { role: 'alert' }, h('strong', { text: 'Error: ' }), String(err && err.message ? err.message : err));
}

// A read-only field holding `text` and a button that copies it.
export function copyField(text, label) {
  const input = h('input.copy', { type: 'text', readonly: true, value: text, 'aria-label': label || 'command', size: Math.min(60, text.length) });
  const btn = h('button', {
    type: 'button',
    onclick: async () => {
      input.select();
      try { await navigator.clipboard.writeText(text); btn.textContent = 'copied'; } catch { btn.textContent = 'press Ctrl+C'; }
      setTimeout(() => { btn.textContent = 'copy'; }, 1500);
    },
  }, 'copy');
  return h('span.copy-field', null, input, btn);
}

// A JSON value as a nested definition list (text only).
export function jsonTree(v, depth = 0) {
  if (v === null || typeof v !== 'object') return h('code', { text: JSON.stringify(v) });
  if (Array.isArray(v)) {
    if (v.length > 16 || depth > 3) {
      const s = JSON.stringify(v);
      return h('code', { text: s.length > 300 ? s.slice(0, 300) + `… (${v.length} items)` : s });
    }
  }
  const entries = Object.entries(v);
  if (depth > 3) return h('code', { text: JSON.stringify(v).slice(0, 300) });
  return h('dl.json', null, entries.map(([k, x]) => [h('dt', { text: k }), h('dd', null, jsonTree(x, depth + 1))]));
}
