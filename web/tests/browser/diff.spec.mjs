// The diff page: its numbers against the JSON API and against `blz diff --values --json` on the
// same two corpus directories; heatmaps; keyboard navigation; the structural diff.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test, expect, api, apiAsync } from './base.mjs';
import { fmtBytes, fmtCos, fmtInt, fmtNum, fmtPercent } from '../../src/lib/format.js';
import { screenshotPath } from './fixtures.mjs';
import { cosineText, relL2Text } from '../../src/lib/report.js';

// `blz diff` exits 0 when A and B are identical, 1 when they differ (cmp style), else trouble.
function cliDiff(st, a, b) {
  const r = spawnSync(st.blz, ['diff', a, b, '--values', '--json'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0 && r.status !== 1) throw new Error(`blz diff exited ${r.status}: ${r.stderr}`);
  const doc = JSON.parse(r.stdout);
  if (doc.identical !== (r.status === 0)) throw new Error(`blz diff: exit ${r.status} but identical=${doc.identical}`);
  return doc;
}

test('summary, heatmaps and per-tensor table match the API and blz diff --values --json', async ({ page, st, problems, request }) => {
  const { base, ft } = st.digests;
  const q = `from=${base}&to=${ft}`;
  const apiDiff = await apiAsync(request, st, `/v2/demo/tiny-gpt2/blz/diff?${q}`);
  const report = await apiAsync(request, st, `/v2/demo/tiny-gpt2/blz/patch-report?${q}`);
  const cli = cliDiff(st, path.join(st.corpus, 'tiny-gpt2/base'), path.join(st.corpus, 'tiny-gpt2/ft-v1'));
  // The registry's document is the CLI's (but for the input paths).
  expect(apiDiff.values.tensors).toEqual(cli.values.tensors);
  expect(apiDiff.values.model).toEqual(cli.values.model);

  await page.goto(st.url + `/#/r/demo%2Ftiny-gpt2/diff/${base}/${ft}`);
  const m = cli.values.model;
  const changed = cli.values.tensors.filter((t) => t.changed > 0).length;
  await expect(page.locator('#sum-changed')).toHaveText(fmtInt(changed));
  await expect(page.locator('#sum-identical')).toHaveText(fmtInt(cli.values.tensors.length - changed));
  await expect(page.locator('#sum-added')).toHaveText(fmtInt(cli.values.added.length));
  await expect(page.locator('#sum-removed')).toHaveText(fmtInt(cli.values.removed.length));
  await expect(page.locator('#sum-rel-l2')).toHaveText(fmtNum(m.rel_l2));
  await expect(page.locator('#sum-fraction')).toHaveText(fmtPercent(m.fraction_changed));
  await expect(page.locator('#sum-cosine')).toHaveText(fmtCos(m.cosine));
  await expect(page.locator('#sum-patch')).toHaveText(fmtBytes(report.patch_bytes));
  await expect(page.locator('#sum-full')).toHaveText(fmtBytes(report.target_bytes));
  await expect(page.locator('#sum-ratio')).toHaveText(fmtPercent(report.patch_bytes / report.target_bytes));
  // Same structure: no structural diff section.
  await expect(page.locator('#structure')).toBeEmpty();

  // Per-tensor table: one row per tensor; each value as the CLI computed it.
  const rows = page.locator('#tensor-table tbody tr');
  await expect(rows).toHaveCount(cli.values.tensors.length);
  const shown = await rows.evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  const pieces = new Map(report.pieces.map((p) => [p.name, p]));
  const cliByName = new Map(cli.values.tensors.map((t) => [t.name, t]));
  for (const [name, , , status, rel, frac, cos, maxAbs, patch, codec] of shown) {
    const t = cliByName.get(name);
    expect(t, name).toBeTruthy();
    expect([status, rel, frac, cos, maxAbs]).toEqual([t.changed > 0 ? 'changed' : 'identical', relL2Text(t), fmtPercent(t.fraction_changed), cosineText(t), fmtNum(t.max_abs_change)]);
    // A base of all zeros has no cosine (the JSON's 0 is not one) and an infinite rel L2.
    if (t.l2_a === 0 && t.l2_b > 0) expect([rel, cos], name).toEqual(['inf', 'n/a (base is all zeros)']);
    else expect(cos, name).toBe(fmtCos(t.cosine));
    const p = pieces.get(name);
    expect([patch, codec]).toEqual([fmtBytes(p.patch_bytes), p.codec]);
  }
  // Files: a file's patch bytes are its header piece's plus its tensors' (issue 24: the page
  // said "model.safetensors 0 B (identical)" with every tensor patched).
  const modelFile = report.pieces.filter((p) => p.file === 'model.safetensors');
  const modelBytes = modelFile.reduce((s, p) => s + p.patch_bytes, 0);
  const patchedTensors = modelFile.filter((p) => p.kind === 'tensor' && p.codec !== 'identical').length;
  expect(patchedTensors).toBeGreaterThan(0);
  await expect(page.locator('p.files-note')).toContainText(`model.safetensors ${fmtBytes(modelBytes)} (${fmtInt(patchedTensors)} of ${fmtInt(modelFile.length - 1)} tensors patched)`);
  await expect(page.locator('p.files-note')).not.toContainText('model.safetensors 0 B');
  // Sorted by patch bytes, largest first.
  const patchCol = shown.map((r) => pieces.get(r[0]).patch_bytes);
  expect(patchCol).toEqual([...patchCol].sort((a, b) => b - a));

  // Heatmaps: GPT-2 has 2 layers (h.0, h.1) plus the non-layer row.
  const vmap = page.locator('#values-map table.heatmap');
  await expect(vmap.locator('tbody tr')).toHaveCount(3);
  await expect(page.locator('#patch-map table.heatmap tbody tr')).toHaveCount(3);
  const cells = vmap.locator('td.cell');
  const nCells = await cells.count();
  expect(nCells).toBeGreaterThan(5);
  const before = await cells.first().getAttribute('title');
  expect(before).toContain('relative L2');
  await page.getByLabel('changed fraction').check();
  await expect(vmap.locator('td.cell').first()).toHaveAttribute('title', /changed fraction/);
  await page.getByLabel('cosine').check();
  await expect(vmap.locator('td.cell').first()).toHaveAttribute('title', /cosine/);
  await page.getByLabel('max abs change').check();
  await expect(vmap.locator('td.cell').first()).toHaveAttribute('title', /max abs change/);
  await page.getByLabel('relative L2').check();
  // The patch-bytes cell of layer 0 attn.qkv = the sum of its tensors' patch bytes.
  const qkv = report.pieces.filter((p) => /^transformer\.h\.0\.attn\.c_attn\./.test(p.name)).reduce((s, p) => s + p.patch_bytes, 0);
  await expect(page.locator('#patch-map td.cell[data-layer="0"][data-module="attn.qkv"]')).toHaveAttribute('title', new RegExp(`patch bytes ${fmtBytes(qkv).replace('.', '\\.')} \\(2 tensors\\)`));
  await page.screenshot({ path: screenshotPath('diff'), fullPage: true });
  expect(problems).toEqual([]);
});

test('keyboard: Tab reaches a heatmap cell, arrows move, Enter opens its detail', async ({ page, st, problems }) => {
  const { base, ft } = st.digests;
  await page.goto(st.url + `/#/r/demo%2Ftiny-gpt2/diff/${base}/${ft}`);
  await expect(page.locator('#values-map td.cell').first()).toBeVisible({ timeout: 20_000 });
  await expect(page.locator('#tensor-table tbody tr').first()).toBeVisible();
  let onCell = false;
  for (let i = 0; i < 40 && !onCell; i++) {
    await page.keyboard.press('Tab');
    onCell = await page.evaluate(() => document.activeElement.matches('#values-map td.cell'));
  }
  expect(onCell, 'Tab reaches the heatmap').toBe(true);
  const pos = () => page.evaluate(() => [document.activeElement.dataset.r, document.activeElement.dataset.c].map(Number));
  const [r0, c0] = await pos();
  expect(await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle)).not.toBe('none');
  await page.keyboard.press('ArrowRight');
  expect(await pos()).toEqual([r0, c0 + 1]);
  await page.keyboard.press('ArrowDown');
  expect(await pos()).toEqual([r0 + 1, c0 + 1]);
  await page.keyboard.press('ArrowLeft');
  await page.keyboard.press('ArrowUp');
  expect(await pos()).toEqual([r0, c0]);
  // The focused cell is described (tooltip text for keyboard users).
  const label = await page.evaluate(() => document.activeElement.getAttribute('aria-label'));
  await expect(page.locator('#values-map .cell-info')).toHaveText(label);
  const mod = await page.evaluate(() => document.activeElement.dataset.module);
  await page.keyboard.press('Enter');
  await expect(page.locator('#detail h2')).toContainText(mod);
  await expect(page.locator('#detail li').first()).toBeVisible();
  await expect(page.locator('#detail')).toBeFocused();
  // Rows of the tensor table: arrows move between rows, Enter opens the row's detail.
  const row0 = page.locator('#tensor-table tbody tr').first();
  await row0.focus();
  await page.keyboard.press('ArrowDown');
  const second = await page.locator('#tensor-table tbody tr').nth(1).locator('td').first().textContent();
  await expect(page.locator('#tensor-table tbody tr').nth(1)).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(page.locator('#detail code')).toHaveText(second);
  expect(problems).toEqual([]);
});

test('different structures: the structural diff as blz diff gives it', async ({ page, st, problems }) => {
  const a = st.digests.ckpt1000;
  const b = st.digests.other;
  const cli = cliDiff(st, path.join(st.corpus, 'roberta-lora/checkpoint-1000'), path.join(st.corpus, 'adapters/opt125m-lora-bf16'));
  expect(cli.structure.hash_equal).toBe(false);
  await page.goto(st.url + `/#/r/roberta%2Flora/diff/${a}/${b}`);
  await expect(page.locator('#structure h2')).toHaveText('Structural diff', { timeout: 20_000 });
  await expect(page.locator('#structure h3', { hasText: 'tensors added' })).toHaveText(`tensors added (${cli.structure.tensors_added.length})`);
  await expect(page.locator('#structure h3', { hasText: 'tensors removed' })).toHaveText(`tensors removed (${cli.structure.tensors_removed.length})`);
  await expect(page.locator('#structure li', { hasText: cli.structure.tensors_added[0] }).first()).toBeVisible();
  await expect(page.locator('#sum-added')).toHaveText(fmtInt(cli.values.added.length));
  await expect(page.locator('#sum-removed')).toHaveText(fmtInt(cli.values.removed.length));
  await page.screenshot({ path: screenshotPath('diff-structural'), fullPage: true });
  expect(problems).toEqual([]);
});

test('a diff still computing shows its progress and does not block the rest of the page', async ({ page, st, problems, request }) => {
  const { base, ft } = st.digests;
  const report = await apiAsync(request, st, `/v2/demo/tiny-gpt2/blz/patch-report?from=${base}&to=${ft}`);
  // The server answers at once for this small pair, so the first two polls of the value diff
  // are answered 202 here (the registry's progress document), then the real server answers.
  let polls = 0;
  await page.route(/\/blz\/diff\?.*async=1/, async (route) => {
    if (polls++ < 2) {
      return route.fulfill({
        status: 202,
        headers: { 'Content-Type': 'application/json', 'Retry-After': '1' },
        body: JSON.stringify({ state: 'computing', phase: 'reading tensors', done: polls, total: 3, elapsed_ms: polls * 1000 }),
      });
    }
    return route.continue();
  });
  await page.goto(st.url + `/#/r/demo%2Ftiny-gpt2/diff/${base}/${ft}`);
  await expect(page.locator('#values-map .progress')).toContainText(/value diff: reading tensors [12]\/3 \([12]\.0 s\)/);
  // Meanwhile the patch report is shown.
  await expect(page.locator('#sum-patch')).toHaveText(fmtBytes(report.patch_bytes));
  await expect(page.locator('#values-map .progress')).toBeVisible();
  // Then the value diff arrives.
  await expect(page.locator('#values-map table.heatmap')).toBeVisible({ timeout: 15_000 });
  await expect(page.locator('#values-map .progress')).toHaveCount(0);
  expect(polls).toBe(3);
  expect(problems).toEqual([]);
});

test('GGUF naming: the heatmap groups blk.N.* by layer and module, numbers as blz diff gives them', async ({ page, st, problems }) => {
  const cli = cliDiff(st, st.ggufA, st.ggufB);
  const changed = cli.values.tensors.filter((t) => t.changed > 0);
  expect(changed.length).toBeGreaterThan(0);
  await page.goto(st.url + `/#/r/gguf%2Fllama-tiny/diff/${st.digests.gguf}/${st.digests.gguf2}`);
  const vmap = page.locator('#values-map table.heatmap');
  await expect(vmap).toBeVisible({ timeout: 20_000 });
  // One layer (blk.0) plus the row outside layers; GGUF modules as columns.
  await expect(vmap.locator('tbody th')).toHaveText(['0', '—']);
  const cols = await vmap.locator('thead th.col-head').allTextContents();
  expect(cols).toEqual(['embed', 'norm.attn', 'attn.q', 'attn.k', 'attn.v', 'attn.o', 'norm.mlp', 'mlp.gate', 'mlp.up', 'mlp.down', 'norm.final', 'lm_head']);
  for (const [name, layer, mod] of [['token_embd.weight', '', 'embed'], ['blk.0.attn_q.weight', '0', 'attn.q'], ['blk.0.ffn_down.weight', '0', 'mlp.down'], ['output.weight', '', 'lm_head']]) {
    const t = cli.values.tensors.find((x) => x.name === name);
    await expect(vmap.locator(`td.cell[data-layer="${layer}"][data-module="${mod}"]`)).toHaveAttribute('title', `${layer === '' ? 'other' : 'layer ' + layer} · ${mod}: relative L2 ${fmtNum(t.rel_l2)} (1 tensor)`);
  }
  await expect(page.locator('#sum-changed')).toHaveText(fmtInt(changed.length));
  await expect(page.locator('#sum-rel-l2')).toHaveText(fmtNum(cli.values.model.rel_l2));
  await page.screenshot({ path: screenshotPath('diff-gguf'), fullPage: true });
  expect(problems).toEqual([]);
});
