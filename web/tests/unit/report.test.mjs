// Reading patch reports, value diffs and statistics for the pages (src/lib/report.js); issue 24
// items 4 and 6.
import test from 'node:test';
import assert from 'node:assert/strict';
import { filePatchTotals, filePatchText, cosineText, cosineValue, relL2Text, nonFiniteOf, nonFiniteText } from '../../src/lib/report.js';
import { combineMetrics } from '../../src/lib/group.js';

test('a file counts its tensors\' patch bytes, not only its header piece', () => {
  // The shape of GET .../blz/patch-report: the header piece of model.safetensors is identical,
  // every tensor of it was patched (the diff page said "model.safetensors 0 B (identical)").
  const pieces = [
    { name: 'model.safetensors', kind: 'file', file: 'model.safetensors', codec: 'identical', patch_bytes: 0 },
    { name: 'tokenizer.json', kind: 'file', file: 'tokenizer.json', codec: 'identical', patch_bytes: 0 },
  ];
  for (let i = 0; i < 28; i++) {
    pieces.push({ name: `t${i}`, kind: 'tensor', file: 'model.safetensors', codec: 'xor-zstd', patch_bytes: 1000 });
  }
  const files = filePatchTotals(pieces);
  assert.equal(files.length, 2);
  assert.deepEqual(files[0], { file: 'model.safetensors', patch_bytes: 28000, tensors: 28, patched: 28, identical: 0, header_codec: 'identical' });
  assert.equal(filePatchText(files[0]), 'model.safetensors 27.3 KiB (28 of 28 tensors patched)');
  assert.equal(filePatchText(files[1]), 'tokenizer.json 0 B (identical)');
  // All tensors identical.
  const same = filePatchTotals([{ name: 'w', kind: 'tensor', file: 'a.safetensors', codec: 'identical', patch_bytes: 0 }]);
  assert.equal(filePatchText(same[0]), 'a.safetensors 0 B (all 1 tensors identical)');
});

test('a base of all zeros has no cosine (as the CLI: rel L2 inf)', () => {
  // formats/value_diff.h: exactly one side zero gives cosine 0 and rel_l2 null in the JSON.
  const zeroBase = { cosine: 0, rel_l2: null, l2_a: 0, l2_b: 2.5, l2_diff: 2.5 };
  assert.equal(cosineText(zeroBase), 'n/a (base is all zeros)');
  assert.equal(cosineValue(zeroBase), null);
  assert.equal(relL2Text(zeroBase), 'inf');
  assert.equal(cosineText({ cosine: 0, l2_a: 3, l2_b: 0, l2_diff: 3 }), 'n/a (target is all zeros)');
  // Both zero: equal (cosine 1); an orthogonal pair: a real 0.
  assert.equal(cosineText({ cosine: 1, l2_a: 0, l2_b: 0, l2_diff: 0 }), '1');
  assert.equal(cosineText({ cosine: 0, l2_a: 1, l2_b: 1, l2_diff: 1.414 }), '0');
  assert.equal(cosineValue({ cosine: 0, l2_a: 1, l2_b: 1 }), 0);
  assert.equal(relL2Text({ rel_l2: 0.5, l2_a: 1, l2_diff: 0.5 }), '0.5');
  // The heatmap's cell of that one tensor: no colour for the cosine either.
  assert.equal(combineMetrics([{ ...zeroBase, changed: 4, elements: 4, max_abs_change: 1 }]).cosine, null);
});

test('NaN/Inf counts of a statistics summary or a listing', () => {
  assert.equal(nonFiniteOf(null), null);
  assert.equal(nonFiniteOf({}), null);
  assert.equal(nonFiniteOf({ nan: 0, pos_inf: 0, neg_inf: 0, all_non_finite: 0 }), null);
  const s = nonFiniteOf({ nan: 1024, pos_inf: 1, neg_inf: 2, all_non_finite: 1 });
  assert.deepEqual(s, { nan: 1024, inf: 3, all: 1 });
  assert.equal(nonFiniteText(s), '⚠ NaN/Inf (1,024 NaN, 3 Inf)');
  // The listings' form (registry/browse_handlers.cc).
  assert.deepEqual(nonFiniteOf({ nan: 4, inf: 0, all_non_finite: 1, some_non_finite: 0 }), { nan: 4, inf: 0, all: 1 });
});
