// Development only: serves web/src as plain ES modules (no bundling) and a mock of the issue-13
// JSON endpoints built from real `blz inspect`/`blz diff` output on corpus files, so the app can
// be worked on before the registry endpoints exist. Async endpoints answer 202 twice first.
//   node tests/dev/mock_server.mjs [PORT]   (BLZ_BIN, BLZ_CORPUS as for the browser tests)
// The browser tests do NOT use this: they run against a real `blz serve`.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const webDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const blz = path.resolve(webDir, process.env.BLZ_BIN || '../build-dev/cli/blz');
const corpus = path.resolve(webDir, process.env.BLZ_CORPUS || '../../shared/corpus');
const run = (...a) => JSON.parse(execFileSync(blz, a, { encoding: 'utf8', maxBuffer: 256 << 20 }));

const models = {
  'demo/tiny-gpt2': [['base', 'tiny-gpt2/base'], ['ft', 'tiny-gpt2/ft-v1']],
  'gguf/llama-tiny': [['v1', 'gguf/llama-2-tiny-random.gguf']],
  'adapters/gemma-nan': [['v1', 'adapters/gemma2b-lora-f16']],
  'roberta/lora': [['ckpt-500', 'roberta-lora/checkpoint-500'], ['ckpt-1000', 'roberta-lora/checkpoint-1000'], ['other', 'adapters/opt125m-lora-bf16']],
};
const repos = {};
let t0 = Date.parse('2026-11-01T10:00:00Z');
for (const [name, vs] of Object.entries(models)) {
  repos[name] = vs.map(([tag, p], i) => {
    const ins = run('inspect', '--stats', '--json', path.join(corpus, p));
    const digest = 'sha256:' + (ins.structural_hash.slice(0, 56) + String(i).padStart(8, '0'));
    return { tag, path: path.join(corpus, p), ins, digest, pushed: new Date((t0 += 3600e3)).toISOString().replace(/\.\d+Z/, 'Z') };
  });
}
// A synthetic 80-layer Llama-shaped diff (723 tensors) for the render benchmark
// (tests/dev/bench_diff.mjs): deterministic pseudo-random metrics.
const kSynth = 'synthetic/llama-80';
function synthTensors() {
  const names = ['model.embed_tokens.weight'];
  for (let l = 0; l < 80; l++) {
    for (const m of ['self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'self_attn.o_proj', 'mlp.gate_proj', 'mlp.up_proj', 'mlp.down_proj']) names.push(`model.layers.${l}.${m}.weight`);
    names.push(`model.layers.${l}.input_layernorm.weight`, `model.layers.${l}.post_attention_layernorm.weight`);
  }
  names.push('model.norm.weight', 'lm_head.weight');
  let seed = 1;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  return names.map((name) => {
    const a = 10 + rnd() * 10, d = a * 10 ** (-4 + 3 * rnd());
    return { name, dtype: 'BF16', shape: [8192, 8192], layer: null, elements: 67108864, changed: Math.round(67108864 * rnd()), fraction_changed: rnd(), finite_pairs: 67108864, rel_l2: d / a, max_abs_change: d / 100, cosine: 1 - (d / a) ** 2 / 2, l2_a: a, l2_b: a, l2_diff: d, a: { nan: 0, pos_inf: 0, neg_inf: 0 }, b: { nan: 0, pos_inf: 0, neg_inf: 0 } };
  });
}
const kSynthA = 'sha256:' + 'a'.repeat(64), kSynthB = 'sha256:' + 'b'.repeat(64);
const polls = new Map();
function asyncGate(key, q) {
  if (!q.has('async')) return null;
  const n = (polls.get(key) || 0) + 1;
  polls.set(key, n);
  return n <= 2 ? { state: 'computing', phase: 'encoding', done: n, total: 3, elapsed_ms: n * 1000 } : null;
}
function versionDoc(name, v, list) {
  const older = list.slice(0, list.indexOf(v)).reverse().find((o) => o.ins.structural_hash === v.ins.structural_hash);
  return {
    digest: v.digest, manifest_digest: v.digest.replace('sha256:', 'sha256:m'), tags: [v.tag], size: v.ins.total_bytes,
    pushed: v.pushed, structure: v.ins.structural_hash,
    previous: older ? { digest: older.digest, patch_bytes: Math.round(v.ins.total_bytes * 0.3), patch_cached: true } : null,
  };
}
function handleApi(u, res) {
  const send = (code, body) => { res.writeHead(code, { 'Content-Type': 'application/json', 'Retry-After': '1' }); res.end(JSON.stringify(body)); };
  const q = u.searchParams;
  if (u.pathname === '/v2/_blz/repositories') {
    const names = Object.keys(repos).sort().filter((n) => n.includes(q.get('q') || ''));
    const after = names.filter((n) => !q.get('last') || n > q.get('last'));
    const page = after.slice(0, Number(q.get('n') || 100));
    return send(200, {
      total: names.length,
      repositories: page.map((n) => { const l = repos[n][repos[n].length - 1]; return { name: n, versions: repos[n].length, latest: { tag: l.tag, digest: l.digest, size: l.ins.total_bytes, pushed: l.pushed, structure: l.ins.structural_hash }, last_push: l.pushed }; }),
    });
  }
  const m = /^\/v2\/(.+)\/blz\/(versions|version|stats|diff|patch-report)$/.exec(u.pathname);
  if (m && m[1] === kSynth) {
    const ts = synthTensors();
    if (m[2] === 'versions') return send(200, { name: kSynth, versions: [kSynthB, kSynthA].map((digest, i) => ({ digest, tags: [i ? 'base' : 'ft'], size: 140e9, pushed: '2026-11-01T10:00:00Z', structure: 'c'.repeat(64), previous: null })) });
    if (m[2] === 'diff') return send(200, { schema: 1, structure: { hash_equal: true }, values: { schema: 1, tensors: ts, layers: [], model: ts[0], added: [], removed: [], not_comparable: [] } });
    if (m[2] === 'patch-report') {
      const pieces = ts.map((t) => ({ name: t.name, kind: 'tensor', codec: 'xor-zstd', target_bytes: 134217728, patch_bytes: Math.round(134217728 * t.fraction_changed * 0.4) }));
      return send(200, { from: kSynthA, to: kSynthB, patch_bytes: pieces.reduce((s2, x) => s2 + x.patch_bytes, 0), target_bytes: 140e9, identical: 0, patched: pieces.length, added: 0, removed: [], pieces });
    }
  }
  if (!m || !repos[m[1]]) return send(404, { errors: [{ code: 'NAME_UNKNOWN', message: 'repository name not known to registry' }] });
  const list = repos[m[1]];
  const find = (d) => list.find((v) => v.digest === d);
  if (m[2] === 'versions') return send(200, { name: m[1], versions: [...list].reverse().map((v) => versionDoc(m[1], v, list)) });
  if (m[2] === 'version' || m[2] === 'stats') {
    const v = find(q.get('digest'));
    if (!v) return send(404, { errors: [{ code: 'MANIFEST_UNKNOWN', message: 'unknown version' }] });
    if (m[2] === 'stats') return send(...(asyncGate('s' + v.digest, q) ? [202, asyncGate('s' + v.digest, q)] : [200, v.ins.stats]));
    const cfgFile = path.join(v.path, 'config.json');
    return send(200, {
      ...versionDoc(m[1], v, list), format: v.ins.format === 'hf-dir' ? 'safetensors' : v.ins.format,
      files: (v.ins.files || []).map((f) => ({ path: f.path, bytes: f.size, kind: f.tensors ? 'safetensors' : 'raw' })),
      tensors: v.ins.tensors,
      metadata: { config: fs.existsSync(cfgFile) ? JSON.parse(fs.readFileSync(cfgFile, 'utf8')) : null, gguf: v.ins.format === 'gguf' ? { 'general.architecture': 'llama', 'general.name': 'tiny' } : null, files: {} },
    });
  }
  const a = find(q.get('from')); const b = find(q.get('to'));
  if (!a || !b) return send(404, { errors: [{ code: 'MANIFEST_UNKNOWN', message: 'unknown version' }] });
  const key = m[2] + a.digest + b.digest;
  const p = asyncGate(key, q);
  if (p) return send(202, p);
  const d = run('diff', a.path, b.path, '--values', '--json');
  if (m[2] === 'diff') return send(200, d);
  const pieces = b.ins.tensors.map((t) => {
    const v = d.values.tensors.find((x) => x.name === t.name);
    const same = v && v.changed === 0;
    return { name: t.name, kind: 'tensor', codec: same ? 'identical' : 'xor-zstd', target_bytes: t.bytes, patch_bytes: same ? 0 : Math.round(t.bytes * (v ? 0.2 + v.fraction_changed * 0.5 : 1)) };
  });
  const pb = pieces.reduce((s, x) => s + x.patch_bytes, 0);
  return send(200, { from: a.digest, to: b.digest, patch_bytes: pb, target_bytes: b.ins.total_bytes, identical: pieces.filter((x) => x.codec === 'identical').length, patched: pieces.filter((x) => x.codec !== 'identical').length, added: 0, removed: [], pieces });
}

const types = { '.js': 'text/javascript', '.css': 'text/css', '.html': 'text/html; charset=utf-8' };
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
http.createServer((req, res) => {
  const u = new URL(req.url, 'http://x');
  if (u.pathname.startsWith('/v2/')) return handleApi(u, res);
  if (u.pathname === '/') {
    const html = fs.readFileSync(path.join(webDir, 'src/index.html'), 'utf8')
      .replace('<!--BLZ_CSS-->', '<link rel="stylesheet" href="/src/style.css">')
      .replace('<!--BLZ_JS-->', '<script type="module" src="/src/main.js"></script>');
    res.writeHead(200, { 'Content-Type': types['.html'], 'Content-Security-Policy': csp });
    return res.end(html);
  }
  const f = path.join(webDir, path.normalize(u.pathname));
  if (u.pathname.startsWith('/src/') && fs.existsSync(f)) {
    res.writeHead(200, { 'Content-Type': types[path.extname(f)] || 'application/octet-stream', 'Content-Security-Policy': csp });
    return res.end(fs.readFileSync(f));
  }
  res.writeHead(404); res.end();
}).listen(Number(process.argv[2] || 8099), '127.0.0.1', () => console.log('mock on http://127.0.0.1:' + (process.argv[2] || 8099)));
