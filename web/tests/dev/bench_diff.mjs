// Benchmark (not a test): time until the diff page of a synthetic 80-layer, 723-tensor model is
// fully rendered (both heatmaps + the tensor table), in headless chromium on loopback, served by
// tests/dev/mock_server.mjs from web/src (unbundled). Prints the median of N runs.
//   node tests/dev/mock_server.mjs 8099 &  node tests/dev/bench_diff.mjs [http://127.0.0.1:8099] [N]
import { chromium } from '@playwright/test';

const base = process.argv[2] || 'http://127.0.0.1:8099';
const runs = Number(process.argv[3] || 5);
const b = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium', args: ['--no-sandbox'] });
const page = await b.newPage({ viewport: { width: 1280, height: 900 } });
const a = 'sha256:' + 'a'.repeat(64), z = 'sha256:' + 'b'.repeat(64);
const times = [];
for (let i = 0; i < runs + 1; i++) {
  await page.goto('about:blank');
  const t0 = Date.now();
  await page.goto(`${base}/#/r/synthetic%2Fllama-80/diff/${a}/${z}`);
  await page.waitForFunction(() => document.querySelectorAll('#tensor-table tbody tr').length === 723
    && document.querySelector('#patch-map table.heatmap') && document.querySelector('#values-map table.heatmap'));
  if (i > 0) times.push(Date.now() - t0); // the first run warms the caches
}
times.sort((x, y) => x - y);
const cells = await page.locator('#values-map td.cell').count();
console.log(`diff page, 80 layers, 723 tensors (${cells} heatmap cells): median ${times[times.length >> 1]} ms over ${runs} loads (min ${times[0]}, max ${times[times.length - 1]})`);
await b.close();
