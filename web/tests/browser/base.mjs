// The test object of every browser test: skips with the setup's message when the corpus is
// missing, collects console errors, page errors and dialogs (an alert() from injected markup
// would be one), and fails the test if any appeared. `allowConsole` lists regexps of console
// errors a test expects (the 401s of the private registry).
import { test as base, expect } from '@playwright/test';
import { state } from './fixtures.mjs';

export const test = base.extend({
  st: async ({}, use) => { // eslint-disable-line no-empty-pattern
    const s = state();
    base.skip(Boolean(s.skip), s.skip);
    await use(s);
  },
  allowConsole: [[], { option: true }],
  problems: async ({ page, allowConsole }, use) => {
    const problems = [];
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      const text = m.text();
      if (allowConsole.some((re) => re.test(text))) return;
      problems.push(`console error: ${text}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('dialog', (d) => { problems.push(`dialog (${d.type()}): ${d.message()}`); d.dismiss().catch(() => {}); });
    await use(problems);
    expect(problems, 'no console errors, page errors or dialogs').toEqual([]);
  },
});
export { expect };

// GET a JSON endpoint of the registry (the numbers the page must show).
export async function api(request, st, p, token) {
  const r = await request.get(st.url + p, { headers: token ? { Authorization: 'Bearer ' + token } : {} });
  expect(r.status(), `${p}: ${await r.text()}`).toBe(200);
  return r.json();
}

// Polls an async endpoint until it answers 200.
export async function apiAsync(request, st, p) {
  for (let i = 0; i < 300; i++) {
    const r = await request.get(st.url + p + (p.includes('?') ? '&' : '?') + 'async=1');
    if (r.status() === 200) return r.json();
    expect(r.status(), `${p}: ${await r.text()}`).toBe(202);
    await new Promise((res) => setTimeout(res, 200));
  }
  throw new Error(`${p}: still computing`);
}
