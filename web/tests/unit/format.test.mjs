// Formatting of bytes, numbers, times, digests and the heatmap colour scale.
import test from 'node:test';
import assert from 'node:assert/strict';
import { fmtBytes, fmtCos, fmtNum, fmtPercent, fmtInt, fmtTime, shortDigest, fmtShape, colourAt, inkAt, makeScale } from '../../src/lib/format.js';

test('fmtBytes', () => {
  assert.equal(fmtBytes(0), '0 B');
  assert.equal(fmtBytes(1023), '1023 B');
  assert.equal(fmtBytes(1024), '1.00 KiB');
  assert.equal(fmtBytes(1536), '1.50 KiB');
  assert.equal(fmtBytes(413296), '404 KiB');
  assert.equal(fmtBytes(10 * 1024 * 1024), '10.0 MiB');
  assert.equal(fmtBytes(3 * 1024 ** 4), '3.00 TiB');
  assert.equal(fmtBytes(null), '—');
  assert.equal(fmtBytes(undefined), '—');
});

test('fmtNum', () => {
  assert.equal(fmtNum(0), '0');
  assert.equal(fmtNum(0.008554588736191745), '0.008555');
  assert.equal(fmtNum(0.00022216391516849399), '2.222e-4');
  assert.equal(fmtNum(0.9999677681592491), '1');
  assert.equal(fmtNum(123.456), '123.5');
  assert.equal(fmtNum(null), '—');
  assert.equal(fmtNum(NaN), 'NaN');
  assert.equal(fmtNum(-Infinity), '-Inf');
  assert.equal(fmtNum(2e7), '2.000e+7');
  assert.equal(fmtCos(0.9999677681592491), '0.999968');
  assert.equal(fmtCos(1), '1');
});

test('fmtPercent and fmtInt', () => {
  assert.equal(fmtPercent(1), '100.0%');
  assert.equal(fmtPercent(0.9837802052300563), '98.4%');
  assert.equal(fmtPercent(0.00001), '0.001%');
  assert.equal(fmtPercent(null), '—');
  assert.equal(fmtInt(102714), '102,714');
  assert.equal(fmtInt(7), '7');
  assert.equal(fmtInt(1843200), '1,843,200');
});

test('fmtTime is UTC and stable', () => {
  assert.equal(fmtTime('2026-11-24T17:09:34Z'), '2026-11-24 17:09:34 UTC');
  assert.equal(fmtTime('2026-11-24T17:09:34.123Z'), '2026-11-24 17:09:34 UTC');
  assert.equal(fmtTime(null), '—');
  assert.equal(fmtTime('not a time'), 'not a time');
});

test('shortDigest and fmtShape', () => {
  assert.equal(shortDigest('sha256:0123456789abcdef0123'), '0123456789ab');
  assert.equal(shortDigest(null), '—');
  assert.equal(fmtShape([2, 6]), '[2, 6]');
  assert.equal(fmtShape([]), '[]');
});

test('colourAt: ends, clamping, null grey, monotone darkening', () => {
  assert.equal(colourAt(0), 'rgb(255, 255, 229)');
  assert.equal(colourAt(1), 'rgb(80, 20, 4)');
  assert.equal(colourAt(-5), colourAt(0));
  assert.equal(colourAt(7), colourAt(1));
  assert.equal(colourAt(null), 'rgb(221, 221, 221)');
  const lum = (s) => s.match(/\d+/g).map(Number).reduce((a, b) => a + b, 0);
  let prev = Infinity;
  for (let t = 0; t <= 1.0001; t += 0.05) {
    const l = lum(colourAt(t));
    assert.ok(l <= prev, `not darker at ${t}`);
    prev = l;
  }
  assert.equal(inkAt(0.9), '#fff');
  assert.equal(inkAt(0.1), '#111');
});

test('makeScale linear and log', () => {
  const lin = makeScale([0, 5, 10]);
  assert.equal(lin(0), 0); assert.equal(lin(5), 0.5); assert.equal(lin(10), 1); assert.equal(lin(null), null);
  const lg = makeScale([1e-4, 1e-2, 1], { log: true });
  assert.ok(Math.abs(lg(1e-2) - (0.15 + 0.85 * 0.5)) < 1e-12);
  assert.equal(lg(0), 0); // unchanged stays at the pale end...
  assert.ok(lg(1e-4) >= 0.15); // ...and the smallest change is visibly darker
  assert.equal(lg(1), 1);
  // Values a few percent apart get nearly the same colour (at least 3 decades of range).
  const close = makeScale([0.0622, 0.0647], { log: true });
  assert.ok(close(0.0647) - close(0.0622) < 0.02);
  assert.ok(close(0.0622) > 0.9);
  assert.equal(makeScale([0, 0], { log: true })(0), 0);
  const fixed = makeScale([0.2], { min: 0, max: 1 });
  assert.ok(Math.abs(fixed(0.2) - 0.2) < 1e-12);
  assert.equal(makeScale([])(3), null);
  assert.equal(makeScale([4, 4])(4), 1);
});
