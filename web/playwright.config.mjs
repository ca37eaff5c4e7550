// Browser tests of the web view (issue 13): Playwright driving Debian's chromium (no browser
// download) against a real `blz serve` started by tests/browser/global_setup.mjs.
// Binary: $BLZ_BIN (default ../build-dev/cli/blz); corpus: $BLZ_CORPUS (default
// ../../shared/corpus). Screenshots of each page go to test-results/screenshots/.
import { defineConfig } from '@playwright/test';

export default defineConfig({
  testDir: './tests/browser',
  globalSetup: './tests/browser/global_setup.mjs',
  outputDir: './test-results/artifacts',
  timeout: 30_000,
  expect: { timeout: 10_000 },
  fullyParallel: false,
  workers: Number(process.env.BLZ_WEB_WORKERS || 2),
  retries: 0,
  reporter: [['list']],
  use: {
    browserName: 'chromium',
    headless: true,
    viewport: { width: 1280, height: 900 },
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    },
    trace: 'off',
    screenshot: 'only-on-failure',
  },
});
