// web/build.mjs and web/tools/embed_assets.mjs (run by ctest as web_build_test): the build is
// reproducible, names files by content, replaces stale output, writes valid .gz/.br and a
// manifest that matches the files; a template the CSP would break fails the build and writes
// nothing; the embed step writes a source only when it changes. Exits non-zero on a failure.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const build = path.join(root, 'web', 'build.mjs');
const embed = path.join(root, 'web', 'tools', 'embed_assets.mjs');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'blz-web-build-'));
let failures = 0;

function Run(script, args) {
  return spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
}

// relative path -> bytes of every file below dir.
function Tree(dir) {
  const out = new Map();
  for (const e of fs.readdirSync(dir, { recursive: true, withFileTypes: false })) {
    const full = path.join(dir, e);
    if (fs.statSync(full).isFile()) out.set(e.split(path.sep).join('/'), fs.readFileSync(full));
  }
  return out;
}

function CopySrc(name) {
  const dir = path.join(tmp, name);
  fs.cpSync(path.join(root, 'web', 'src'), dir, { recursive: true });
  return dir;
}

function Test(name, fn) {
  try {
    fn();
    process.stdout.write(`ok   ${name}\n`);
  } catch (e) {
    ++failures;
    process.stdout.write(`FAIL ${name}\n${e.stack}\n`);
  }
}

Test('same sources give the same bytes, wherever they are built', () => {
  const a = path.join(tmp, 'a');
  const b = path.join(tmp, 'nested', 'b');
  assert.equal(Run(build, ['--out', a]).status, 0);
  assert.equal(Run(build, ['--src', CopySrc('src-copy'), '--out', b]).status, 0);
  const ta = Tree(a);
  const tb = Tree(b);
  assert.deepEqual([...ta.keys()].sort(), [...tb.keys()].sort());
  for (const [k, v] of ta) assert.ok(v.equals(tb.get(k)), `${k} differs`);
});

Test('the manifest matches the files; .gz and .br decode to them', () => {
  const out = path.join(tmp, 'a');
  const manifest = JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8'));
  assert.equal(manifest.version, 1);
  const paths = manifest.files.map((f) => f.path);
  assert.deepEqual(paths, [...paths].sort());
  assert.equal(paths[0], '/');
  for (const f of manifest.files) {
    const bytes = fs.readFileSync(path.join(out, f.file));
    assert.equal(bytes.length, f.bytes, f.file);
    assert.equal(f.etag, `"${createHash('sha256').update(bytes).digest('hex').slice(0, 32)}"`);
    assert.equal(f.immutable, f.path !== '/');
    if (f.path !== '/') assert.match(f.path, /^\/assets\/[A-Za-z0-9_.-]+-[A-Z0-9]{8}\.[a-z0-9]+$/);
    assert.ok(zlib.gunzipSync(fs.readFileSync(path.join(out, f.gzip))).equals(bytes), f.gzip);
    assert.ok(zlib.brotliDecompressSync(fs.readFileSync(path.join(out, f.br))).equals(bytes), f.br);
  }
  const html = fs.readFileSync(path.join(out, 'index.html'), 'utf8');
  assert.ok(html.includes(`<script type="module" src="${manifest.entry.js}"></script>`), html);
  for (const css of manifest.entry.css) assert.ok(html.includes(`<link rel="stylesheet" href="${css}">`));
  assert.ok(!html.includes('BLZ_'), html);
});

Test('an edited source gets a new name and the old file is gone', () => {
  const src = CopySrc('src-edit');
  const out = path.join(tmp, 'edit');
  assert.equal(Run(build, ['--src', src, '--out', out]).status, 0);
  const before = JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8')).entry.js;
  fs.appendFileSync(path.join(src, 'main.js'), '\nconsole.log("edited");\n');
  assert.equal(Run(build, ['--src', src, '--out', out]).status, 0);
  const after = JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8')).entry.js;
  assert.notEqual(after, before);
  assert.ok(!fs.existsSync(path.join(out, before)), `stale ${before} remains`);
  assert.ok(fs.existsSync(path.join(out, after)));
});

Test('templates the CSP would break fail the build and write nothing', () => {
  const cases = [
    ['<!--BLZ_JS-->', '<script>alert(1)</script><!--BLZ_JS-->', 'inline script'],
    ['<!--BLZ_CSS-->', '<style>p{}</style><!--BLZ_CSS-->', '<style> element'],
    ['<main id="app">', '<main id="app" style="color:red">', 'style attribute'],
    ['<main id="app">', '<main id="app" onclick="x()">', 'event handler'],
    ['<main id="app">', '<a href="javascript:x()"><main id="app">', 'javascript: URL'],
    ['<!--BLZ_JS-->', '', "'<!--BLZ_JS-->' must appear exactly once"],
  ];
  cases.forEach(([from, to, why], i) => {
    const src = CopySrc(`src-bad${i}`);
    const file = path.join(src, 'index.html');
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace(from, to));
    const out = path.join(tmp, `bad${i}`);
    const r = Run(build, ['--src', src, '--out', out]);
    assert.equal(r.status, 1, why);
    assert.ok(r.stderr.includes(why), `${why}: ${r.stderr}`);
    assert.ok(r.stderr.includes('index.html'), r.stderr);
    assert.ok(!fs.existsSync(out), `${why}: output written`);
  });
});

Test('a directory that is not an earlier output is never replaced', () => {
  const out = path.join(tmp, 'precious');
  fs.mkdirSync(out);
  fs.writeFileSync(path.join(out, 'keep.txt'), 'mine');
  const r = Run(build, ['--out', out]);
  assert.equal(r.status, 1);
  assert.ok(r.stderr.includes('refusing to replace it'), r.stderr);
  assert.equal(fs.readFileSync(path.join(out, 'keep.txt'), 'utf8'), 'mine');
  assert.deepEqual(fs.readdirSync(tmp).filter((n) => n.includes('.tmp-')), []);
});

Test('the embedded source is written once and only rewritten when it changes', () => {
  const cc = path.join(tmp, 'gen', 'web_assets.cc');
  assert.equal(Run(embed, ['--in', path.join(tmp, 'a'), '--out', cc]).status, 0);
  const text = fs.readFileSync(cc, 'utf8');
  assert.ok(text.includes('std::span<const Asset> EmbeddedAssets()'));
  assert.ok(text.includes('Asset{"/", "text/html; charset=utf-8"'));
  const old = new Date(2000, 0, 1);
  fs.utimesSync(cc, old, old);
  assert.equal(Run(embed, ['--in', path.join(tmp, 'a'), '--out', cc]).status, 0);
  assert.equal(fs.statSync(cc).mtimeMs, old.getTime(), 'unchanged source was rewritten');
  const r = Run(embed, ['--in', path.join(tmp, 'precious'), '--out', cc]);
  assert.equal(r.status, 1);
  assert.ok(r.stderr.includes('manifest.json'), r.stderr);
});

fs.rmSync(tmp, { recursive: true, force: true });
if (failures > 0) {
  process.stdout.write(`${failures} failed\n`);
  process.exit(1);
}
