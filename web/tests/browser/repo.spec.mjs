// The repository page: the versions timeline with the API numbers, the pull command, the
// upgrade patch size, and picking two versions for a diff.
import { test, expect, api, apiAsync } from './base.mjs';
import { fmtBytes, fmtTime, shortDigest } from '../../src/lib/format.js';
import { screenshotPath } from './fixtures.mjs';

test('timeline shows each version as /blz/versions gives it', async ({ page, st, problems, request }) => {
  const doc = await api(request, st, '/v2/demo/tiny-gpt2/blz/versions');
  expect(doc.versions.map((v) => v.digest)).toEqual([st.digests.ft, st.digests.base]);
  await page.goto(st.url + '/#/r/demo%2Ftiny-gpt2');
  const items = page.locator('li.version');
  await expect(items).toHaveCount(2);
  const host = new URL(st.url).host;
  for (const [i, v] of doc.versions.entries()) {
    const it = items.nth(i);
    await expect(it.locator('.tag')).toHaveText(v.tags);
    await expect(it.locator('a.digest')).toHaveText(shortDigest(v.digest));
    await expect(it.locator('dd.size')).toHaveText(fmtBytes(v.size));
    await expect(it).toContainText(fmtTime(v.pushed));
    await expect(it.locator('input.copy')).toHaveValue(`blz pull ${host}/demo/tiny-gpt2@${v.digest}`);
  }
  // The older version has no earlier version of its structure; the newer one's is the older.
  await expect(items.nth(1)).toContainText('no earlier version of this structure');
  expect(doc.versions[0].previous.digest).toBe(st.digests.base);
  await page.screenshot({ path: screenshotPath('repository'), fullPage: true });
  expect(problems).toEqual([]);
});

test('the upgrade patch size is the patch report\'s', async ({ page, st, problems, request }) => {
  const report = await apiAsync(request, st, `/v2/demo/tiny-gpt2/blz/patch-report?from=${st.digests.base}&to=${st.digests.ft}`);
  const doc = await api(request, st, '/v2/demo/tiny-gpt2/blz/versions');
  expect(doc.versions[0].previous.patch_bytes).toBe(report.patch_bytes);
  await page.goto(st.url + '/#/r/demo%2Ftiny-gpt2');
  await expect(page.locator('li.version').first().locator('.patch-bytes')).toHaveText(fmtBytes(report.patch_bytes));
  // The base is named NAME:TAG (issue 24 item 5), not only by digest.
  const base = doc.versions.find((v) => v.digest === st.digests.base);
  await expect(page.locator('li.version').first().locator('a.patch-from')).toHaveText(`from demo/tiny-gpt2:${base.tags[0]} (${shortDigest(st.digests.base)})`);
  expect(problems).toEqual([]);
});

test('a patch not computed yet can be computed from the page', async ({ page, st, problems, request }) => {
  const before = await api(request, st, '/v2/roberta/lora/blz/versions');
  const v1000 = before.versions.find((v) => v.digest === st.digests.ckpt1000);
  expect(v1000.previous.digest).toBe(st.digests.ckpt500);
  await page.goto(st.url + '/#/r/roberta%2Flora');
  const item = page.locator(`li.version[data-digest="${st.digests.ckpt1000}"]`);
  if (v1000.previous.patch_bytes === null) {
    await item.getByRole('button', { name: 'compute' }).click();
  }
  await expect(item.locator('.patch-bytes')).toBeVisible({ timeout: 20_000 });
  const report = await apiAsync(request, st, `/v2/roberta/lora/blz/patch-report?from=${st.digests.ckpt500}&to=${st.digests.ckpt1000}`);
  await expect(item.locator('.patch-bytes')).toHaveText(fmtBytes(report.patch_bytes));
  expect(problems).toEqual([]);
});

test('picking two versions opens their diff (older -> newer)', async ({ page, st, problems }) => {
  await page.goto(st.url + '/#/r/demo%2Ftiny-gpt2');
  await expect(page.locator('#compare')).toBeDisabled();
  const boxes = page.locator('li.version input[type=checkbox]');
  await boxes.nth(0).check();
  await boxes.nth(1).check();
  await page.locator('#compare').click();
  await expect(page).toHaveURL(new RegExp(`#/r/demo%2Ftiny-gpt2/diff/${st.digests.base}/${st.digests.ft}$`));
  await expect(page.locator('#summary')).toBeVisible();
  expect(problems).toEqual([]);
});
