// blz web view: hash router, token handling for private registries, page frame.
// Routes: #/ catalog, #/r/<name> repository, #/r/<name>/v/<digest> version,
// #/r/<name>/diff/<from>/<to> diff. Repository names may contain '/', so the fixed
// keywords ('v', 'diff') are searched from the end of the path.
import { h, clear, append } from './lib/dom.js';
import { getToken, setToken } from './lib/api.js';
import { errorBox } from './lib/ui.js';
import { catalogPage } from './pages/catalog.js';
import { repoPage } from './pages/repo.js';
import { versionPage } from './pages/version.js';
import { diffPage } from './pages/diff.js';

export function parseRoute(hash) {
  let s = String(hash || '').replace(/^#/, '');
  let query = {};
  const qi = s.indexOf('?');
  if (qi >= 0) { query = Object.fromEntries(new URLSearchParams(s.slice(qi + 1))); s = s.slice(0, qi); }
  const parts = s.split('/').filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch { return p; } });
  if (parts[0] !== 'r' || parts.length < 2) return { page: 'catalog', params: {}, query };
  const rest = parts.slice(1);
  const n = rest.length;
  if (n >= 4 && rest[n - 3] === 'diff') return { page: 'diff', params: { name: rest.slice(0, n - 3).join('/'), from: rest[n - 2], to: rest[n - 1] }, query };
  if (n >= 3 && rest[n - 2] === 'v') return { page: 'version', params: { name: rest.slice(0, n - 2).join('/'), digest: rest[n - 1] }, query };
  return { page: 'repo', params: { name: rest.join('/') }, query };
}

const kPages = { catalog: catalogPage, repo: repoPage, version: versionPage, diff: diffPage };
const kTitles = { catalog: 'repositories', repo: 'repository', version: 'version', diff: 'diff' };

let current = null;

function tokenForm(main, err) {
  const input = h('input#token', { type: 'password', autocomplete: 'off', required: true, 'aria-label': 'API token' });
  const form = h('form#token-form.token-form', {
    onsubmit: (e) => { e.preventDefault(); setToken(input.value.trim()); render(); },
  },
  h('h1', { text: 'This registry is private' }),
  h('p', { text: getToken() ? 'The token was refused: ' + err.message : 'Enter an API token to browse it (kept in this tab only).' }),
  h('label', { for: 'token', text: 'API token ' }), input, ' ',
  h('button', { type: 'submit' }, 'open'));
  clear(main).appendChild(form);
  input.focus();
}

function renderHeader(header) {
  append(clear(header), [
    h('a.brand', { href: '#/', text: 'blz' }),
    h('span.sub', { text: ' model registry' }),
    getToken() ? h('button.signout', { type: 'button', onclick: () => { setToken(''); render(); } }, 'forget token') : null]);
}

export async function render() {
  if (current) current.abort();
  const ctrl = new AbortController();
  current = ctrl;
  const header = document.getElementById('top');
  const main = document.getElementById('app');
  renderHeader(header);
  clear(main);
  const { page, params, query } = parseRoute(location.hash);
  document.title = `blz · ${kTitles[page]}${params.name ? ' · ' + params.name : ''}`;
  const onError = (e) => {
    if (ctrl.signal.aborted || (e && e.name === 'AbortError')) return;
    if (e && e.status === 401) { tokenForm(main, e); return; }
    main.appendChild(errorBox(e));
  };
  // guard(promise): background work of the page (polling, "more"); a 401 there shows the form.
  const ctx = { signal: ctrl.signal, query, guard: (p) => { p.catch(onError); return p; } };
  try {
    await kPages[page](main, params, ctx);
  } catch (e) {
    onError(e);
  }
}

if (typeof window !== 'undefined' && typeof document !== 'undefined') {
  window.addEventListener('hashchange', render);
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', render);
  else render();
}
