// A --private registry: nothing is shown without a token; a wrong token is refused; the right
// one (kept in sessionStorage, sent as Authorization: Bearer) opens every page.
import { test, expect } from './base.mjs';
import { screenshotPath } from './fixtures.mjs';

// The browser logs the refused requests as console errors: expected here, and only these.
test.use({ allowConsole: [/status of 401/] });

test('private registry refuses without a token and works after entering it', async ({ page, st, problems, request }) => {
  const r = await request.get(st.privateUrl + '/v2/_blz/repositories');
  expect(r.status()).toBe(401);
  await page.goto(st.privateUrl + '/#/');
  await expect(page.locator('#token-form')).toBeVisible();
  await expect(page.locator('body')).not.toContainText('private/tiny');
  await page.screenshot({ path: screenshotPath('private-token-form'), fullPage: true });
  // Deep links are refused too.
  await page.goto(st.privateUrl + `/#/r/private%2Ftiny/v/${st.privateDigest}`);
  await expect(page.locator('#token-form')).toBeVisible();
  await expect(page.locator('#tensors')).toHaveCount(0);
  // A wrong token is refused.
  await page.locator('#token').fill('not-a-token');
  await page.locator('#token').press('Enter');
  await expect(page.locator('#token-form')).toContainText('refused');
  // The right one works, for every page.
  const auth = [];
  page.on('request', (req) => { if (req.url().includes('/v2/')) auth.push(req.headers().authorization || ''); });
  await page.locator('#token').fill(st.privateToken);
  await page.getByRole('button', { name: 'open' }).click();
  await expect(page.locator('#tensors tbody tr')).toHaveCount(28);
  expect(auth.length).toBeGreaterThan(0);
  expect(auth.every((a) => a === 'Bearer ' + st.privateToken)).toBe(true);
  expect(await page.evaluate(() => sessionStorage.getItem('blz-token'))).toBe(st.privateToken);
  await page.goto(st.privateUrl + '/#/');
  await expect(page.locator('#catalog tbody tr')).toHaveCount(1);
  await expect(page.locator('#catalog tbody tr td').first()).toHaveText('private/tiny');
  await page.getByRole('button', { name: 'forget token' }).click();
  await expect(page.locator('#token-form')).toBeVisible();
  expect(problems).toEqual([]);
});
