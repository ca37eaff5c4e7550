// Tensor names and config.json values with markup are shown as text: no dialog fires, no
// element is injected.
import { test, expect } from './base.mjs';
import { hostileNames, hostileConfig, screenshotPath } from './fixtures.mjs';

async function expectNothingInjected(page) {
  expect(await page.locator('img').count()).toBe(0);
  expect(await page.locator('svg, iframe, b').count()).toBe(0);
  // Only the bundle's own <script> elements, all with src.
  const scripts = await page.locator('script').evaluateAll((ss) => ss.map((s) => s.getAttribute('src')));
  expect(scripts.every((s) => s && s.startsWith('/assets/') || s && s.startsWith('./assets/') || s && s.startsWith('assets/')), JSON.stringify(scripts)).toBe(true);
  expect(await page.evaluate(() => window.__pwned)).toBeUndefined();
}

test('version page shows hostile tensor names and metadata as text', async ({ page, st, problems }) => {
  await page.goto(st.url + `/#/r/hostile%2Fmodel/v/${st.digests.hostile1}`);
  await expect(page.locator('#tensors tbody tr')).toHaveCount(hostileNames.length);
  const shown = await page.locator('#tensors tbody td.name').allTextContents();
  expect(shown.sort()).toEqual([...hostileNames].sort());
  await expect(page.locator('#config')).toContainText(hostileConfig.model_type);
  await expect(page.locator('#config')).toContainText(hostileConfig.architectures[0]);
  await expect(page.locator('#config')).toContainText(Object.keys(hostileConfig)[2]);
  await expect(page.locator('.stats-summary')).toBeVisible({ timeout: 20_000 });
  await expectNothingInjected(page);
  await page.screenshot({ path: screenshotPath('hostile-version'), fullPage: true });
  expect(problems).toEqual([]);
});

test('diff page shows hostile tensor names as text (table, heatmap labels, detail)', async ({ page, st, problems }) => {
  await page.goto(st.url + `/#/r/hostile%2Fmodel/diff/${st.digests.hostile1}/${st.digests.hostile2}`);
  await expect(page.locator('#tensor-table tbody tr')).toHaveCount(hostileNames.length, { timeout: 20_000 });
  const shown = await page.locator('#tensor-table tbody td.name').allTextContents();
  expect(shown.sort()).toEqual([...hostileNames].sort());
  await expect(page.locator('#patch-map table.heatmap')).toBeVisible();
  // Open every cell of the value heatmap: the detail lists the names as text. The table can
  // fill from the patch report alone, so wait for the value diff's heatmap itself.
  const cells = page.locator('#values-map table.heatmap td.cell');
  await expect(cells.first()).toBeVisible({ timeout: 20_000 });
  const n = await cells.count();
  expect(n).toBeGreaterThan(0);
  for (let i = 0; i < n; i++) await cells.nth(i).click();
  await expect(page.locator('#detail')).not.toBeEmpty();
  await expectNothingInjected(page);
  await page.screenshot({ path: screenshotPath('hostile-diff'), fullPage: true });
  expect(problems).toEqual([]);
});

test('repository and catalog pages survive the hostile model', async ({ page, st, problems }) => {
  await page.goto(st.url + '/#/r/hostile%2Fmodel');
  await expect(page.locator('li.version')).toHaveCount(2);
  await page.goto(st.url + '/#/?q=hostile');
  await expect(page.locator('#catalog tbody tr')).toHaveCount(1);
  await expectNothingInjected(page);
  expect(problems).toEqual([]);
});
