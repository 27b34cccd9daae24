#!/usr/bin/env bash
# The long fuzzing run: builds the libFuzzer targets as scripts/fuzz.sh does
# (clang-22, ASan + UBSan + leak detection, runtime-only build-fuzz/; the
# seven targets of fuzz.sh, ONNX included), runs
# each target for LLMC_FUZZ_SECONDS seconds from the committed seeds plus the
# corpus earlier long runs grew (build-fuzz/long/corpus-NAME), LLMC_FUZZ_JOBS
# targets at a time, and reports per target: seconds, executions,
# executions/s, peak RSS, and what it found (crash-/leak-/timeout-/oom- files
# under build-fuzz/long/). Exits 1 if any target found anything or failed.
# A finding becomes a regression test: add its input to test/fuzz/corpus/NAME
# (and fix the bug) so every CI run replays it.
#
# Usage: scripts/fuzz_long.sh                    (600 s per target, 2 at a time)
#        LLMC_FUZZ_SECONDS=3600 LLMC_FUZZ_JOBS=1 scripts/fuzz_long.sh [TARGET...]
# The report is printed and written to build-fuzz/long/report.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECONDS_PER="${LLMC_FUZZ_SECONDS:-600}"
JOBS="${LLMC_FUZZ_JOBS:-2}"
all=(gguf llama2c hf onnx artifact request tokenizer)
targets=("${@:-${all[@]}}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz_long.sh: unknown target '$t' (${all[*]})" >&2; exit 2; }
done
CC=clang-22 CXX=clang++-22 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLMC_BUILD_COMPILER=OFF -DLLMC_BUILD_FUZZERS=ON >/dev/null
cmake --build build-fuzz --target "${targets[@]/#/fuzz_}"
OUT="build-fuzz/long"
mkdir -p "$OUT"

run_one() {
  local t="$1" log="$OUT/$1.log" rc=0
  mkdir -p "$OUT/corpus-$t"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/test/fuzz/fuzz_$t" -max_total_time="$SECONDS_PER" -print_final_stats=1 \
    -rss_limit_mb=2048 -timeout=20 -max_len=262144 -artifact_prefix="$OUT/$t-" \
    "$OUT/corpus-$t" "test/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$OUT/$t.rc"
}

started=$(date +%s)
running=0
for t in "${targets[@]}"; do
  rm -f "$OUT/$t".rc "$OUT/$t"-crash-* "$OUT/$t"-leak-* "$OUT/$t"-timeout-* "$OUT/$t"-oom-*
  echo "[fuzz_long] $t: ${SECONDS_PER} s" >&2
  run_one "$t" &
  running=$((running + 1))
  if ((running >= JOBS)); then wait -n; running=$((running - 1)); fi
done
wait

stat() { sed -n "s/^stat::$2: *//p" "$OUT/$1.log" | tail -1; }
{
  echo "# Long fuzzing run"
  echo
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M') UTC; wall $(( $(date +%s) - started )) s"
  echo "- Commit: $(git rev-parse --short HEAD)$(git status --porcelain --untracked-files=no | grep -q . && echo ' (with uncommitted changes)')"
  echo "- Machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs; $JOBS targets at a time"
  echo "- Build: clang-22 libFuzzer, ASan + UBSan (halt on error), leak detection on"
  echo
  echo "| Target | Seconds | Executions | Executions/s | Peak RSS MiB | Corpus files | Findings | Exit |"
  echo "|---|---:|---:|---:|---:|---:|---|---:|"
  total=0; bad=0
  for t in "${targets[@]}"; do
    execs="$(stat "$t" number_of_executed_units)"; rate="$(stat "$t" average_exec_per_sec)"
    rss="$(stat "$t" peak_rss_mb)"; rc="$(cat "$OUT/$t.rc" 2>/dev/null || echo '?')"
    found="$(cd "$OUT" && ls -1 "$t"-crash-* "$t"-leak-* "$t"-timeout-* "$t"-oom-* 2>/dev/null | paste -sd' ' - || true)"
    files="$(ls -1 "$OUT/corpus-$t" | wc -l)"
    total=$((total + ${execs:-0}))
    [ "$rc" = 0 ] && [ -z "$found" ] || bad=1
    echo "| $t | $SECONDS_PER | ${execs:-?} | ${rate:-?} | ${rss:-?} | $files | ${found:-none} | $rc |"
  done
  echo
  echo "Total executions: $total"
} >"$OUT/report.md" # a group, not a pipe: bad and total stay in this shell
cat "$OUT/report.md"
exit "$bad"
