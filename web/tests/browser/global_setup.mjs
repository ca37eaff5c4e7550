// Starts two real `blz serve` (one public, one --private) on free loopback ports with temporary
// data directories, and pushes real versions with the real `blz push`:
//   demo/tiny-gpt2:base, :ft    corpus tiny-gpt2/base -> ft-v1 (same structure; a diff pair)
//   roberta/lora:ckpt-500,:ckpt-1000  corpus roberta-lora checkpoints (a timeline), and
//     :other-structure           corpus adapters/opt125m-lora-bf16 (a structural diff)
//   gguf/llama-tiny:v1, :v2-edited  corpus gguf/llama-2-tiny-random.gguf, and a copy with some
//                               tensor values zeroed (a GGUF-naming diff)
//   adapters/gemma-nan:v1       corpus adapters/gemma2b-lora-f16 (every value NaN: stats alarms)
//   hostile/model:v1, :v2       generated here: tensor names and config.json values with markup
//   private/tiny:base           on the --private server
// The state (addresses, tokens, digests, paths) goes to a JSON file named by $BLZ_WEB_STATE.
// Without the corpus, the state says why and every browser test skips with that message.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeSafetensors, hostileNames, hostileConfig } from './fixtures.mjs';

const webDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function startServe(blz, data, extra, work, label) {
  const out = path.join(work, `${label}.out`);
  const err = path.join(work, `${label}.err`);
  const child = spawn(blz, ['serve', '--data', data, '--listen', '127.0.0.1:0', ...extra], {
    stdio: ['ignore', fs.openSync(out, 'w'), fs.openSync(err, 'w')],
    env: { ...process.env, BLZ_CONFIG_DIR: path.join(work, 'config') },
  });
  return { child, out, err };
}

async function waitListening(s) {
  for (let i = 0; i < 200; i++) {
    const text = fs.existsSync(s.out) ? fs.readFileSync(s.out, 'utf8') : '';
    const m = /^listening on http:\/\/(\S+)$/m.exec(text);
    if (m) {
      const t = /^admin token: (\S+)$/m.exec(text);
      return { addr: m[1], token: t ? t[1] : null };
    }
    if (s.child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`blz serve did not start: ${fs.readFileSync(s.err, 'utf8')}`);
}

function push(blz, work, token, input, ref) {
  const out = execFileSync(blz, ['push', '--json', '-q', '--cache', path.join(work, 'cache'), input, ref], {
    env: { ...process.env, BLZ_CONFIG_DIR: path.join(work, 'config'), BLZ_TOKEN: token },
    encoding: 'utf8',
  });
  return JSON.parse(out).digest;
}

export default async function globalSetup() {
  const blz = path.resolve(webDir, process.env.BLZ_BIN || '../build-dev/cli/blz');
  const corpus = path.resolve(webDir, process.env.BLZ_CORPUS || '../../shared/corpus');
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'blz-web-'));
  const stateFile = path.join(work, 'state.json');
  process.env.BLZ_WEB_STATE = stateFile;
  fs.mkdirSync(path.join(webDir, 'test-results', 'screenshots'), { recursive: true });

  if (!fs.existsSync(blz)) throw new Error(`blz binary not found at ${blz} (set BLZ_BIN)`);
  if (!fs.existsSync(path.join(corpus, 'tiny-gpt2', 'base'))) {
    fs.writeFileSync(stateFile, JSON.stringify({ skip: `corpus not found at ${corpus} (set BLZ_CORPUS); browser tests need real model files` }));
    return () => fs.rmSync(work, { recursive: true, force: true });
  }

  const pub = startServe(blz, path.join(work, 'data'), [], work, 'serve');
  const priv = startServe(blz, path.join(work, 'data-private'), ['--private'], work, 'serve-private');
  const servers = [pub, priv];
  const teardown = async () => {
    for (const s of servers) {
      if (s.child.exitCode === null) {
        s.child.kill('SIGTERM');
        await new Promise((r) => { s.child.once('exit', r); setTimeout(r, 5000); });
      }
    }
    if (!process.env.BLZ_WEB_KEEP) fs.rmSync(work, { recursive: true, force: true });
  };
  try {
    const p = await waitListening(pub);
    const q = await waitListening(priv);
    const home = await fetch(`http://${p.addr}/`);
    const type = home.headers.get('content-type') || '';
    if (home.status !== 200 || !type.startsWith('text/html')) {
      throw new Error(`${blz} serves no web view at / (${home.status} ${type}): build it with the web/ assets embedded`);
    }
    const models = path.join(work, 'models');
    fs.mkdirSync(models, { recursive: true });
    // A second GGUF version for the GGUF-naming heatmap: the corpus file with two 2 KiB runs of
    // its tensor data zeroed (same structure, some values changed; made here, not a corpus file).
    const ggufA = path.join(corpus, 'gguf', 'llama-2-tiny-random.gguf');
    const ggufB = path.join(models, 'gguf-v2', 'llama-2-tiny-random.gguf'); // same file name
    fs.mkdirSync(path.dirname(ggufB));
    const bytes = fs.readFileSync(ggufA);
    for (const back of [300000, 700000]) bytes.fill(0, bytes.length - back, bytes.length - back + 2048);
    fs.writeFileSync(ggufB, bytes);
    for (const v of [1, 2]) {
      const dir = path.join(models, `hostile-v${v}`);
      fs.mkdirSync(dir, { recursive: true });
      writeSafetensors(path.join(dir, 'model.safetensors'), hostileNames.map((name, i) => ({ name, values: [i + 1, -(i + 1), 0.5 * v, i * v] })), { note: '<script>alert("meta")</script>' });
      fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(hostileConfig));
    }
    const pushes = [
      ['base', path.join(corpus, 'tiny-gpt2', 'base'), 'demo/tiny-gpt2:base'],
      ['ft', path.join(corpus, 'tiny-gpt2', 'ft-v1'), 'demo/tiny-gpt2:ft'],
      ['ckpt500', path.join(corpus, 'roberta-lora', 'checkpoint-500'), 'roberta/lora:ckpt-500'],
      ['ckpt1000', path.join(corpus, 'roberta-lora', 'checkpoint-1000'), 'roberta/lora:ckpt-1000'],
      ['other', path.join(corpus, 'adapters', 'opt125m-lora-bf16'), 'roberta/lora:other-structure'],
      ['gguf', ggufA, 'gguf/llama-tiny:v1'],
      ['gguf2', ggufB, 'gguf/llama-tiny:v2-edited'],
      ['nan', path.join(corpus, 'adapters', 'gemma2b-lora-f16'), 'adapters/gemma-nan:v1'],
      ['hostile1', path.join(models, 'hostile-v1'), 'hostile/model:v1'],
      ['hostile2', path.join(models, 'hostile-v2'), 'hostile/model:v2'],
    ];
    const digests = {};
    for (const [key, input, ref] of pushes) digests[key] = push(blz, work, p.token, input, `${p.addr}/${ref}`);
    const privDigest = push(blz, work, q.token, path.join(corpus, 'tiny-gpt2', 'base'), `${q.addr}/private/tiny:base`);
    fs.writeFileSync(stateFile, JSON.stringify({
      blz, corpus, work, ggufA, ggufB,
      url: `http://${p.addr}`, token: p.token,
      privateUrl: `http://${q.addr}`, privateToken: q.token, privateDigest: privDigest,
      digests,
    }, null, 2));
  } catch (e) {
    await teardown();
    throw e;
  }
  return teardown;
}
