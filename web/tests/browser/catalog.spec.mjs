// The catalog page: the repositories and their numbers as the JSON API gives them, the
// server-side filter and pagination.
import { test, expect, api } from './base.mjs';
import { fmtBytes, fmtInt, fmtTime } from '../../src/lib/format.js';
import { screenshotPath } from './fixtures.mjs';

test('catalog lists every repository with the API numbers', async ({ page, st, problems, request }) => {
  const doc = await api(request, st, '/v2/_blz/repositories');
  expect(doc.total).toBe(5); // global_setup.mjs pushes five repositories
  await page.goto(st.url + '/#/');
  const rows = page.locator('#catalog tbody tr');
  await expect(rows).toHaveCount(doc.repositories.length);
  for (const [i, r] of doc.repositories.entries()) {
    const cells = rows.nth(i).locator('td');
    await expect(cells.nth(0).locator('a')).toHaveText(r.name);
    await expect(cells.nth(1)).toHaveText(fmtInt(r.versions));
    await expect(cells.nth(2)).toHaveText(r.latest.tag ?? '(untagged)');
    await expect(cells.nth(3)).toHaveText(fmtBytes(r.latest.size));
    await expect(cells.nth(4)).toHaveText(fmtTime(r.last_push));
  }
  await expect(page.locator('p.count')).toContainText('5 repositories');
  await page.screenshot({ path: screenshotPath('catalog'), fullPage: true });
  expect(problems).toEqual([]);
});

test('the filter box asks the server (q) and the URL keeps it', async ({ page, st, problems, request }) => {
  const doc = await api(request, st, '/v2/_blz/repositories?q=tiny');
  await page.goto(st.url + '/#/');
  await expect(page.locator('#catalog tbody tr')).toHaveCount(5);
  const seen = page.waitForRequest((r) => r.url().includes('/v2/_blz/repositories') && r.url().includes('q=tiny'));
  await page.locator('#filter').fill('tiny');
  await seen;
  await expect(page.locator('#catalog tbody tr')).toHaveCount(doc.repositories.length);
  await expect(page.locator('#catalog tbody tr td:first-child')).toHaveText(doc.repositories.map((r) => r.name));
  await expect(page).toHaveURL(/#\/\?q=tiny$/);
  await page.locator('#filter').fill('no-such-repository');
  await expect(page.locator('#catalog tbody tr')).toHaveCount(0);
  await expect(page.locator('p.count')).toContainText('0 repositories');
  expect(problems).toEqual([]);
});

test('pagination: "more" loads the next server page', async ({ page, st, problems }) => {
  const seen = [];
  page.on('request', (r) => { if (r.url().includes('/v2/_blz/repositories')) seen.push(new URL(r.url()).search); });
  await page.goto(st.url + '/#/?n=2');
  await expect(page.locator('#catalog tbody tr')).toHaveCount(2);
  await page.locator('#more').click();
  await expect(page.locator('#catalog tbody tr')).toHaveCount(4);
  await page.locator('#more').click();
  await expect(page.locator('#catalog tbody tr')).toHaveCount(5);
  await expect(page.locator('#more')).toBeHidden();
  await expect(page.locator('p.count')).toContainText('5 repositories, 5 shown');
  expect(seen.length).toBe(3); // one server page per click, n=2 each
  expect(seen.every((q) => q.includes('n=2'))).toBe(true);
  const names = await page.locator('#catalog tbody tr td:first-child').allTextContents();
  expect(names).toEqual([...names].sort());
  expect(new Set(names).size).toBe(5);
  expect(problems).toEqual([]);
});
