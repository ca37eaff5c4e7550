// The JSON API client: the token from sessionStorage as `Authorization: Bearer`, registry
// errors turned into ApiError, and the `?async=1` polling of docs/registry-api.md.

const kTokenKey = 'blz-token';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function getToken() {
  try { return sessionStorage.getItem(kTokenKey) || ''; } catch { return ''; }
}
export function setToken(t) {
  try {
    if (t) sessionStorage.setItem(kTokenKey, t); else sessionStorage.removeItem(kTokenKey);
  } catch { /* storage disabled: the token lives for this page only */ }
}

function headers() {
  const t = getToken();
  const hs = { Accept: 'application/json' };
  if (t) hs.Authorization = 'Bearer ' + t;
  return hs;
}

async function errorOf(res) {
  let code = 'HTTP_' + res.status;
  let message = res.status + ' ' + res.statusText;
  try {
    const j = await res.json();
    const e = j && j.errors && j.errors[0];
    if (e) { code = e.code || code; message = e.message || message; }
  } catch { /* not JSON */ }
  return new ApiError(res.status, code, message);
}

// GET path → {json, res}; throws ApiError on a non-2xx answer.
export async function get(path, { signal } = {}) {
  const res = await fetch(path, { headers: headers(), signal, cache: 'no-store' });
  if (!res.ok) throw await errorOf(res);
  return { json: await res.json(), res };
}

export async function getJson(path, opts) {
  return (await get(path, opts)).json;
}

const sleep = (ms, signal) => new Promise((resolve, reject) => {
  const t = setTimeout(resolve, ms);
  if (signal) signal.addEventListener('abort', () => { clearTimeout(t); reject(new DOMException('aborted', 'AbortError')); }, { once: true });
});

// GET path with async=1 and poll while the answer is 202, calling onProgress(body) with each
// progress document ({state, phase, done, total, elapsed_ms}). Resolves with the final JSON.
export async function getAsync(path, { onProgress, signal } = {}) {
  const url = path + (path.includes('?') ? '&' : '?') + 'async=1';
  for (;;) {
    const res = await fetch(url, { headers: headers(), signal, cache: 'no-store' });
    if (res.status === 202) {
      let body = {};
      try { body = await res.json(); } catch { /* progress is optional */ }
      if (onProgress) onProgress(body);
      const ra = Number(res.headers.get('Retry-After'));
      await sleep(Number.isFinite(ra) && ra > 0 ? Math.min(ra, 5) * 1000 : 1000, signal);
      continue;
    }
    if (!res.ok) throw await errorOf(res);
    return res.json();
  }
}

// The next-page URL of a `Link: <...>; rel="next"` header, or null.
export function nextLink(res) {
  const link = res.headers.get('Link');
  if (!link) return null;
  const m = /<([^>]+)>\s*;\s*rel="?next"?/.exec(link);
  return m ? m[1] : null;
}

export const enc = encodeURIComponent;

// /v2/<name>/... with each path component of the repository name encoded.
export function repoPath(name, rest) {
  return '/v2/' + String(name).split('/').map(enc).join('/') + '/' + rest;
}
