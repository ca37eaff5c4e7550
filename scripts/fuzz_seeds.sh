# Sourced by scripts/fuzz.sh and scripts/fuzz_replay.sh: the seeds of a fuzz target.
#
#   fuzz_write_seeds BIN TARGET DIR CORPUS_SRC
#
# Writes into DIR (created; emptied first) the target's own crafted seeds (BIN run with
# BLZ_FUZZ_WRITE_SEEDS=DIR, fuzz/fuzz_util.h) plus, for the targets that read them, the real
# files of CORPUS_SRC (../shared/corpus; skipped when absent) cut to their first 64 KiB, which
# the header-only parsers take as they are. Returns non-zero if BIN fails to write its seeds.

# Real files from CORPUS_SRC ($2) for target $1 (printed one per line).
fuzz_corpus_files() {
  [ -d "$2" ] || return 0
  case "$1" in
    safetensors) find "$2" -name '*.safetensors' -type f | sort ;;
    gguf) find "$2" -name '*.gguf' -type f | sort ;;
  esac
}

fuzz_write_seeds() {
  local bin=$1 target=$2 dir=$3 corpus_src=$4 f name
  rm -rf "$dir"
  mkdir -p "$dir"
  BLZ_FUZZ_WRITE_SEEDS="$dir" "$bin" >/dev/null 2>&1 || {
    echo "fuzz: $bin failed to write its seeds" >&2
    return 1
  }
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    name=corpus_$(echo "${f#"$corpus_src"/}" | tr '/' '_')
    head -c 65536 "$f" > "$dir/$name"
  done < <(fuzz_corpus_files "$target" "$corpus_src")
}
