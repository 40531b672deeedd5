#!/usr/bin/env bash
# Faults tried on purpose (issue 15, docs/reliability.md): every fault below is produced for real
# against the `attn` binary and its outcome checked. Any violation is printed as "FAIL: ..." and
# makes the script exit 1; the last lines are a summary with the numbers measured.
#
#   scripts/faults.sh [--long] [--attn PATH] [--attn-debug PATH] [--keep]
#
#   1. kill -9 of `attn train` at random moments (10 times; --long: 50), half of them while a
#      checkpoint is being written (attn_debug's --debug-slow-save holds each write halfway
#      through its temporary file, and the kill waits for that file to appear). After every
#      kill: at most one temporary file in --out (no debris piles up), the last checkpoint loads
#      (`attn generate` on ckpt.safetensors and model.safetensors), and the next `--resume`
#      prints the very losses of an uninterrupted run with the same seed (every training and
#      evaluation loss printed, to the 4 decimals printed). At the end the resumed run's
#      ckpt.safetensors and model.safetensors are byte for byte the uninterrupted run's, and no
#      temporary file is left.
#      --long also resumes with other --threads and checks the bytes again.
#   2. Two runs on the same --out: the second is refused within seconds naming the first (its PID,
#      host, start time); after kill -9 of the first, the next run takes the lock. --long: the same
#      refusal for `scripts/mpirun.sh 2 attn train` (when attn has MPI), and a 2-rank run whose
#      --out holds rank 0's files only.
#   3. A full disk while saving: a file-size limit (ulimit -f; SIGXFSZ is ignored by attn, so
#      write() fails with EFBIG) and, where `unshare -m` may mount one, a full tmpfs (ENOSPC): exit
#      code 1, the file and the errno text named, the previous checkpoint byte for byte, no
#      temporary file.
#   4. NaN and inf in the loss or a gradient (attn_debug's --debug-nonfinite): the step is
#      refused naming the step and the first offending parameter; --on-nonfinite stop ends the
#      run, skip skips the step; poisoned weights (--debug-nan-at) stop even under skip; every
#      saved tensor is finite.
#   5. Out of memory under an address-space limit (ulimit -v): `attn train` with a huge --n-embd
#      and with a huge --batch-size, Python's attn.zeros and the fused attention workspace: one
#      clean error naming the function and the bytes, exit code 1 (RuntimeError in Python), never
#      a signal; Python goes on working afterwards.
# (Fault 6, every file reader under libFuzzer, is scripts/sanitize.sh's `ctest -L fuzz`.)
#
# The attn binary: --attn PATH, else $ATTN_CLI, else build/attn (scripts/test.sh's build). The
# faults that need injecting (kills inside a write, NaN and inf) run the test-only attn_debug, the
# same tool with the hidden --debug-* flags (tools/attn/debug_faults.cpp; `attn` has none):
# --attn-debug PATH, else $ATTN_DEBUG_CLI, else attn_debug beside the attn binary. The
# Python module is the one beside it (<build>/python). The corpus is ../shared/data/
# tinyshakespeare.txt beside the repository, or a generated text when it is missing. Everything
# is written to a temporary directory, removed at the end unless --keep.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$PWD

long=0
keep=0
attn=${ATTN_CLI:-build/attn}
attn_debug=${ATTN_DEBUG_CLI:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --long) long=1 ;;
    --keep) keep=1 ;;
    --attn) attn="$2"; shift ;;
    --attn=*) attn="${1#--attn=}" ;;
    --attn-debug) attn_debug="$2"; shift ;;
    --attn-debug=*) attn_debug="${1#--attn-debug=}" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "faults.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$attn" ] || { echo "faults.sh: no attn binary at '$attn' (build it, or pass --attn PATH)" >&2; exit 2; }
attn=$(realpath "$attn")
[ -n "$attn_debug" ] || attn_debug=$(dirname "$attn")/attn_debug
[ -x "$attn_debug" ] || { echo "faults.sh: no attn_debug binary at '$attn_debug' (built with the tests; or pass --attn-debug PATH)" >&2; exit 2; }
attn_debug=$(realpath "$attn_debug")
pymod=$(dirname "$attn")/python
python=/usr/bin/python3

work=$(mktemp -d "${TMPDIR:-/tmp}/attn_faults.XXXXXX")
live_pid=""  # a background attn of this script not yet waited for (killed if the script stops)
cleanup() {
  if [ -n "$live_pid" ]; then
    kill -9 "$live_pid" 2>/dev/null
    wait "$live_pid" 2>/dev/null
  fi
  if [ "$keep" = 1 ]; then echo "faults.sh: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
summary=()
note() {
  echo "  $*"
  summary+=("$*")
}

data="$repo/../shared/data/tinyshakespeare.txt"
if [ ! -f "$data" ]; then
  data=$work/corpus.txt
  for i in $(seq 3000); do echo "line $i: the cat sat on the mat, the dog ran to the fog."; done >"$data"
fi

# A small model: a step takes milliseconds, a checkpoint is ~0.4 + 1.3 MB.
model=(--data "$data" --n-layer 2 --n-embd 64 --n-head 4 --block-size 32 --batch-size 8
       --eval-iters 2 --warmup-iters 10 --no-progress --threads 1)

# Every tensor of the safetensors files given is finite; prints the first that is not.
check_finite() {
  "$python" - "$@" <<'PY'
import json, struct, sys
import numpy as np
bad = 0
for path in sys.argv[1:]:
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    for name, e in header.items():
        if e["dtype"] != "F32":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + end], dtype=np.float32)
        if not np.isfinite(a).all():
            print("%s: %s holds %d non-finite values" % (path, name, (~np.isfinite(a)).sum()))
            bad = 1
sys.exit(bad)
PY
}

# The step of a checkpoint (its metadata), or "none".
ckpt_step() {
  "$python" - "$1" <<'PY'
import json, struct, sys
try:
    raw = open(sys.argv[1], "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    print(json.loads(raw[8:8 + n])["__metadata__"]["step"])
except Exception:
    print("none")
PY
}

tmp_files() { find "$1" -maxdepth 1 -name '*.tmp.*' 2>/dev/null | wc -l; }

# "STEP LOSS" for every training step and "eval STEP TRAIN VAL" for every evaluation in a log of
# `attn train --no-progress --log-interval 1` (the progress lines count the steps of that run,
# so they are offset by the step it resumed from).
losses_of() {
  awk '
    /^resuming from step / { start = $4 + 0 }
    /^step [0-9]+\/[0-9]+ loss / { split($2, a, "/"); printf "%d %s\n", start + a[1] - 1, $4 }
    /^step [0-9]+: train loss / { sub(":", "", $2); sub(",", "", $5); printf "eval %d %s %s\n", $2, $5, $8 }
  ' "$1"
}

t_all=$(now)
echo "faults.sh: $( [ $long = 1 ] && echo long || echo short ) form, attn $attn, work $work"

# ==== 1. kill -9 at random moments ==============================================================
echo "== 1. kill -9 of attn train at random moments, during checkpoint writes included"
t0=$(now)
kills=$([ $long = 1 ] && echo 50 || echo 10)
iters=$([ $long = 1 ] && echo 600 || echo 150)
pause_ms=150
run1=(train "${model[@]}" --max-iters "$iters" --eval-interval 5 --lr-decay-iters "$iters"
      --log-interval 1 --seed 1337)
"$attn" "${run1[@]}" --out "$work/ref" >"$work/ref.log" 2>&1 || fail "the uninterrupted run failed: $(tail -2 "$work/ref.log")"
losses_of "$work/ref.log" | sort -u >"$work/ref.losses"
ref_secs=$(since "$t0")

out=$work/killed
in_write=0 before_first=0 finished=0 max_debris=0 seg=0 compared=0 random_kills=0
RANDOM=42
for k in $(seq "$kills"); do
  seg=$((seg + 1))
  resume=()
  [ -f "$out/ckpt.safetensors" ] && resume=(--resume)
  # Odd kills land inside a checkpoint write, even ones at a random moment of a plain run.
  slow=()
  bin=$attn
  [ $((k % 2)) = 1 ] && slow=(--debug-slow-save "$pause_ms") && bin=$attn_debug
  "$bin" "${run1[@]}" --out "$out" "${resume[@]}" "${slow[@]}" >"$work/seg$seg.log" 2>&1 &
  pid=$!
  live_pid=$pid
  if [ $((k % 2)) = 0 ]; then
    # At a random moment: 0 to 1.5 s (the whole run takes ~2 s, start-up included).
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", r / 32767 * 1.5 }')"
    random_kills=$((random_kills + 1))
  else
    # Inside a checkpoint write: once a temporary file exists, at a random point of its pause.
    deadline=$((SECONDS + 30))
    while [ "$(tmp_files "$out")" = 0 ] && kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
      sleep 0.005
    done
    sleep "$(awk -v r=$RANDOM -v p=$pause_ms 'BEGIN { printf "%.3f", r / 32767 * p / 2000 }')"
  fi
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rc=$?
  live_pid=""
  debris=$(tmp_files "$out")
  [ "$debris" -gt "$max_debris" ] && max_debris=$debris
  [ "$debris" -gt 0 ] && in_write=$((in_write + 1))
  [ "$debris" -gt 1 ] && fail "kill $k: $debris temporary files in $out (debris piles up): $(ls "$out")"
  if grep -q "in use by" "$work/seg$seg.log"; then fail "kill $k: the lock of a killed run was stuck: $(cat "$work/seg$seg.log")"; fi
  if [ "$rc" = 0 ]; then
    finished=$((finished + 1))
  elif [ "$rc" != 137 ]; then
    fail "kill $k: attn train exited with $rc, not by SIGKILL: $(tail -2 "$work/seg$seg.log")"
  fi
  # The losses this segment printed are the uninterrupted run's.
  losses_of "$work/seg$seg.log" | sort -u >"$work/seg$seg.losses"
  n=$(wc -l <"$work/seg$seg.losses")
  compared=$((compared + n))
  extra=$(comm -23 "$work/seg$seg.losses" "$work/ref.losses" | head -3 || true)
  [ -n "$extra" ] && fail "kill $k: the run resumed from a killed one printed other losses than the uninterrupted run: $extra"
  # The last checkpoint loads.
  if [ -f "$out/ckpt.safetensors" ]; then
    for f in ckpt.safetensors model.safetensors; do
      if ! "$attn" generate --ckpt "$out/$f" --max-new-tokens 1 --threads 1 >/dev/null 2>"$work/gen.err"; then
        fail "kill $k: the last checkpoint $f does not load: $(cat "$work/gen.err")"
      fi
    done
  else
    before_first=$((before_first + 1))
  fi
  if [ "$rc" = 0 ]; then rm -rf "$out"; fi  # finished before the kill: start over
done
# The last resume runs to the end: the uninterrupted run's bytes.
resume=()
[ -f "$out/ckpt.safetensors" ] && resume=(--resume)
if "$attn" "${run1[@]}" --out "$out" "${resume[@]}" >"$work/final.log" 2>&1; then
  losses_of "$work/final.log" | sort -u >"$work/final.losses"
  compared=$((compared + $(wc -l <"$work/final.losses")))
  extra=$(comm -23 "$work/final.losses" "$work/ref.losses" | head -3 || true)
  [ -n "$extra" ] && fail "the final resumed run printed other losses: $extra"
  for f in ckpt.safetensors model.safetensors; do
    cmp -s "$out/$f" "$work/ref/$f" || fail "after $kills kills and resumes, $f differs from the uninterrupted run's"
  done
  [ "$(tmp_files "$out")" = 0 ] || fail "temporary files left at the end: $(ls "$out")"
else
  fail "the final resumed run failed: $(tail -2 "$work/final.log")"
fi
bitwise_threads=""
if [ $long = 1 ]; then
  # Resumed with other thread counts: are the bytes still the same?
  for th in 2 4; do
    rm -rf "$work/th"
    "$attn" "${run1[@]}" --out "$work/th" --max-iters $((iters / 2)) >/dev/null 2>&1
    "$attn" "${run1[@]}" --out "$work/th" --resume --threads "$th" >/dev/null 2>&1 \
      || fail "resume with --threads $th failed"
    if cmp -s "$work/th/ckpt.safetensors" "$work/ref/ckpt.safetensors"; then
      bitwise_threads+=" 1->$th:same"
    else
      bitwise_threads+=" 1->$th:differs"
    fi
  done
fi
note "1. kill -9: $kills kills ($in_write inside a checkpoint write, $before_first before the first" \
  "checkpoint, $finished after the run had finished; $random_kills at a random moment), $iters steps, at most $max_debris temporary" \
  "file at a time, $compared printed losses compared, final checkpoints bytewise equal to the" \
  "uninterrupted run's${bitwise_threads:+; resumed with other --threads:$bitwise_threads}" \
  "($(since "$t0") s; the uninterrupted run alone $ref_secs s)"

# ==== 2. two runs on one --out ==================================================================
echo "== 2. two attn train runs pointed at the same --out"
t0=$(now)
out=$work/locked
"$attn" train "${model[@]}" --out "$out" --max-iters 1000000 --eval-interval 1000000 \
  --lr-decay-iters 1000000 >"$work/first.log" 2>&1 &
first=$!
live_pid=$first
deadline=$((SECONDS + 30))
until grep -q "\"pid\":${first}[,}]" "$out/train.lock" 2>/dev/null || [ $SECONDS -ge $deadline ]; do sleep 0.02; done
grep -q "\"pid\":${first}[,}]" "$out/train.lock" 2>/dev/null || fail "the first run did not record itself in $out/train.lock"
t1=$(now)
"$attn" train "${model[@]}" --out "$out" --max-iters 10 >"$work/second.log" 2>&1
rc=$?
refuse_s=$(since "$t1")
msg=$(cat "$work/second.log")
[ "$rc" = 1 ] || fail "the second run exited with $rc, not 1: $msg"
case "$msg" in
  *"is in use by PID $first on host $(hostname), started "*" UTC (attn train); lock file '$out/train.lock'"*) ;;
  *) fail "the second run's message does not name the first (PID $first, host, start time): $msg" ;;
esac
[ "$(awk -v s="$refuse_s" 'BEGIN { print (s < 10) }')" = 1 ] || fail "the refusal took $refuse_s s"
mpi_note=""
if [ $long = 1 ] && command -v mpirun >/dev/null 2>&1; then
  ATTN_MPIRUN_TIMEOUT=60 scripts/mpirun.sh 2 "$attn" train "${model[@]}" --out "$out" --max-iters 10 \
    >"$work/mpi_second.log" 2>&1
  rc=$?
  if grep -q "in use by PID $first on host" "$work/mpi_second.log"; then
    mpi_note="; under mpirun (2 ranks) refused too (exit $rc)"
    [ "$rc" != 0 ] || fail "the mpirun run was refused but exited with 0"
  elif grep -qi "without MPI\|world of one" "$work/mpi_second.log"; then
    mpi_note="; mpirun: attn has no MPI, skipped"
  else
    fail "the second run under mpirun was not refused naming PID $first: $(tail -5 "$work/mpi_second.log")"
  fi
  # Only rank 0 writes.
  ATTN_MPIRUN_TIMEOUT=60 scripts/mpirun.sh 2 "$attn" train "${model[@]}" --out "$work/mpi_out" \
    --max-iters 10 --eval-interval 5 --batch-size 4 >"$work/mpi_run.log" 2>&1 \
    || fail "a 2-rank run failed: $(tail -3 "$work/mpi_run.log")"
  files=$(ls "$work/mpi_out" | tr '\n' ' ')
  [ "$files" = "ckpt.safetensors loss.png model.safetensors train.lock " ] \
    || fail "a 2-rank run left other files than rank 0's: $files"
  mpi_note+="; a 2-rank run wrote rank 0's 4 files only"
fi
kill -9 "$first"
wait "$first" 2>/dev/null
live_pid=""
t1=$(now)
"$attn" train "${model[@]}" --out "$out" --max-iters 5 --eval-interval 5 --lr-decay-iters 20 \
  >"$work/third.log" 2>&1 || fail "after kill -9 of the first run, the lock was stuck: $(tail -2 "$work/third.log")"
note "2. lock: the second run refused in $refuse_s s, naming PID $first, host $(hostname) and its" \
  "start time; after kill -9 of the first a new run took the lock (ran in $(since "$t1") s)$mpi_note" \
  "($(since "$t0") s)"

# ==== 3. a full disk while saving ===============================================================
echo "== 3. a full disk while saving"
t0=$(now)
out=$work/full
"$attn" train "${model[@]}" --out "$out" --max-iters 5 --eval-interval 5 --lr-decay-iters 20 \
  >/dev/null 2>&1 || fail "training for the full-disk test failed"
sums() { (cd "$1" && sha256sum model.safetensors ckpt.safetensors loss.png); }
before=$(sums "$out")
(ulimit -f 64; exec "$attn" train "${model[@]}" --out "$out" --max-iters 10 --eval-interval 5 \
  --lr-decay-iters 20 --resume) >"$work/fsize.log" 2>&1
rc=$?
fsize_msg=$(grep "attn: error" "$work/fsize.log")
[ "$rc" = 1 ] || fail "under ulimit -f the run exited with $rc (153 = killed by SIGXFSZ), not 1: $(tail -2 "$work/fsize.log")"
[ "$fsize_msg" = "attn: error: [write_file_atomic] cannot write '$out/model.safetensors': write failed: File too large" ] \
  || fail "under ulimit -f: $fsize_msg"
[ "$(sums "$out")" = "$before" ] || fail "under ulimit -f the previous checkpoint changed"
[ "$(tmp_files "$out")" = 0 ] || fail "under ulimit -f a temporary file was left: $(ls "$out")"
enospc_note="a full tmpfs: skipped (unshare -m cannot mount here)"
unshare_cmd=()
if unshare -m true 2>/dev/null; then unshare_cmd=(unshare -m); elif unshare -rm true 2>/dev/null; then unshare_cmd=(unshare -rm); fi
if [ ${#unshare_cmd[@]} -gt 0 ]; then
  mkdir -p "$work/mnt"
  # In a private mount namespace: a 4 MiB tmpfs, one checkpoint, the rest filled, then a resume.
  "${unshare_cmd[@]}" bash -c '
    set -u
    attn=$1 mnt=$2; shift 2
    mount -t tmpfs -o size=4m tmpfs "$mnt" || exit 90
    "$attn" train "$@" --out "$mnt/run" --max-iters 5 --eval-interval 5 --lr-decay-iters 20 >/dev/null 2>&1 || exit 91
    (cd "$mnt/run" && sha256sum model.safetensors ckpt.safetensors loss.png) >"$mnt/../before.sum"
    dd if=/dev/zero of="$mnt/fill" bs=4k >/dev/null 2>&1
    "$attn" train "$@" --out "$mnt/run" --max-iters 10 --eval-interval 5 --lr-decay-iters 20 --resume >"$mnt/../enospc.log" 2>&1
    echo "rc=$?" >>"$mnt/../enospc.log"
    (cd "$mnt/run" && sha256sum model.safetensors ckpt.safetensors loss.png) >"$mnt/../after.sum"
    ls "$mnt/run" >"$mnt/../enospc.ls"
    df -k "$mnt" | tail -1 >"$mnt/../enospc.df"
  ' _ "$attn" "$work/mnt" "${model[@]}"
  rc=$?
  if [ "$rc" = 90 ]; then
    enospc_note="a full tmpfs: skipped (mount not permitted)"
  else
    enospc_msg=$(grep "attn: error" "$work/enospc.log")
    grep -q "^rc=1$" "$work/enospc.log" || fail "on a full tmpfs the run did not exit with 1: $(cat "$work/enospc.log")"
    [ "$enospc_msg" = "attn: error: [write_file_atomic] cannot write '$work/mnt/run/model.safetensors': write failed: No space left on device" ] \
      || fail "on a full tmpfs: $enospc_msg"
    cmp -s "$work/before.sum" "$work/after.sum" || fail "on a full tmpfs the previous checkpoint changed"
    grep -q '\.tmp\.' "$work/enospc.ls" && fail "on a full tmpfs a temporary file was left: $(cat "$work/enospc.ls")"
    enospc_note="a full 4 MiB tmpfs ($(awk '{print $4}' "$work/enospc.df") KiB free): \"$enospc_msg\""
  fi
fi
note "3. full disk: ulimit -f 64 KiB: exit 1, \"$fsize_msg\"; $enospc_note; the previous checkpoint" \
  "byte for byte and no temporary file in each case ($(since "$t0") s)"

# ==== 4. NaN and inf ============================================================================
echo "== 4. NaN and inf in the loss and the gradients"
t0=$(now)
nf=(train "${model[@]}" --max-iters 20 --eval-interval 5 --lr-decay-iters 20)
"$attn_debug" "${nf[@]}" --out "$work/nf_grad" --debug-nonfinite grad-inf:12:h.1.mlp.c_fc.weight >"$work/nf1.log" 2>&1
rc=$?
grad_msg=$(grep "attn: error" "$work/nf1.log")
[ "$rc" = 1 ] || fail "a non-finite gradient did not stop the run (exit $rc)"
case "$grad_msg" in
  "attn: error: [train] step 12: the gradient of 'h.1.mlp.c_fc.weight' (1 of 16384 values, the first inf at [0, 0]) is not finite"*"stopping without saving"*) ;;
  *) fail "non-finite gradient: $grad_msg" ;;
esac
[ "$(ckpt_step "$work/nf_grad/ckpt.safetensors")" = 10 ] || fail "after a stop at step 12 the checkpoint is not step 10's"
"$attn_debug" "${nf[@]}" --out "$work/nf_loss" --debug-nonfinite loss-nan:12 >"$work/nf2.log" 2>&1
rc=$?
loss_msg=$(grep "attn: error" "$work/nf2.log")
[ "$rc" = 1 ] || fail "a NaN loss did not stop the run (exit $rc)"
case "$loss_msg" in
  "attn: error: [train] step 12: loss is nan; stopping without saving"*"first offending parameter: the gradient of 'wte.weight'"*) ;;
  *) fail "NaN loss: $loss_msg" ;;
esac
"$attn_debug" "${nf[@]}" --out "$work/nf_skip" --on-nonfinite skip --debug-nonfinite loss-inf:12 >"$work/nf3.log" 2>&1 \
  || fail "--on-nonfinite skip did not finish: $(tail -2 "$work/nf3.log")"
skip_msg=$(grep "^step 12 skipped" "$work/nf3.log")
[ -n "$skip_msg" ] || fail "--on-nonfinite skip printed no skip line"
grep -q "^skipped 1 step whose loss or gradients were not finite: 12$" "$work/nf3.log" || fail "no summary of the skipped step"
"$attn_debug" "${nf[@]}" --out "$work/nf_poison" --on-nonfinite skip --debug-nan-at 12 >"$work/nf4.log" 2>&1
rc=$?
grep -q "skipping the step cannot help" "$work/nf4.log" && [ "$rc" = 1 ] \
  || fail "poisoned weights under skip did not stop: $(tail -1 "$work/nf4.log")"
finite_out=$(check_finite "$work"/nf_*/ckpt.safetensors "$work"/nf_*/model.safetensors) \
  || fail "a saved checkpoint holds non-finite values: $finite_out"
nsaved=$(ls "$work"/nf_*/*.safetensors | wc -l)
note "4. non-finite: \"${grad_msg#attn: error: }\"; \"${loss_msg#attn: error: }\"; skip: \"$skip_msg\";" \
  "poisoned weights stop under skip; $nsaved saved files checked, every tensor finite ($(since "$t0") s)"

# ==== 5. out of memory ==========================================================================
echo "== 5. out of memory under ulimit -v"
t0=$(now)
oom_notes=()
limit_kib=2000000
for args in "--n-embd 16384 --n-head 1 --n-layer 1" "--batch-size 16384 --block-size 1024"; do
  # shellcheck disable=SC2086
  (ulimit -v $limit_kib; exec "$attn" train --data "$data" --out "$work/oom" --max-iters 2 \
    --eval-iters 1 --threads 1 --no-progress $args) >"$work/oom.out" 2>"$work/oom.log"
  rc=$?
  lines=$(wc -l <"$work/oom.log")
  msg=$(grep "attn: error" "$work/oom.log")
  [ "$rc" = 1 ] || fail "attn train $args under ulimit -v exited with $rc (a signal is >= 128)"
  [ "$lines" = 1 ] || fail "attn train $args under ulimit -v wrote $lines lines on stderr, not one"
  case "$msg" in
    "attn: error: ["*"] cannot allocate "*" bytes) for a ("*) ;;
    *) fail "attn train $args under ulimit -v: $(cat "$work/oom.log")" ;;
  esac
  oom_notes+=("$args: \"${msg#attn: error: }\"")
done
py_out=$( (ulimit -v 1500000; PYTHONPATH="$pymod" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  exec "$python" - <<'PY'
import attn
for what, make in [("zeros", lambda: attn.zeros(2 ** 31)),
                   ("attention", lambda: attn.nn.functional.scaled_dot_product_attention(
                        *[attn.ones(1, 1, 1, 2 ** 24) for _ in range(3)]))]:
    try:
        make()
        print("%s: no error" % what)
    except RuntimeError as e:
        print("%s: %s: %s" % (what, type(e).__name__, e))
x = attn.ones(500, 500)
print("after: %g" % (x @ x).sum().item())
PY
) 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "Python under ulimit -v exited with $rc: $py_out"
grep -q "^zeros: AllocationError: \[zeros\] cannot allocate 8.6 GB (8589934592 bytes)" <<<"$py_out" \
  || fail "Python attn.zeros under ulimit -v: $py_out"
grep -q "^attention: AllocationError: \[scaled_dot_product_attention\] cannot allocate .* for the fused attention kernel's per-thread workspace: out of memory" <<<"$py_out" \
  || fail "Python attention workspace under ulimit -v: $py_out"
grep -q "^after: 1.25e+08$" <<<"$py_out" || fail "Python did not go on working: $py_out"
note "5. out of memory (ulimit -v): ${oom_notes[0]}; ${oom_notes[1]}; Python:" \
  "$(echo "$py_out" | sed -n 1p); $(echo "$py_out" | sed -n 2p); then $(echo "$py_out" | sed -n 3p)" \
  "($(since "$t0") s)"

# ==== summary ===================================================================================
echo
echo "faults.sh summary ($( [ $long = 1 ] && echo long || echo short ) form, $(since "$t_all") s):"
for s in "${summary[@]}"; do echo "  $s"; done
if [ "$failures" -gt 0 ]; then
  echo "faults.sh: $failures violation(s)"
  exit 1
fi
echo "faults.sh: every fault handled as documented"
