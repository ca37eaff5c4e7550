// The version page: files, tensors (filter, sort), metadata and statistics, as the API gives them.
import { test, expect, api, apiAsync } from './base.mjs';
import { fmtBytes, fmtShape, fmtInt, fmtNum } from '../../src/lib/format.js';
import { screenshotPath } from './fixtures.mjs';

test('safetensors version: files, tensors, config.json, statistics', async ({ page, st, problems, request }) => {
  const d = st.digests.ft;
  const v = await api(request, st, `/v2/demo/tiny-gpt2/blz/version?digest=${d}`);
  expect(v.tensors.length).toBe(28); // PROVENANCE.md: 28 tensors
  await page.goto(st.url + `/#/r/demo%2Ftiny-gpt2/v/${d}`);
  await expect(page.locator('#format')).toHaveText(v.format);
  await expect(page.locator('#size')).toHaveText(fmtBytes(v.size));
  const rows = page.locator('#tensors tbody tr');
  await expect(rows).toHaveCount(v.tensors.length);
  // Every tensor with its dtype, shape and bytes.
  const byName = new Map(v.tensors.map((t) => [t.name, t]));
  const shown = await rows.evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  for (const [name, dtype, shape, bytes] of shown) {
    const t = byName.get(name);
    expect(t, name).toBeTruthy();
    expect([dtype, shape, bytes]).toEqual([t.dtype, fmtShape(t.shape), fmtBytes(t.bytes)]);
  }
  await expect(page.locator('p.count').first()).toHaveText(`${v.tensors.length} of ${v.tensors.length} tensors`);
  // Filter.
  await page.locator('#tensor-filter').fill('c_attn');
  const want = v.tensors.filter((t) => t.name.includes('c_attn')).length;
  expect(want).toBeGreaterThan(0);
  await expect(rows).toHaveCount(want);
  for (const n of await rows.locator('td:first-child').allTextContents()) expect(n).toContain('c_attn');
  await page.locator('#tensor-filter').fill('');
  // Sort by bytes (descending first), then ascending.
  await page.locator('#tensors th button', { hasText: 'bytes' }).click();
  const maxT = [...v.tensors].sort((a, b) => b.bytes - a.bytes)[0];
  await expect(rows.first().locator('td').nth(3)).toHaveText(fmtBytes(maxT.bytes));
  await expect(page.locator('#tensors th[aria-sort=descending]')).toHaveCount(1);
  await page.locator('#tensors th button', { hasText: 'bytes' }).click();
  const minT = [...v.tensors].sort((a, b) => a.bytes - b.bytes)[0];
  await expect(rows.first().locator('td').nth(3)).toHaveText(fmtBytes(minT.bytes));
  // Files and config.json.
  await expect(page.locator('#files tbody tr')).toHaveCount(v.files.length);
  const fileRows = await page.locator('#files tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  expect(fileRows.sort()).toEqual(v.files.map((f) => [f.path, f.kind, fmtBytes(f.bytes)]).sort());
  expect(v.metadata.config).toBeTruthy();
  await expect(page.locator('#config')).toContainText(String(v.metadata.config.model_type));
  // Statistics: all finite for this model.
  const stats = await apiAsync(request, st, `/v2/demo/tiny-gpt2/blz/stats?digest=${d}`);
  const s = stats.stats || stats;
  await expect(page.locator('.stats-summary')).toHaveText(`All ${fmtInt(s.tensors.length)} tensors finite.`);
  const first = s.tensors[0];
  const statRow = page.locator('#stats tbody tr', { has: page.getByRole('cell', { name: first.name, exact: true }) });
  await expect(statRow.locator('td').nth(2)).toHaveText(fmtNum(first.min));
  await expect(statRow.locator('td').nth(3)).toHaveText(fmtNum(first.max));
  await page.screenshot({ path: screenshotPath('version-safetensors'), fullPage: true });
  expect(problems).toEqual([]);
});

test('GGUF version: tensors in GGUF naming and the GGUF keys', async ({ page, st, problems, request }) => {
  const d = st.digests.gguf;
  const v = await api(request, st, `/v2/gguf/llama-tiny/blz/version?digest=${d}`);
  expect(v.tensors.length).toBe(12); // PROVENANCE.md: 9 F16 + 3 F32
  // Statistics computed before the page opens, so both tables are there at once (CI's order).
  await apiAsync(request, st, `/v2/gguf/llama-tiny/blz/stats?digest=${d}`);
  await page.goto(st.url + `/#/r/gguf%2Fllama-tiny/v/${d}`);
  await expect(page.locator('#tensors tbody tr')).toHaveCount(12);
  // Scoped to the tensor table: once statistics are computed (which may already be the case when
  // the page opens), the statistics table names the same tensor.
  await expect(page.locator('#tensors').getByRole('cell', { name: 'blk.0.attn_q.weight', exact: true })).toBeVisible();
  expect(v.metadata.gguf).toBeTruthy();
  const keys = Object.keys(v.metadata.gguf);
  await expect(page.locator('#gguf-keys tbody tr')).toHaveCount(keys.length);
  await expect(page.locator('#gguf-keys')).toContainText('general.architecture');
  await expect(page.locator('#gguf-keys tbody tr', { hasText: 'general.architecture' }).locator('td').nth(1)).toHaveText(String(v.metadata.gguf['general.architecture']));
  await expect(page.locator('.stats-summary')).toBeVisible({ timeout: 20_000 });
  await page.screenshot({ path: screenshotPath('version-gguf'), fullPage: true });
  expect(problems).toEqual([]);
});

test('NaN/Inf alarms of the statistics are highlighted', async ({ page, st, problems, request }) => {
  const d = st.digests.nan;
  const stats = await apiAsync(request, st, `/v2/adapters/gemma-nan/blz/stats?digest=${d}`);
  const s = stats.stats || stats;
  expect(s.summary.all_non_finite).toBe(72);
  await page.goto(st.url + `/#/r/adapters%2Fgemma-nan/v/${d}`);
  await expect(page.locator('.stats-summary.alarm')).toContainText('72 tensors with NaN/Inf values');
  await expect(page.locator('.stats-summary.alarm')).toContainText(`${fmtInt(s.summary.nan)} NaN`);
  await expect(page.locator('#stats tbody tr.alarm')).toHaveCount(72);
  const bg = await page.locator('#stats tbody tr.alarm').first().evaluate((e) => getComputedStyle(e).backgroundColor);
  expect(bg).toBe('rgb(255, 235, 233)');
  await page.screenshot({ path: screenshotPath('version-nan-alarms'), fullPage: true });
  expect(problems).toEqual([]);
});

// Issue 24 item 6: the NaN/Inf alarm is at the top of the version page (it was ~2,900 px down),
// and the catalog and the repository page mark the version too.
test('NaN/Inf: a banner atop the version page, markers on the catalog and repository pages', async ({ page, st, problems, request }) => {
  const d = st.digests.nan;
  const stats = await apiAsync(request, st, `/v2/adapters/gemma-nan/blz/stats?digest=${d}`);
  const s = stats.stats || stats;
  await page.goto(st.url + `/#/r/adapters%2Fgemma-nan/v/${d}`);
  const banner = page.locator('#nan-banner');
  await expect(banner).toBeVisible({ timeout: 20_000 });
  await expect(banner).toContainText('NaN/Inf');
  await expect(banner).toContainText(`${fmtInt(s.summary.nan)} NaN`);
  const box = await banner.boundingBox();
  expect(box.y).toBeLessThan(400); // above the facts, files and tensors, without scrolling
  const tensorsTop = (await page.locator('#tensors').boundingBox()).y;
  expect(box.y).toBeLessThan(tensorsTop);

  await page.goto(st.url + '/#/r/adapters%2Fgemma-nan');
  await expect(page.locator('li.version .nan-flag')).toBeVisible({ timeout: 20_000 });
  await expect(page.locator('li.version .nan-flag')).toContainText(`${fmtInt(s.summary.nan)} NaN`);

  await page.goto(st.url + '/#/');
  const row = page.locator('#catalog tbody tr', { hasText: 'adapters/gemma-nan' });
  await expect(row.locator('.nan-flag')).toBeVisible();
  // A finite model has no marker.
  await expect(page.locator('#catalog tbody tr', { hasText: 'demo/tiny-gpt2' }).locator('.nan-flag')).toHaveCount(0);
  await page.screenshot({ path: screenshotPath('catalog-nan-flag'), fullPage: true });
  expect(problems).toEqual([]);
});
