// #/ — the catalog: repositories with version count, latest tag and size, last push; a filter
// box (server-side `q`) and server-side pagination ("more").
import { h, clear, route } from '../lib/dom.js';
import { get, nextLink, enc } from '../lib/api.js';
import { fmtBytes, fmtTime, fmtInt } from '../lib/format.js';
import { errorBox } from '../lib/ui.js';
import { nonFiniteOf, nonFiniteText } from '../lib/report.js';

const kPage = 50;

export async function catalogPage(root, _params, ctx) {
  const q = ctx.query.q || '';
  // Page size: 50, or #/?n=N (1..1000; the tests use it to page through a few repositories).
  const n = Math.min(1000, Math.max(1, Number(ctx.query.n) || kPage));
  const input = h('input#filter', { type: 'search', placeholder: 'filter repositories', value: q, 'aria-label': 'filter repositories' });
  const count = h('p.count', { 'aria-live': 'polite' });
  const tbody = h('tbody');
  const more = h('button#more', { type: 'button', hidden: true }, 'more');
  const status = h('div');
  root.appendChild(h('section', null,
    h('h1', { text: 'Repositories' }),
    h('form.filter', { role: 'search', onsubmit: (e) => e.preventDefault() }, input),
    count, status,
    h('table.data#catalog', null,
      h('thead', null, h('tr', null, ['name', 'versions', 'latest tag', 'latest size', 'last push'].map((t, i) => h('th', { scope: 'col', class: i === 1 || i === 3 ? 'num' : null, text: t })))),
      tbody),
    more));

  let next = null;
  let gen = 0;
  async function load(url, reset) {
    const my = ++gen;
    try {
      const { json, res } = await get(url, { signal: ctx.signal });
      if (my !== gen) return;
      if (reset) clear(tbody);
      clear(status);
      for (const r of json.repositories || []) {
        const l = r.latest;
        // The latest version's NaN/Inf counts, when its statistics were computed.
        const nf = l ? nonFiniteOf(l.non_finite) : null;
        tbody.appendChild(h('tr', { class: nf ? 'alarm' : null },
          h('td', null, h('a', { href: route('r', r.name), text: r.name }),
            nf ? [' ', h('span.nan-flag', { title: 'the latest version has NaN/Inf values', text: nonFiniteText(nf) })] : null),
          h('td.num', { text: fmtInt(r.versions) }),
          h('td', { text: l ? (l.tag === null || l.tag === undefined ? '(untagged)' : l.tag) : '—' }),
          h('td.num', { text: l ? fmtBytes(l.size) : '—' }),
          h('td', { text: fmtTime(r.last_push) })));
      }
      const total = json.total;
      count.textContent = `${fmtInt(total)} repositor${total === 1 ? 'y' : 'ies'}${input.value ? ' matching “' + input.value + '”' : ''}, ${fmtInt(tbody.rows.length)} shown`;
      next = nextLink(res);
      if (!next && tbody.rows.length < total && json.repositories && json.repositories.length) {
        const last = json.repositories[json.repositories.length - 1].name;
        next = `/v2/_blz/repositories?n=${n}&last=${enc(last)}${input.value ? '&q=' + enc(input.value) : ''}`;
      }
      more.hidden = !next;
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 401) throw e;
      clear(status).appendChild(errorBox(e));
    }
  }
  more.addEventListener('click', () => { if (next) ctx.guard(load(next, false)); });
  let timer = null;
  input.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      // Keep the filter in the URL without re-rendering the page.
      const qs = new URLSearchParams({ ...(input.value ? { q: input.value } : {}), ...(ctx.query.n ? { n } : {}) }).toString();
      history.replaceState(null, '', qs ? '#/?' + qs : '#/');
      ctx.guard(load(firstUrl(), true));
    }, 200);
  });
  const firstUrl = () => `/v2/_blz/repositories?n=${n}${input.value ? '&q=' + enc(input.value) : ''}`;
  await load(firstUrl(), true);
  input.focus();
}
