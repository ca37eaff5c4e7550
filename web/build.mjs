#!/usr/bin/env node
// Builds blz's web view into a directory that web/tools/embed_assets.mjs embeds into the `blz`
// binary (web/CMakeLists.txt runs both; web/README.md).
//
//   node web/build.mjs --out DIR
//
// Input (web/src/):
//   index.html  the page template: `<!--BLZ_CSS-->` and `<!--BLZ_JS-->` (each exactly once) are
//               replaced by the <link rel="stylesheet"> and <script type="module" src> of the
//               bundles. It must not contain inline scripts, <style>, style="" or on*="" attributes,
//               or javascript: URLs (the server's Content-Security-Policy would block them): the
//               build fails naming the offending tag.
//   main.js     the entry module (may import modules under src/, npm packages and CSS).
//   style.css   the entry style sheet (may @import others).
// Output (DIR is replaced as a whole; it must be absent, empty or an earlier output):
//   DIR/index.html
//   DIR/assets/<name>-<hash>.<ext>   minified ES2020 bundles, CSS, files they reference
//                                    (content-hashed names: served as immutable)
//   DIR/<file>.gz, DIR/<file>.br     gzip (level 9) and brotli (quality 11) of each text file
//   DIR/manifest.json                every file: URL path, content type, ETag, sizes
// The output depends only on the input bytes (no times, no absolute paths): same input, same
// bytes.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

import * as esbuild from 'esbuild';

const kWebDir = path.dirname(fileURLToPath(import.meta.url));

// Content types by extension; `text` files also get .gz and .br variants.
const kTypes = new Map([
  ['.html', { type: 'text/html; charset=utf-8', text: true }],
  ['.js', { type: 'text/javascript', text: true }],
  ['.css', { type: 'text/css', text: true }],
  ['.svg', { type: 'image/svg+xml', text: true }],
  ['.json', { type: 'application/json', text: true }],
  ['.txt', { type: 'text/plain; charset=utf-8', text: true }],
  ['.png', { type: 'image/png', text: false }],
  ['.woff2', { type: 'font/woff2', text: false }],
]);

function Fail(message) {
  process.stderr.write(`web/build.mjs: ${message}\n`);
  process.exit(1);
}

function ParseArgs(argv) {
  const args = { out: null, src: path.join(kWebDir, 'src') };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if ((a === '--out' || a === '--src') && i + 1 < argv.length) {
      args[a.slice(2)] = path.resolve(argv[++i]);
    } else {
      Fail(`unknown argument '${a}'; usage: node web/build.mjs --out DIR [--src DIR]`);
    }
  }
  if (!args.out) Fail('missing --out DIR; usage: node web/build.mjs --out DIR [--src DIR]');
  return args;
}

// Rejects what the Content-Security-Policy (web/web_handler.h) would block, so that a page that
// works in the build also works in the browser.
function CheckTemplate(html, file) {
  for (const placeholder of ['<!--BLZ_CSS-->', '<!--BLZ_JS-->']) {
    const n = html.split(placeholder).length - 1;
    if (n !== 1) Fail(`${file}: '${placeholder}' must appear exactly once (found ${n})`);
  }
  const tags = html.matchAll(/<([a-zA-Z][a-zA-Z0-9-]*)\b([^>]*)>/g);
  for (const m of tags) {
    const name = m[1].toLowerCase();
    const attrs = m[2];
    const where = `${file}: offset ${m.index}: <${m[1]}${attrs.slice(0, 40)}>`;
    if (name === 'script' && !/\ssrc\s*=/i.test(attrs)) Fail(`${where}: inline script (CSP: script-src 'self')`);
    if (name === 'style') Fail(`${where}: <style> element (CSP: style-src 'self'; use style.css)`);
    if (/\sstyle\s*=/i.test(attrs)) Fail(`${where}: style attribute (CSP: style-src 'self'; use a class)`);
    if (/\son[a-z]+\s*=/i.test(attrs)) Fail(`${where}: event handler attribute (CSP: no inline script)`);
    if (/javascript:/i.test(attrs)) Fail(`${where}: javascript: URL (CSP: no inline script)`);
  }
}

function Sha256Hex(bytes) {
  return createHash('sha256').update(bytes).digest('hex');
}

function Gzip(bytes) {
  // Node writes a fixed gzip header (mtime 0, no name): deterministic.
  return zlib.gzipSync(bytes, { level: 9 });
}

function Brotli(bytes, text) {
  return zlib.brotliCompressSync(bytes, {
    params: {
      [zlib.constants.BROTLI_PARAM_QUALITY]: zlib.constants.BROTLI_MAX_QUALITY,
      [zlib.constants.BROTLI_PARAM_MODE]: text ? zlib.constants.BROTLI_MODE_TEXT
                                               : zlib.constants.BROTLI_MODE_GENERIC,
      [zlib.constants.BROTLI_PARAM_SIZE_HINT]: bytes.length,
    },
  });
}

// Replaces `out` by `staged` (a sibling directory). Refuses to delete a directory that does
// not look like an earlier output.
function Replace(out, staged) {
  if (fs.existsSync(out)) {
    const entries = fs.readdirSync(out);
    if (entries.length > 0 && !entries.includes('manifest.json')) {
      fs.rmSync(staged, { recursive: true, force: true });
      Fail(`--out ${out}: not empty and not an earlier output (no manifest.json); refusing to replace it`);
    }
    fs.rmSync(out, { recursive: true, force: true });
  }
  fs.renameSync(staged, out);
}

async function Main() {
  const args = ParseArgs(process.argv.slice(2));
  const templateFile = path.join(args.src, 'index.html');
  const entries = ['main.js', 'style.css'].map((f) => path.join(args.src, f));
  for (const f of [templateFile, ...entries]) {
    if (!fs.existsSync(f)) Fail(`missing ${f}`);
  }
  const template = fs.readFileSync(templateFile, 'utf8');
  CheckTemplate(template, templateFile);

  fs.mkdirSync(path.dirname(args.out), { recursive: true });
  const staged = `${args.out}.tmp-${process.pid}`;
  fs.rmSync(staged, { recursive: true, force: true });
  const assetsDir = path.join(staged, 'assets');

  let result;
  try {
    result = await esbuild.build({
      absWorkingDir: args.src,
      entryPoints: entries,
      outdir: assetsDir,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'browser',
      target: ['es2020'],
      minify: true,
      sourcemap: false,
      charset: 'ascii',
      legalComments: 'eof',
      entryNames: '[name]-[hash]',
      chunkNames: 'chunk-[hash]',
      assetNames: '[name]-[hash]',
      loader: { '.svg': 'file', '.png': 'file', '.woff2': 'file' },
      define: { 'process.env.NODE_ENV': '"production"' },
      metafile: true,
      write: false,
      logLevel: 'silent',
    });
  } catch (e) {
    const errors = (e.errors || []).map((m) =>
      m.location ? `${m.location.file}:${m.location.line}:${m.location.column}: ${m.text}` : m.text);
    Fail(`esbuild failed:\n  ${errors.length ? errors.join('\n  ') : e.message}`);
  }
  for (const w of result.warnings) {
    const where = w.location ? `${w.location.file}:${w.location.line}: ` : '';
    process.stderr.write(`web/build.mjs: warning: ${where}${w.text}\n`);
  }

  // URL paths of the entry bundles, from esbuild's metafile (keys relative to absWorkingDir).
  const urlOf = (metaKey) =>
    '/' + path.relative(staged, path.resolve(args.src, metaKey)).split(path.sep).join('/');
  let js = null;
  const css = [];
  for (const [key, meta] of Object.entries(result.metafile.outputs)) {
    if (meta.entryPoint === 'main.js') {
      js = urlOf(key);
      if (meta.cssBundle) css.push(urlOf(meta.cssBundle));  // CSS imported by the modules
    } else if (meta.entryPoint === 'style.css') {
      css.unshift(urlOf(key));  // the entry style sheet first
    }
  }
  if (!js || css.length === 0) Fail('esbuild produced no main.js or style.css bundle');

  const escapeAttr = (s) => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
  const html = template
    .replace('<!--BLZ_CSS-->', css.map((u) => `<link rel="stylesheet" href="${escapeAttr(u)}">`).join('\n'))
    .replace('<!--BLZ_JS-->', `<script type="module" src="${escapeAttr(js)}"></script>`);

  // Every served file: [relative file name, URL path, bytes].
  const files = [['index.html', '/', Buffer.from(html, 'utf8')]];
  for (const f of result.outputFiles) {
    const rel = path.relative(staged, f.path).split(path.sep).join('/');
    files.push([rel, '/' + rel, Buffer.from(f.contents)]);
  }
  files.sort((a, b) => (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));

  const manifest = { version: 1, entry: { js, css }, files: [] };
  const weight = { identity: 0, gzip: 0, br: 0 };
  fs.mkdirSync(assetsDir, { recursive: true });
  for (const [rel, url, bytes] of files) {
    const ext = path.extname(rel).toLowerCase();
    const kind = kTypes.get(ext);
    if (!kind) Fail(`${rel}: no content type for '${ext}' (add it to kTypes in web/build.mjs)`);
    const full = path.join(staged, rel);
    fs.writeFileSync(full, bytes);
    const entry = {
      path: url,
      file: rel,
      content_type: kind.type,
      etag: `"${Sha256Hex(bytes).slice(0, 32)}"`,
      immutable: url !== '/',
      bytes: bytes.length,
    };
    if (kind.text) {
      const gz = Gzip(bytes);
      const br = Brotli(bytes, true);
      fs.writeFileSync(`${full}.gz`, gz);
      fs.writeFileSync(`${full}.br`, br);
      Object.assign(entry, { gzip: `${rel}.gz`, gzip_bytes: gz.length, br: `${rel}.br`, br_bytes: br.length });
      if (ext === '.js' || ext === '.css') {
        weight.identity += bytes.length;
        weight.gzip += gz.length;
        weight.br += br.length;
      }
    }
    manifest.files.push(entry);
  }
  manifest.weight_js_css = weight;
  fs.writeFileSync(path.join(staged, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
  Replace(args.out, staged);
  process.stdout.write(`web: ${files.length} files, JS+CSS ${weight.identity} bytes ` +
                       `(${weight.gzip} gzip, ${weight.br} brotli) in ${args.out}\n`);
}

await Main();
