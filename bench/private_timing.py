#!/usr/bin/env python3
"""Does timing tell that a private version exists? (issue 23, item 6)

GET /v2/<name>/blz/patch?from=<digest>&to=<version> answers the same 404 MANIFEST_UNKNOWN
whether `from` is a version held only by repositories the caller may not pull ("private") or
no version at all ("unknown"). This measures whether the two can be told apart by their
response times.

Setup: `blz serve --private` on 127.0.0.1; one archive pushed to REPOS repositories
hidden-<i>/m (the private version), a target version in org/m, and a token limited to
org/*:pull. The caller alternates (in random order) requests whose `from` is the private
digest and requests whose `from` is a fresh random digest, on one keep-alive connection, and
records each response time (both must be 404 with the same body, checked).

Statistics (on the samples after WARMUP):
  AUC    the probability that a random private sample is slower than a random unknown one
         (Mann-Whitney U / (n*m)): 0.5 = indistinguishable, 1.0 = always slower;
  pairs  the share of (private, unknown) sample pairs in which the private one was slower
         (the same number, as "pairs distinguishable" = how often a guess "the slower one is
         the private one" is right);
  batch  a stronger attacker: TRIALS times, BATCH fresh samples of each kind, guess that the
         kind with the higher median is the private one; the share of right guesses;
  medians of both kinds in microseconds.

  python3 bench/private_timing.py --blz build-test/cli/blz [--repos 8] [--samples 4000]

Output: one markdown table row on stdout; progress on stderr. Only loopback traffic.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def log(msg):
    print("private_timing: " + msg, file=sys.stderr, flush=True)


def write_model(path, seed, hidden=16, layers=1):
    """A tiny Hugging Face style model directory (config.json + model.safetensors)."""
    os.makedirs(path, exist_ok=True)
    rng = random.Random(seed)
    tensors = [("model.embed_tokens.weight", [32, hidden])]
    for layer in range(layers):
        tensors.append((f"model.layers.{layer}.mlp.up.weight", [4 * hidden, hidden]))
    tensors.append(("model.norm.weight", [hidden]))
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape in tensors:
        count = 1
        for d in shape:
            count *= d
        data = struct.pack(f"<{count}f", *(rng.uniform(-0.5, 0.5) for _ in range(count)))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": "blz-bench", "hidden_size": hidden,
                   "num_hidden_layers": layers, "vocab_size": 32}, f)


def auc(slow, fast):
    """P(a sample of `slow` > a sample of `fast`), ties counting one half (Mann-Whitney)."""
    merged = sorted([(v, 0) for v in slow] + [(v, 1) for v in fast])
    ranks, i = [0.0] * len(merged), 0
    while i < len(merged):
        j = i
        while j + 1 < len(merged) and merged[j + 1][0] == merged[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    r_slow = sum(r for r, (_, kind) in zip(ranks, merged) if kind == 0)
    u = r_slow - len(slow) * (len(slow) + 1) / 2
    return u / (len(slow) * len(fast))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blz", default="build-test/cli/blz")
    ap.add_argument("--repos", type=int, default=8, help="repositories holding the private version")
    ap.add_argument("--samples", type=int, default=4000, help="requests of each kind")
    ap.add_argument("--warmup", type=int, default=200, help="requests of each kind not counted")
    ap.add_argument("--batch", type=int, default=15)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--label", default="")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    blz = os.path.realpath(args.blz)
    work = tempfile.mkdtemp(prefix="blz-private-timing-")
    server = None
    try:
        env = dict(os.environ, BLZ_CONFIG_DIR=os.path.join(work, "config"))
        out = open(os.path.join(work, "serve.out"), "w+")
        server = subprocess.Popen(
            [blz, "serve", "--private", "--data", os.path.join(work, "data"), "--listen",
             "127.0.0.1:0", "--no-web", "--log-format", "json"],
            stdout=out, stderr=open(os.path.join(work, "serve.log"), "w"))
        addr = token = None
        for _ in range(300):
            text = open(out.name).read()
            m = re.search(r"^listening on http://(\S+)$", text, re.M)
            t = re.search(r"^admin token: (\S+)$", text, re.M)
            if m and t:
                addr, token = m.group(1), t.group(1)
                break
            time.sleep(0.1)
        if addr is None:
            sys.exit("blz serve did not start: " + open(os.path.join(work, "serve.log")).read())
        env["BLZ_TOKEN"] = token
        log(f"registry on {addr}; pushing 1 private version to {args.repos} repositories")

        def push(model, ref):
            r = subprocess.run([blz, "push", model, f"{addr}/{ref}", "--json"], env=env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"push {ref} failed: {r.stderr}")
            return json.loads(r.stdout)["digest"]

        write_model(os.path.join(work, "secret"), seed=1)
        write_model(os.path.join(work, "target"), seed=2)
        private = None
        for i in range(args.repos):
            private = push(os.path.join(work, "secret"), f"hidden-{i}/m:v1")
        target = push(os.path.join(work, "target"), "org/m:v1")

        host, port = addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/v2/_blz/tokens",
                     body=json.dumps({"name": "reader", "scope": "org/*:pull"}),
                     headers={"Authorization": "Bearer " + token,
                              "Content-Type": "application/json"})
        resp = conn.getresponse()
        created = json.loads(resp.read())
        if resp.status != 201 and resp.status != 200:
            sys.exit(f"token create: {resp.status} {created}")
        reader = created["token"]
        headers = {"Authorization": "Bearer " + reader}

        rng = random.Random(args.seed)
        times = {"private": [], "unknown": []}
        bodies = {}
        kinds = ["private", "unknown"] * (args.samples + args.warmup)
        rng.shuffle(kinds)
        seen = {"private": 0, "unknown": 0}
        log(f"{len(kinds)} requests")
        for kind in kinds:
            digest = private if kind == "private" else "sha256:%064x" % rng.getrandbits(256)
            target_url = f"/v2/org/m/blz/patch?from={digest}&to={target}"
            start = time.perf_counter_ns()
            conn.request("GET", target_url, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            elapsed = time.perf_counter_ns() - start
            if resp.status != 404:
                sys.exit(f"{kind}: expected 404, got {resp.status} {body[:200]!r}")
            bodies[kind] = body.replace(digest.encode(), b"<from>")
            seen[kind] += 1
            if seen[kind] > args.warmup:
                times[kind].append(elapsed / 1000.0)
        if bodies["private"] != bodies["unknown"]:
            sys.exit(f"the bodies differ: {bodies}")

        p, u = times["private"], times["unknown"]
        a = auc(p, u)
        right = 0
        for _ in range(args.trials):
            bp = statistics.median(rng.sample(p, args.batch))
            bu = statistics.median(rng.sample(u, args.batch))
            right += 1 if bp > bu else (0.5 if bp == bu else 0)
        print(f"| {args.label or os.path.basename(os.path.dirname(os.path.dirname(blz)))} "
              f"| {args.repos} | {len(p)} | {statistics.median(p):.1f} | {statistics.median(u):.1f} "
              f"| {statistics.median(p) - statistics.median(u):+.1f} | {a:.3f} "
              f"| {100.0 * right / args.trials:.1f}% |")
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
