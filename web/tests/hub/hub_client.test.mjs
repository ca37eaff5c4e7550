// The real JS Hub client, @huggingface/hub (pinned in web/package.json), against blz's Hugging
// Face Hub API (docs/huggingface.md) with `hubUrl` set (issue 26, "Proof"):
//   - four `blz serve` started here: public and --private, each over HTTP and HTTPS (a CA and a
//     certificate for 127.0.0.1 made with openssl, trusted by the client via NODE_EXTRA_CA_CERTS);
//   - on each, a safetensors model (corpus tiny-gpt2/base) and a GGUF model (corpus
//     gguf/llama-2-tiny-random.gguf) pushed with the real `blz push`;
//   - per registry and with / without a token: listFiles, modelInfo and downloadFile of every
//     file (tests/hub/hub_run.mjs, a process of its own), byte-identical to `blz pull` of the same
//     version, and the largest file read again as a cut download resumed with Range; without a
//     token a private registry answers 401.
// Run: BLZ_BIN=build-test/cli/blz node --test web/tests/hub/   (scripts/test.sh does it).
// Skips, saying why, when node_modules (npm ci in web/), the blz binary, openssl or the corpus
// (../shared/corpus, BLZ_CORPUS) is missing.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const webDir = path.resolve(here, '../..');
const blz = path.resolve(webDir, process.env.BLZ_BIN || '../build-test/cli/blz');
const corpus = path.resolve(webDir, process.env.BLZ_CORPUS || '../../shared/corpus');

function hasCommand(cmd) {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function whyNot() {
  if (!fs.existsSync(path.join(webDir, 'node_modules', '@huggingface', 'hub'))) {
    return 'web/node_modules/@huggingface/hub missing: run `npm ci` in web/ (scripts/test.sh does)';
  }
  if (!fs.existsSync(blz)) return `no blz binary at ${blz} (build it, or set BLZ_BIN)`;
  if (!hasCommand('openssl')) return 'openssl not found (scripts/setup.sh installs it)';
  if (!fs.existsSync(path.join(corpus, 'tiny-gpt2', 'base'))) {
    return `corpus not found at ${corpus} (set BLZ_CORPUS); these tests need real model files`;
  }
  return null;
}

const skip = whyNot();
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'blz-hub-js-'));
const servers = [];

after(async () => {
  for (const s of servers) {
    if (s.child.exitCode === null) {
      s.child.kill('SIGTERM');
      await new Promise((r) => { s.child.once('exit', r); setTimeout(r, 5000); });
    }
  }
  if (!process.env.BLZ_HUB_KEEP) fs.rmSync(work, { recursive: true, force: true });
});

function makeCertificate() {
  fs.writeFileSync(path.join(work, 'ca.cnf'), [
    '[req]', 'distinguished_name = dn', 'prompt = no', 'x509_extensions = v3_ca',
    '[dn]', 'CN = blz hub test CA',
    '[v3_ca]', 'basicConstraints = critical,CA:TRUE', 'keyUsage = critical,keyCertSign,cRLSign', ''].join('\n'));
  fs.writeFileSync(path.join(work, 'srv.cnf'), [
    '[req]', 'distinguished_name = dn', 'prompt = no', '[dn]', 'CN = registry',
    '[v3_srv]', 'basicConstraints = CA:FALSE', 'keyUsage = critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage = serverAuth', 'subjectAltName = IP:127.0.0.1', ''].join('\n'));
  const ossl = (...a) => execFileSync('openssl', a, { cwd: work, stdio: 'ignore' });
  ossl('req', '-x509', '-config', 'ca.cnf', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2');
  ossl('req', '-new', '-config', 'srv.cnf', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-nodes', '-keyout', 'srv.key', '-out', 'srv.csr');
  ossl('x509', '-req', '-in', 'srv.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial',
    '-out', 'srv.pem', '-days', '2', '-extfile', 'srv.cnf', '-extensions', 'v3_srv');
}

async function startServe(label, extra) {
  const dir = path.join(work, label);
  fs.mkdirSync(dir, { recursive: true });
  const out = path.join(dir, 'serve.out');
  const err = path.join(dir, 'serve.err');
  const child = spawn(blz, ['serve', '--data', path.join(dir, 'data'), '--listen', '127.0.0.1:0', ...extra], {
    stdio: ['ignore', fs.openSync(out, 'w'), fs.openSync(err, 'w')],
    env: { ...process.env, BLZ_CONFIG_DIR: path.join(dir, 'config') },
  });
  const s = { label, dir, child };
  servers.push(s);
  for (let i = 0; i < 400; i++) {
    const text = fs.existsSync(out) ? fs.readFileSync(out, 'utf8') : '';
    const m = /^listening on (https?):\/\/(\S+)$/m.exec(text);
    const t = /^admin token: (\S+)$/m.exec(text);
    if (m && t) return Object.assign(s, { scheme: m[1], addr: m[2], token: t[1] });
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`blz serve (${label}) did not start: ${fs.readFileSync(err, 'utf8')}`);
}

function blzRun(s, args) {
  const tls = s.scheme === 'https' ? ['--ca-cert', path.join(work, 'ca.pem')] : [];
  return execFileSync(blz, [...args, '--cache', path.join(s.dir, 'cache'), ...tls], {
    env: { ...process.env, BLZ_CONFIG_DIR: path.join(s.dir, 'config'), BLZ_TOKEN: s.token },
    encoding: 'utf8',
  });
}

// The versions every registry holds: [Hub repo id, tag, what was pushed].
const versions = [
  ['demo/tiny-gpt2', 'v1', () => path.join(corpus, 'tiny-gpt2', 'base')],
  ['gguf/llama-tiny', 'v1', () => path.join(corpus, 'gguf', 'llama-2-tiny-random.gguf')],
];

// A failed set-up fails every test with its message (and the servers still stop: after()).
let setupError = null;
// Servers never outlive this process, whatever happens to it.
process.on('exit', () => { for (const s of servers) if (s.child.exitCode === null) s.child.kill('SIGKILL'); });
if (!skip) try {
  makeCertificate();
  const tls = ['--tls-cert', path.join(work, 'srv.pem'), '--tls-key', path.join(work, 'srv.key')];
  await startServe('public-http', []);
  await startServe('private-http', ['--private']);
  await startServe('public-https', tls);
  await startServe('private-https', ['--private', ...tls]);
  for (const s of servers) {
    s.pulled = {};
    for (const [repo, tag, input] of versions) {
      const ref = `${s.scheme}://${s.addr}/${repo}:${tag}`;
      blzRun(s, ['push', '-q', input(), ref]);
      const dir = path.join(s.dir, 'pulled', repo);
      fs.mkdirSync(path.dirname(dir), { recursive: true });
      blzRun(s, ['pull', '-q', ref, '-o', dir]);
      s.pulled[repo] = dir;
    }
  }
} catch (e) {
  setupError = e;
}

// Every regular file below `dir`, as '/'-separated relative paths, sorted.
function filesBelow(dir, prefix = '') {
  const out = [];
  for (const e of fs.readdirSync(path.join(dir, prefix), { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...filesBelow(dir, rel));
    else if (e.isFile()) out.push(rel);
  }
  return out.sort();
}

// The Hub client refuses tokens that do not start with "hf_" (utils/checkCredentials.ts); blz
// takes "hf_" + its API token as that token (docs/huggingface.md).
const hubToken = (token) => `hf_${token}`;

function runClient(s, repo, tag, withToken, out) {
  const env = { ...process.env };
  if (s.scheme === 'https') env.NODE_EXTRA_CA_CERTS = path.join(work, 'ca.pem');
  const args = {
    hubUrl: `${s.scheme}://${s.addr}`,
    repo,
    revision: tag,
    accessToken: withToken ? hubToken(s.token) : null,
    out,
  };
  const stdout = execFileSync(process.execPath, [path.join(here, 'hub_run.mjs'), JSON.stringify(args)], {
    cwd: webDir, env, encoding: 'utf8',
  });
  return JSON.parse(stdout.trim().split('\n').pop());
}

for (const label of ['public-http', 'public-https', 'private-http', 'private-https']) {
  for (const withToken of [false, true]) {
    for (const [repo, tag] of versions) {
      const name = `${label}, ${withToken ? 'with' : 'without'} a token: ${repo}:${tag}`;
      test(name, { skip: skip ?? false }, () => {
        if (setupError) throw setupError;
        const s = servers.find((x) => x.label === label);
        const out = path.join(s.dir, 'hub', `${withToken ? 'token' : 'anon'}`, repo);
        const r = runClient(s, repo, tag, withToken, out);
        if (label.startsWith('private') && !withToken) {
          assert.equal(r.ok, false, 'a private registry must refuse an anonymous Hub client');
          assert.equal(r.status, 401, r.message);
          return;
        }
        assert.equal(r.ok, true, r.message);
        const pulled = s.pulled[repo];
        // listFiles names exactly the files `blz pull` wrote, with their sizes.
        assert.deepEqual(r.files.map((f) => f.path).sort(), filesBelow(pulled));
        for (const f of r.files) {
          const want = fs.readFileSync(path.join(pulled, f.path));
          assert.equal(f.size, want.length, f.path);
          assert.ok(fs.readFileSync(path.join(out, f.path)).equals(want), `${f.path} differs from blz pull`);
        }
        assert.equal(r.info.name, repo);
        assert.equal(r.info.private, label.startsWith('private'));
        assert.match(r.info.sha ?? '', /^[0-9a-f]{40}$/);
        assert.ok(r.resumed !== null);
        const resumed = fs.readFileSync(path.join(out + '.resumed', r.resumed.path));
        assert.ok(resumed.equals(fs.readFileSync(path.join(pulled, r.resumed.path))), 'resumed download differs');
      });
    }
  }
}
