// Benchmark (not a test): time until the diff page of a model is fully rendered (both heatmaps +
// the tensor table), in headless chromium on loopback. Prints the median of N runs.
// Against the dev mock (a synthetic 80-layer, 723-tensor model, web/src unbundled):
//   node tests/dev/mock_server.mjs 8099 &  node tests/dev/bench_diff.mjs [http://127.0.0.1:8099] [N]
// Against a real `blz serve` (bench/web_diff_page.sh does this):
//   node tests/dev/bench_diff.mjs URL N REPOSITORY FROM_DIGEST TO_DIGEST TENSORS
import { chromium } from '@playwright/test';

const base = process.argv[2] || 'http://127.0.0.1:8099';
const runs = Number(process.argv[3] || 5);
const b = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium', args: ['--no-sandbox'] });
const page = await b.newPage({ viewport: { width: 1280, height: 900 } });
const repo = process.argv[4] || 'synthetic/llama-80';
const a = process.argv[5] || 'sha256:' + 'a'.repeat(64), z = process.argv[6] || 'sha256:' + 'b'.repeat(64);
const tensors = Number(process.argv[7] || 723);
const times = [];
for (let i = 0; i < runs + 1; i++) {
  await page.goto('about:blank');
  const t0 = Date.now();
  await page.goto(`${base}/#/r/${encodeURIComponent(repo)}/diff/${a}/${z}`);
  await page.waitForFunction((n) => document.querySelectorAll('#tensor-table tbody tr').length === n
    && document.querySelector('#patch-map table.heatmap') && document.querySelector('#values-map table.heatmap'), tensors);
  if (i > 0) times.push(Date.now() - t0); // the first run warms the caches
}
times.sort((x, y) => x - y);
const cells = await page.locator('#values-map td.cell').count();
console.log(`diff page of ${repo}, ${tensors} tensors (${cells} heatmap cells): median ${times[times.length >> 1]} ms over ${runs} loads (min ${times[0]}, max ${times[times.length - 1]})`);
await b.close();
