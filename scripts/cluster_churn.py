#!/usr/bin/env python3
"""The churn test of issue 25, against a cluster made by scripts/cluster.sh (run it through
scripts/cluster_churn.sh, which starts and stops the cluster).

For --duration seconds, through nginx (round robin over every replica):
  - one pusher per repository pushes versions of small generated models to its tags, in small
    chunks (--chunk-size 64 KiB, so one upload's PATCHes land on different replicas), and
    removes versions (`blz rm`, which drops the manifest and every tag on it) or untags
    (DELETE /v2/<repo>/manifests/<tag>);
  - pullers pull random tags (a success must be byte-identical to one of the repository's
    versions; a tag removed meanwhile makes a failure that only counts);
  - a collector asks for garbage collection (POST /v2/_blz/gc) every few seconds;
  - a killer kills -9 a random replica at a random moment (`cluster.sh kill`) and restarts it
    after a random pause (`cluster.sh restart`).
Every random choice comes from --seed (printed first: BLZ_CHURN_SEED reruns it); the moments
of the kills relative to requests and the interleaving of the threads still vary with the
machine's timing, so a seed reproduces the sequence of operations, not the exact race. Kills,
failed attempts and failed checks are logged as they happen.

Then, with every replica up again:
  1. every repository's tag list is exactly the tags the pushers left (a push or rm that
     failed is retried until it is known to have happened);
  2. every live tag pulls byte-identical to what was pushed (a fresh client cache per pull),
     and no pull met BLOB_UNKNOWN;
  3. once every replica's background compression is idle (`pending` 0 in its
     /v2/_blz/storage: what it writes for versions deleted meanwhile is young garbage, which a
     collection rightly keeps for the grace period) and the grace period has passed, a garbage
     collection (and, when it re-based chain links first, another after the grace period: a
     re-base onto a new parent leaves the full patch it computed as young garbage), then a dry
     run: nothing unreferenced is left in the bucket (no leak), and the blobs/ objects listed
     in the bucket are the collector's count of stored blobs;
  4. drain: every manifest still in the database is deleted, compression is idle, the grace
     period passes, a collection runs and the bucket's blobs/ prefix is empty (0 objects,
     0 bytes): one collection takes every dead chain whole; every
     replica restarts once after the upload idle timeout and the uploads/ prefix (parts of
     chunked uploads cut by a kill) is empty too.
Exit 0 when all hold, 1 otherwise (each failed check printed).
"""
import argparse
import array
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(f"churn {time.strftime('%H:%M:%S')}: {msg}", flush=True)


# -- models ---------------------------------------------------------------------------------

def write_model(d, model, version):
    """A small safetensors model (~130 KB): version 0 is the base; version v > 0 moves every
    7th weight of each tensor a little (a fine-tune: the registry computes patches)."""
    os.makedirs(d, exist_ok=True)
    rng = random.Random(1000 + model)
    sizes = {"embed.weight": 16384, "h.0.weight": 8192, "h.1.weight": 8192, "norm.weight": 64}
    header, blobs, off = {}, [], 0
    for name in sorted(sizes):
        n = sizes[name]
        vals = array.array("f", (rng.uniform(-0.05, 0.05) for _ in range(n)))
        if version:
            tune = random.Random(model * 1000 + version)
            for i in range(0, n, 7):
                vals[i] += tune.uniform(-0.001, 0.001)
        data = vals.tobytes()
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "churn_model": model, "version": version}, f)


def read_tree(d):
    out = {}
    for root, _, files in os.walk(d):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


# -- the cluster ----------------------------------------------------------------------------

class Cluster:
    def __init__(self, args):
        self.args = args
        self.url = args.url.rstrip("/")
        self.host = self.url.split("://", 1)[1]
        self.token = args.token
        self.dir = args.cluster_dir
        self.replicas = args.replicas.split()
        self.s3 = {}
        with open(os.path.join(self.dir, "s3.env")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.strip().split("=", 1)
                    self.s3[k] = v
        self.lock = threading.Lock()  # kill/restart one at a time

    def http(self, method, path, base=None, accept=None, timeout=60):
        req = urllib.request.Request((base or self.url) + path, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except Exception as e:  # connection reset by a kill, nginx timeouts
            return 0, str(e).encode()

    def script(self, *words):
        return subprocess.run(["bash", os.path.join(HERE, "cluster.sh"), *words],
                              capture_output=True, text=True)

    def kill(self, k):
        with self.lock:
            self.script("kill", self.dir, str(k))

    def restart(self, k):
        with self.lock:
            r = self.script("restart", self.dir, str(k))
            if r.returncode != 0:
                log(f"replica {k} did not restart: {r.stderr.strip()[-400:]}")
            return r.returncode == 0

    def alive(self, k):
        try:
            with open(os.path.join(self.dir, f"r{k}", "pid")) as f:
                os.kill(int(f.read()), 0)
            return True
        except (OSError, ValueError):
            return False

    def wait_ready(self, k, seconds=60):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.http("GET", "/readyz", base=self.replicas[k - 1], timeout=5)[0] == 200:
                return True
            time.sleep(0.2)
        return False

    def bucket(self, prefix, modified=False):
        """(key, size) of every object under `prefix` in the bucket (ListObjectsV2 by curl);
        (key, size, LastModified as the server wrote it) when `modified`."""
        out, token = [], None
        while True:
            q = f"list-type=2&prefix={urllib.request.quote(prefix, safe='')}"
            if token:
                q += "&continuation-token=" + urllib.request.quote(token, safe="")
            r = subprocess.run(
                ["curl", "-sS", "--fail-with-body", "--aws-sigv4",
                 f"aws:amz:{self.s3['S3_REGION']}:s3",
                 "--user", f"{self.s3['S3_ACCESS_KEY']}:{self.s3['S3_SECRET_KEY']}",
                 "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                 f"{self.s3['S3_ENDPOINT']}/blz?{q}"], capture_output=True)
            if r.returncode != 0:
                raise RuntimeError(f"listing the bucket failed: {r.stdout[-300:]} {r.stderr[-300:]}")
            root = ET.fromstring(r.stdout)
            ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            for c in root.findall(ns + "Contents"):
                row = (c.find(ns + "Key").text, int(c.find(ns + "Size").text))
                out.append(row + (c.findtext(ns + "LastModified"),) if modified else row)
            if root.findtext(ns + "IsTruncated") == "true":
                token = root.findtext(ns + "NextContinuationToken")
            else:
                return out

    def psql(self, sql):
        r = subprocess.run(["psql", "-X", "-A", "-t", "-F", "\t", self.args.pg, "-c", sql],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"psql: {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines() if line]


# -- the workers ----------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []  # checks that failed

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, msg):
        with self.lock:
            self.failures.append(msg)
        log("FAIL: " + msg)


class Pusher(threading.Thread):
    """Owns repository churn/m<i>: pushes, removes and untags; keeps the expected state."""

    def __init__(self, cluster, stats, index, seed, deadline, work):
        super().__init__(daemon=True)
        self.c, self.stats, self.i = cluster, stats, index
        self.rng = random.Random(seed)
        self.deadline = deadline
        self.repo = f"churn/m{index}"
        self.tags = {}  # tag -> (version, manifest digest): the expected live tags
        self.work = work
        self.env = dict(os.environ, BLZ_TOKEN=cluster.token,
                        BLZ_CACHE_DIR=os.path.join(work, f"cache-push{index}"),
                        BLZ_CONFIG_DIR=os.path.join(work, f"config-push{index}"))
        self.error = None

    def model_dir(self, version):
        return os.path.join(self.work, "models", f"m{self.i}", f"v{version}")

    def blz(self, *words, timeout=180):
        try:
            return subprocess.run([self.c.args.blz, *words], env=self.env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(e.cmd, 124, "", "timed out")

    def until_done(self, what, attempt):
        """Runs attempt() until it answers True (done) or False (known not done, stop); a
        failed attempt (None) is retried: a kill may have cut it, its effect is unknown."""
        for n in range(30):
            r = attempt()
            if r is not None:
                return r
            self.stats.add("retried " + what)
            time.sleep(0.3 + 0.2 * n)
        raise RuntimeError(f"{self.repo}: {what} did not succeed in 30 attempts")

    def push(self, version, tag):
        def attempt():
            r = self.blz("push", self.model_dir(version), f"{self.c.host}/{self.repo}:{tag}",
                         "--json", "-q", "--chunk-size", "65536", "--retries", "3")
            if r.returncode != 0:
                self.stats.add("push attempts failed")
                log(f"{self.repo}:{tag} push v{version} failed (exit {r.returncode}): "
                    f"{r.stderr.strip()[-200:]}")
                return None
            result = json.loads(r.stdout)
            self.tags[tag] = (version, result["manifest_digest"])
            self.stats.add("push retries inside blz", result.get("retries", 0))
            return True
        self.until_done("push", attempt)
        self.stats.add("pushes")

    def remove(self, tag):
        """blz rm: the manifest goes, and every tag of this repository that points at it."""
        digest = self.tags[tag][1]
        def attempt():
            r = self.blz("rm", f"{self.c.host}/{self.repo}@{digest}", "--json")
            if r.returncode in (0, 3):  # 3: not found, i.e. an earlier attempt removed it
                return True
            self.stats.add("rm attempts failed")
            return None
        self.until_done("rm", attempt)
        for t in [t for t, (_, d) in self.tags.items() if d == digest]:
            del self.tags[t]
        self.stats.add("removes")

    def untag(self, tag):
        def attempt():
            st, body = self.c.http("DELETE", f"/v2/{self.repo}/manifests/{tag}")
            if st in (202, 404):
                return True
            self.stats.add("untag attempts failed")
            return None
        self.until_done("untag", attempt)
        del self.tags[tag]
        self.stats.add("untags")

    def run(self):
        try:
            while time.time() < self.deadline:
                op = self.rng.random()
                tag = f"t{self.rng.randrange(4)}"
                if op < 0.65 or tag not in self.tags:
                    self.push(self.rng.randrange(self.c.args.versions), tag)
                elif op < 0.85:
                    self.remove(tag)
                else:
                    self.untag(tag)
                time.sleep(self.rng.uniform(0, 0.3))
        except Exception as e:  # noqa: BLE001 (reported as a failure)
            self.error = str(e)
            self.stats.fail(str(e))


class Puller(threading.Thread):
    """Pulls random tags during the churn (a store of its own kept across pulls, so that later
    pulls ask for patches from versions it holds). A tag may be removed meanwhile, so a failed
    pull only counts; a pull that succeeds must be byte-identical to one of the repository's
    versions."""

    def __init__(self, cluster, stats, index, seed, deadline, work, pushers, versions):
        super().__init__(daemon=True)
        self.c, self.stats, self.rng, self.deadline = cluster, stats, random.Random(seed), deadline
        self.work, self.pushers, self.versions = work, pushers, versions
        self.env = dict(os.environ, BLZ_TOKEN=cluster.token,
                        BLZ_CACHE_DIR=os.path.join(work, f"cache-puller{index}"),
                        BLZ_CONFIG_DIR=os.path.join(work, f"config-puller{index}"))
        self.out = os.path.join(work, f"puller{index}")

    def run(self):
        models = {(p.i, v): read_tree(p.model_dir(v)) for p in self.pushers
                  for v in range(self.versions)}
        while time.time() < self.deadline:
            p = self.rng.choice(self.pushers)
            tag = f"t{self.rng.randrange(4)}"
            shutil.rmtree(self.out, ignore_errors=True)
            try:
                r = subprocess.run([self.c.args.blz, "pull", f"{self.c.host}/{p.repo}:{tag}",
                                    "-o", self.out, "-q"], env=self.env, capture_output=True,
                                   text=True, timeout=120)
            except subprocess.TimeoutExpired:
                self.stats.add("churn pulls timed out")
                continue
            if r.returncode != 0:
                self.stats.add(f"churn pulls failed (exit {r.returncode})")
                continue
            got = read_tree(self.out)
            if not any(got == models[(p.i, v)] for v in range(self.versions)):
                self.stats.fail(f"{p.repo}:{tag}: a pull during the churn gave bytes of no version")
            else:
                self.stats.add("churn pulls byte-identical")
            time.sleep(self.rng.uniform(0, 0.3))


class Collector(threading.Thread):
    def __init__(self, cluster, stats, seed, deadline):
        super().__init__(daemon=True)
        self.c, self.stats, self.rng, self.deadline = cluster, stats, random.Random(seed), deadline

    def run(self):
        while time.time() < self.deadline:
            time.sleep(self.rng.uniform(1, 4))
            st, body = self.c.http("POST", "/v2/_blz/gc")
            if st == 200:
                rep = json.loads(body)
                self.stats.add("gc runs")
                self.stats.add("gc blobs removed", rep.get("blobs_removed", 0))
                if rep.get("errors"):
                    self.stats.add("gc runs with errors")
                    log(f"gc errors: {rep['errors'][:3]}")
            else:
                self.stats.add(f"gc answered {st}")


class Killer(threading.Thread):
    def __init__(self, cluster, stats, seed, deadline, n):
        super().__init__(daemon=True)
        self.c, self.stats, self.rng = cluster, stats, random.Random(seed)
        self.deadline, self.n = deadline, n

    def run(self):
        while True:
            time.sleep(self.rng.uniform(1.5, 5))
            if time.time() >= self.deadline:
                return
            k = self.rng.randrange(1, self.n + 1)
            log(f"kill -9 replica {k}")
            self.c.kill(k)
            self.stats.add("kills")
            time.sleep(self.rng.uniform(0.3, 3))
            if not self.c.restart(k):
                self.stats.fail(f"replica {k} did not restart after its kill")
                return


# -- the checks -----------------------------------------------------------------------------

def collect(cluster, stats, what, dry_run=False):
    """One garbage collection through a replica directly (retried while another holds the lease)."""
    for _ in range(60):
        st, body = cluster.http("POST", "/v2/_blz/gc" + ("?dry_run=true" if dry_run else ""),
                                base=cluster.replicas[0], timeout=300)
        if st == 200:
            return json.loads(body)
        time.sleep(1)
    stats.fail(f"{what}: garbage collection did not run: {st} {body[:300]!r}")
    return None


def wait_idle(cluster, stats, what, seconds=180):
    """Waits until no replica has compression queued or running (`pending` 0)."""
    start = time.time()
    deadline = start + seconds
    pending = {}
    while time.time() < deadline:
        for base in cluster.replicas:
            st, body = cluster.http("GET", "/v2/_blz/storage", base=base, timeout=30)
            pending[base] = json.loads(body).get("pending") if st == 200 else f"HTTP {st}"
        if all(v == 0 for v in pending.values()):
            log(f"{what}: compression idle on every replica after {time.time() - start:.1f} s")
            return
        time.sleep(0.5)
    stats.fail(f"{what}: background compression still busy after {seconds} s: {pending}")


def explain(cluster, names):
    """Logs, for a failed check of what the bucket holds, the metadata rows and the replicas'
    log lines that name the blobs `names` (hex digests) or any patch or chain link."""
    for table in ("manifests", "tags", "versions", "manifest_blobs", "repository_blobs",
                  "patches", "blobs", "gc_deletions", "jobs"):
        log(f"  {table}: {cluster.psql(f'SELECT count(*) FROM {table}')[0][0]} rows")
    now = int(time.time())
    for sql in ("SELECT from_digest, to_digest, patch_digest FROM patches",
                "SELECT parent_digest, archive_digest, patch_digest, depth FROM archive_chains",
                f"SELECT digest, {now} - created FROM repository_blobs",
                "SELECT digest, touched FROM blobs"):
        for row in cluster.psql(sql)[:12]:
            log(f"  {sql.split(' FROM ')[1]}: {' '.join(c.replace('sha256:', '')[:16] for c in row)}")
    # Who wrote or touched them: the replicas' log lines that name them.
    names = {n.replace("sha256:", "") for n in names}
    for sql in ("SELECT from_digest, to_digest, patch_digest FROM patches",
                "SELECT parent_digest, archive_digest, patch_digest FROM archive_chains"):
        for row in cluster.psql(sql):
            names.update(c.replace("sha256:", "") for c in row if c)
    for hexd in sorted(names):
        for k in range(1, len(cluster.replicas) + 1):
            try:
                with open(os.path.join(cluster.dir, f"r{k}", "serve.err"),
                          errors="replace") as f:
                    lines = [line.rstrip() for line in f if hexd in line]
            except OSError:
                lines = []
            for line in lines[-12:]:
                log(f"  {hexd[:12]} replica {k}: {line[:400]}")


def check(cluster, stats, pushers, args, work):
    models = {(p.i, v): read_tree(p.model_dir(v)) for p in pushers for v in range(args.versions)}
    # 1. tag lists
    for p in pushers:
        st, body = cluster.http("GET", f"/v2/{p.repo}/tags/list")
        got = set(json.loads(body).get("tags") or []) if st == 200 else set()
        if st not in (200, 404) or got != set(p.tags):
            stats.fail(f"{p.repo}: tags {sorted(got)} (HTTP {st}), expected {sorted(p.tags)}")
    # 2. byte-identical pulls, through nginx, a fresh cache each
    live = [(p, tag, v) for p in pushers for tag, (v, _) in sorted(p.tags.items())]
    for n, (p, tag, v) in enumerate(live):
        out = os.path.join(work, f"pull{n}")
        env = dict(os.environ, BLZ_TOKEN=cluster.token,
                   BLZ_CACHE_DIR=os.path.join(work, f"cache-pull{n}"),
                   BLZ_CONFIG_DIR=os.path.join(work, "config-pull"))
        r = subprocess.run([args.blz, "pull", f"{cluster.host}/{p.repo}:{tag}", "-o", out, "-q"],
                           env=env, capture_output=True, text=True, timeout=300)
        if "BLOB_UNKNOWN" in r.stderr or "BLOB_UNKNOWN" in r.stdout:
            stats.add("BLOB_UNKNOWN")
            stats.fail(f"{p.repo}:{tag}: BLOB_UNKNOWN: {r.stderr.strip()[-300:]}")
        elif r.returncode != 0:
            stats.fail(f"{p.repo}:{tag}: pull failed (exit {r.returncode}): {r.stderr.strip()[-300:]}")
        elif read_tree(out) != models[(p.i, v)]:
            stats.fail(f"{p.repo}:{tag}: pulled bytes differ from version {v} as pushed")
        else:
            stats.add("live tags pulled byte-identical")
        shutil.rmtree(out, ignore_errors=True)
    log(f"{len(live)} live tags checked")
    # 3. no leak: once compression is idle and the grace period has passed, a collection, then
    # a dry run finds nothing to remove
    wait_idle(cluster, stats, "final collection")
    time.sleep(args.grace + 1)
    first = collect(cluster, stats, "final collection")
    if first is not None and first.get("chain_links_rebased", 0) > 0:
        # Its re-bases onto new parents left the full patches they computed as young garbage
        # (docs/storage.md, "Chains"): the next collection after the grace period takes them.
        log(f"final collection: {first['chain_links_rebased']} chain links re-based first "
            f"(removed {first['blobs_removed']}, young {first['blobs_too_young']}); "
            f"collecting again after the grace period")
        time.sleep(args.grace + 1)
        again = collect(cluster, stats, "final collection, again")
        if again is not None:
            if again.get("chain_links_rebased", 0) > 0:
                stats.fail(f"the second final collection re-based links again: {again}")
            again["blobs_removed"] += first["blobs_removed"]
            first = again
    dry = collect(cluster, stats, "dry run", dry_run=True)
    blobs = cluster.bucket("registry/blobs/")
    if first is not None and dry is not None:
        log(f"final collection: removed {first['blobs_removed']}, kept {first['blobs_marked']}; "
            f"bucket: {len(blobs)} blobs, {sum(s for _, s in blobs)} bytes")
        if first.get("errors"):
            stats.fail(f"final collection errors: {first['errors'][:5]}")
        failed = False
        if dry["blobs_removed"] or dry["blobs_too_young"]:
            stats.fail(f"after the final collection, a dry run still finds garbage: {dry}")
            failed = True
        if dry["blobs_total"] != len(blobs) or dry["blobs_marked"] != len(blobs):
            stats.fail(f"bucket holds {len(blobs)} blobs, the collector counts "
                       f"{dry['blobs_total']} stored, {dry['blobs_marked']} referenced")
            failed = True
        if failed:
            # The young ones (written within the grace period) are the story: name them.
            times = sorted(cluster.bucket("registry/blobs/", modified=True), key=lambda r: r[2])
            for key, size, when in times[-6:]:
                log(f"  newest in the bucket: {key.rsplit('/', 1)[-1][:16]} {size} bytes, {when}")
            explain(cluster, [k.rsplit("/", 1)[-1] for k, _, _ in times[-3:]] + list(dry["removed"]))
    # 4. drain: delete every manifest left, collect: the bucket's blobs/ is empty
    rows = cluster.psql("SELECT r.name, m.digest FROM manifests m JOIN repositories r "
                        "ON r.id = m.repository_id ORDER BY 1, 2")
    for repo, digest in rows:
        st, body = cluster.http("DELETE", f"/v2/{repo}/manifests/{digest}")
        if st not in (202, 404):
            stats.fail(f"drain: DELETE {repo}@{digest}: {st} {body[:200]!r}")
    log(f"drain: {len(rows)} manifests deleted")
    wait_idle(cluster, stats, "drain")
    time.sleep(args.grace + 1)
    drained = collect(cluster, stats, "drain collection")
    left = cluster.bucket("registry/blobs/")
    if drained is not None:
        log(f"drain collection: removed {drained['blobs_removed']}; bucket: {len(left)} blobs")
    if left:
        stats.fail(f"after deleting every manifest and a collection, the bucket still holds "
                   f"{len(left)} blobs ({sum(s for _, s in left)} bytes): {[k for k, _ in left][:5]}")
        log(f"drain collection: {json.dumps(drained)[:600]}")
        explain(cluster, [k.rsplit("/", 1)[-1] for k, _ in left[:3]])
    # uploads/: parts of chunked uploads cut by kills go when their session is idle past
    # --upload-idle-timeout and a replica purges (at start, and hourly)
    parts = cluster.bucket("registry/uploads/")
    log(f"upload parts in the bucket before the idle purge: {len(parts)}")
    rest = args.idle_timeout + 1
    log(f"waiting {rest} s (the upload idle timeout), then restarting every replica (purge at start)")
    time.sleep(rest)
    for k in range(1, len(cluster.replicas) + 1):
        cluster.kill(k)
        if not cluster.restart(k) or not cluster.wait_ready(k):
            stats.fail(f"replica {k} did not come back for the purge")
    parts = cluster.bucket("registry/uploads/")
    sessions = cluster.psql("SELECT count(*) FROM uploads")[0][0]
    if parts or sessions != "0":
        stats.fail(f"after the idle purge: {len(parts)} upload parts in the bucket, {sessions} "
                   f"upload sessions in the database: {[k for k, _ in parts][:5]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--replicas", required=True, help="the replicas' URLs, space separated")
    ap.add_argument("--cluster-dir", required=True)
    ap.add_argument("--pg", required=True)
    ap.add_argument("--blz", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--duration", type=float, default=45)
    ap.add_argument("--repos", type=int, default=3)
    ap.add_argument("--versions", type=int, default=3)
    ap.add_argument("--pullers", type=int, default=2)
    ap.add_argument("--grace", type=float, default=3, help="the replicas' --gc-grace, seconds")
    ap.add_argument("--idle-timeout", type=float, default=10,
                    help="the replicas' --upload-idle-timeout, seconds")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    log(f"seed {args.seed} (rerun: BLZ_CHURN_SEED={args.seed}); {args.duration:.0f} s, "
        f"{args.repos} pushers, {len(args.replicas.split())} replicas")
    cluster = Cluster(args)
    stats = Stats()
    for i in range(args.repos):
        for v in range(args.versions):
            write_model(os.path.join(args.work, "models", f"m{i}", f"v{v}"), i, v)
    master = random.Random(args.seed)
    deadline = time.time() + args.duration
    pushers = [Pusher(cluster, stats, i, master.randrange(2**31), deadline, args.work)
               for i in range(args.repos)]
    others = [Puller(cluster, stats, n, master.randrange(2**31), deadline, args.work, pushers,
                     args.versions) for n in range(args.pullers)]
    others += [Collector(cluster, stats, master.randrange(2**31), deadline),
              Killer(cluster, stats, master.randrange(2**31), deadline, len(cluster.replicas))]
    for t in pushers + others:
        t.start()
    for t in pushers + others:
        t.join()
    # Every replica up again before the checks.
    for k in range(1, len(cluster.replicas) + 1):
        if not cluster.alive(k):
            cluster.restart(k)
        if not cluster.wait_ready(k):
            stats.fail(f"replica {k} is not ready after the churn")
    # How often a kill met a request in flight, as nginx saw it (and retried or answered 502).
    try:
        with open(os.path.join(cluster.dir, "nginx", "error.log"), errors="replace") as f:
            text = f.read()
        stats.add("nginx: connections refused", text.count("connect() failed"))
        stats.add("nginx: upstream closed or reset mid-request",
                  text.count("prematurely closed") + text.count("reset by peer"))
    except OSError:
        pass
    log("churn done: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.counts.items())))
    if all(p.error is None for p in pushers):
        check(cluster, stats, pushers, args, args.work)
    stats.counts.setdefault("BLOB_UNKNOWN", 0)
    log("summary: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.counts.items())))
    if stats.failures:
        log(f"FAILED ({len(stats.failures)} checks), seed {args.seed}:")
        for f in stats.failures:
            print("  " + f, flush=True)
        return 1
    log(f"PASSED, seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
