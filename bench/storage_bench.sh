#!/usr/bin/env bash
# Issue 27: bytes uploaded and bytes at rest of model version series, each as a fraction of the
# models' own size (the sum of the versions' archive sizes: what full copies cost), with the
# real `blz` CLI against a fresh `blz serve` (SQLite + local files).
#   (a) roberta-lora: the corpus checkpoints 500, 1000, 2000, 2400 of one LoRA run plus a fifth
#       made here: "2800" = 2400 + 0.5 * (2400 - 2000) per F32 value (the run's trajectory
#       extended by half a step; tensors the run did not change stay identical);
#   (b) bf16-steps: a generated BF16 model (8 tensors of 256 x 1024, 4 MiB) and nine small
#       training-like steps: F32 master weights (N(0, 0.02)) updated by N(0, 2e-5) per value and
#       step, cast to BF16 (round to nearest even) for each version;
#   (c) tiny-gpt2: the corpus base and its fine-tune ft-v1;
#   (d) shared tensors across repositories and structures: the corpus llama-tiny-random pushed
#       to bench/llama, then two models built from it, each pushed to a repository of its own
#       from the client store that pushed llama: "llava" (a LLaVA-style model: every llama tensor
#       renamed under "language_model.", plus a new vision tower and projector, 0.33 MB of
#       F32 N(0, 0.02)) and "llama-cls" (a sequence classifier: lm_head dropped, a new
#       score.weight [2, 16]). Their tensors identical to llama's are found by content
#       (docs/storage.md, "Identical tensors are stored once"). The vision tower is pushed
#       first, alone, to bench/vision: llava holds the tensors of two models pushed apart.
# Each series is pushed, in order, into its own repository from its own client store (the
# earlier versions stay there as bases, as for a training job pushing checkpoints). "uploaded"
# is the sum of what `blz push` reports it sent (`bytes_uploaded` of --json: the archive or the
# patch, and the config); "at rest" is GET /v2/_blz/storage's at_rest_bytes of the repository
# (archives in their stored form + configs) once background compression finished.
#
#   bash bench/storage_bench.sh                         (from the repo root)
#
# Environment (defaults in brackets):
#   BLZ     the blz binary                           [build-release/cli/blz, else build-test/cli/blz]
#   CORPUS  the shared corpus                        [../shared/corpus]
#   WORK    scratch directory (removed at exit)      [mktemp -d]
#   KEEP=1  keep WORK (the server's log, the push results)
#   SERIES  the series to run, by repository name  [all: roberta-lora bf16-steps tiny-gpt2
#           llama vision llava llama-cls]
# Needs /usr/bin/python3 with numpy (series a and b). Not part of CI.
# Output: a markdown table on stdout ("at rest": once the series was pushed; "at the end":
# once every series was); progress on stderr; WORK/results.jsonl has the raw figures (one line
# per push, two per series).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
blz_bench_init storage_bench
CORPUS=$(realpath "${CORPUS:-../shared/corpus}")
results=$WORK/results.jsonl
: > "$results"
[ -d "$CORPUS/roberta-lora" ] && [ -d "$CORPUS/tiny-gpt2" ] &&
  [ -d "$CORPUS/llama-tiny-random" ] ||
  { log "no corpus at $CORPUS (set CORPUS)"; exit 77; }
"$PY" -c 'import numpy' 2>/dev/null || { log "$PY has no numpy"; exit 77; }

# ---- inputs ----
# extrapolate OUT A B F: OUT = B + F * (B - A), per F32 tensor of model directories A and B
# (other dtypes, and files other than *.safetensors, copied from B).
extrapolate() {
  "$PY" - "$@" <<'EOF'
import json, os, shutil, struct, sys
import numpy as np
out, a, b, f = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
os.makedirs(out, exist_ok=True)
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
for name in sorted(os.listdir(b)):
    src = os.path.join(b, name)
    if not name.endswith(".safetensors"):
        shutil.copy(src, os.path.join(out, name))
        continue
    ha, da = read(os.path.join(a, name))
    hb, db = read(src)
    data = bytearray(db)
    for key, t in hb.items():
        if key == "__metadata__" or t["dtype"] != "F32" or key not in ha:
            continue
        s, e = t["data_offsets"]
        sa, ea = ha[key]["data_offsets"]
        vb = np.frombuffer(db[s:e], dtype="<f4")
        va = np.frombuffer(da[sa:ea], dtype="<f4")
        if va.shape != vb.shape:
            continue
        data[s:e] = (vb + np.float32(f) * (vb - va)).astype("<f4").tobytes()
    header = open(src, "rb").read()
    n = struct.unpack("<Q", header[:8])[0]
    with open(os.path.join(out, name), "wb") as w:
        w.write(header[:8 + n])
        w.write(bytes(data))
EOF
}

# derived SRC LLAVA CLS VISION: the models of series (d), from the llama directory SRC.
derived() {
  "$PY" - "$@" <<'EOF'
import json, os, struct, sys
import numpy as np
src, llava, cls, vision = sys.argv[1:5]
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
tensors = {k: (t["dtype"], t["shape"], data[t["data_offsets"][0]:t["data_offsets"][1]])
           for k, t in header.items() if k != "__metadata__"}
rng = np.random.default_rng(7)
def new(shape):
    return ("F32", list(shape), rng.normal(0, 0.02, shape).astype("<f4").tobytes())
def write(out, items, arch):
    os.makedirs(out, exist_ok=True)
    h, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k, (dt, shape, b) in sorted(items.items()):
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(h, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as w:
        w.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    config = json.load(open(os.path.join(src, "config.json")))
    config["architectures"] = [arch]
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
tower = {"patch_embed.weight": new((64, 588)), "blocks.0.mlp.weight": new((256, 256))}
items = {"language_model." + k: v for k, v in tensors.items()}
items.update({"vision_tower." + k: v for k, v in tower.items()})
items["multi_modal_projector.linear_1.weight"] = new((16, 256))
write(llava, items, "LlavaForConditionalGeneration")
write(vision, {"vision_model." + k: v for k, v in tower.items()}, "VisionTower")
items = {k: v for k, v in tensors.items() if k != "lm_head.weight"}
items["score.weight"] = new((2, 16))
write(cls, items, "LlamaForSequenceClassification")
EOF
}

# bf16_series OUT STEPS: OUT/step-00 .. step-(STEPS-1) (bench/bf16_series.py).
bf16_series() { "$PY" bench/bf16_series.py "$@"; }

log "making inputs in $WORK"
mkdir -p "$WORK/in"
for c in 500 1000 2000 2400; do ln -s "$CORPUS/roberta-lora/checkpoint-$c" "$WORK/in/roberta-$c"; done
extrapolate "$WORK/in/roberta-2800" "$CORPUS/roberta-lora/checkpoint-2000" \
  "$CORPUS/roberta-lora/checkpoint-2400" 0.5
bf16_series "$WORK/in/bf16" 10
ln -s "$CORPUS/tiny-gpt2/base" "$WORK/in/gpt2-base"
ln -s "$CORPUS/tiny-gpt2/ft-v1" "$WORK/in/gpt2-ft-v1"
ln -s "$CORPUS/llama-tiny-random" "$WORK/in/llama"
derived "$CORPUS/llama-tiny-random" "$WORK/in/llava" "$WORK/in/llama-cls" "$WORK/in/vision"

# ---- the server ----
blz_serve_start "$BLZ" "$WORK/serve.out" "$WORK/serve.err" --data "$WORK/data" \
  --listen 127.0.0.1:0 || exit 1
server_pid=$blz_pid url=$blz_url token=$blz_token
log "blz serve at $url"

storage() {  # [QUERY]: GET /v2/_blz/storage as the admin
  curl -sf -H "Authorization: Bearer $token" "$url/v2/_blz/storage${1:-}"
}
wait_idle() {  # background compression finished
  local pending
  for _ in $(seq 1 2400); do
    kill -0 "$server_pid" 2>/dev/null || { log "blz serve exited: $(tail -5 "$WORK/serve.err")"; exit 1; }
    pending=$(storage | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["pending"])' 2>/dev/null) ||
      pending=""
    [ "$pending" = 0 ] && return 0
    sleep 0.25
  done
  log "the registry did not become idle"; return 1
}

# series NAME DIR...: pushes each DIR as NAME:vN from the client store WORK/client-NAME
# (WORK/client-$STORE when STORE is set: the store of an earlier series).
series() {
  local name=$1 i=0 dir out store=${STORE:-$1}
  shift
  if [ -n "${SERIES:-}" ] && [[ " $SERIES " != *" $name "* ]]; then return 0; fi
  for dir in "$@"; do
    i=$((i + 1))
    out=$(BLZ_TOKEN=$token BLZ_CACHE_DIR=$WORK/client-$store BLZ_CONFIG_DIR=$WORK/config \
      "$BLZ" push --json -q "$dir" "${url#http://}/bench/$name:v$i" |
      "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))')
    echo "{\"series\": \"$name\", \"push\": $out}" >> "$results"
    log "$name v$i: $("$PY" -c 'import json,sys; r=json.load(sys.stdin); print(r["bytes_uploaded"], "of", r["total_bytes"], "as a patch from " + r.get("patch_from_name", "") if r.get("uploaded_as_patch") else "")' <<< "$out")"
  done
  wait_idle
  echo "{\"series\": \"$name\", \"storage\": $(storage "?repository=bench/$name")}" >> "$results"
}

series roberta-lora "$WORK/in/roberta-"{500,1000,2000,2400,2800}
series bf16-steps "$WORK/in/bf16"/step-*
series tiny-gpt2 "$WORK/in/gpt2-base" "$WORK/in/gpt2-ft-v1"
series llama "$WORK/in/llama"
series vision "$WORK/in/vision"
STORE=llama series llava "$WORK/in/llava"
STORE=llama series llama-cls "$WORK/in/llama-cls"
# At the end: a later version may have changed how an earlier repository's versions are stored
# (vision, chained on llava once llava is stored).
wait_idle
for name in roberta-lora bf16-steps tiny-gpt2 llama vision llava llama-cls; do
  if [ -n "${SERIES:-}" ] && [[ " $SERIES " != *" $name "* ]]; then continue; fi
  echo "{\"series\": \"$name\", \"final\": $(storage "?repository=bench/$name")}" >> "$results"
done

# ---- the table ----
"$PY" - "$results" <<'EOF'
import json, sys
pushes, repos, final = {}, {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "push" in r:
        pushes.setdefault(r["series"], []).append(r["push"])
    elif "final" in r:
        final[r["series"]] = r["final"]["repositories"][0]
    else:
        repos[r["series"]] = r["storage"]["repositories"][0]
def mb(n):
    return f"{n / 1e6:.2f} MB"
print("| series | versions | models' size (full copies) | uploaded | at rest | stored forms |"
      " at rest at the end |")
print("|---|---|---|---|---|---|---|")
for name, rows in pushes.items():
    repo = repos[name]
    model = repo["model_bytes"]
    up = sum(p["bytes_uploaded"] for p in rows)
    patches = sum(1 for p in rows if p.get("uploaded_as_patch"))
    rest = repo["at_rest_bytes"]
    forms = ", ".join(f"{k} {v}" for k, v in sorted(repo["forms"].items()))
    end = final.get(name, repo)
    end_forms = ", ".join(f"{k} {v}" for k, v in sorted(end["forms"].items()))
    print(f"| {name} | {len(rows)} | {mb(model)} (1.00) | {mb(up)} ({up / model:.2f}; "
          f"{patches} as patches) | {mb(rest)} ({rest / model:.2f}) | {forms} | "
          f"{mb(end['at_rest_bytes'])} ({end['at_rest_bytes'] / model:.2f}; {end_forms}) |")
EOF
