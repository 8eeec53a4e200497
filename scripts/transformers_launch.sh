#!/usr/bin/env bash
# `transformers serve --continuous-batching` under `pytest-invariance launch` (issue 30): the same
# server run twice, plain (the control: its own kernels) and launched (the reference kernels in its
# process, a census of every op it calls). The invariance suites run against the launched one with
# the plain one as the positive control; the census of the ops called while the suites ran is
# printed (unrouted and declined ones named); then tokens/s of plain and launched (with its census) at batch 1 and 8.
# Uses the venv and tiny model scripts/vllm_cpu.sh makes; skips loudly when they are missing.
#
#   bash scripts/transformers_launch.sh        (make e2e-transformers-launch)
# Env: VLLM_VENV (.venv-vllm), TL_PORT (8744: plain, +1 launched with its census),
#      RECORDS (reports/cpu/records.jsonl), CENSUS (reports/cpu/census-transformers-serve.json),
#      COST (reports/cpu/launch_cost.jsonl), HARNESS_PY, TL_SUITES (the suites' -k expression, default
#      single), TL_LEVELS (concurrencies, 1,2,4), TL_TIMEOUT (read timeout per request, 600 s).
# Bounded for a 2-core CI machine: the reference kernels run in Python on CPU (measured here, under
# load, 3-4x the plain server's time per token), so the sweeps use fewer concurrencies and a
# longer read timeout than the plain step; an expired request is `incomplete`, never a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
PORT=${TL_PORT:-8744}
CENSUS=${CENSUS:-reports/cpu/census-transformers-serve.json}
COST=${COST:-reports/cpu/launch_cost.jsonl}
TAG=transformers_launch
# shellcheck source=scripts/real_target_lib.sh
source scripts/real_target_lib.sh

transformers_ready
[ -x "$LAUNCH" ] || { echo "$TAG: $LAUNCH missing (the harness venv has no pytest-invariance script)" >&2; exit 1; }

t0=$(date +%s)
transformers_serve "$PORT" "$WORK/server-launch-control.log"
transformers_serve $((PORT + 1)) "$WORK/server-launch.log" "$LAUNCH" launch --census "$CENSUS" --
for i in 0 1; do
  if ! wait_healthy "${PIDS[$i]}" $((PORT + i)) 300; then
    echo "$TAG: FAIL: server on port $((PORT + i)) did not become healthy: $(grep -E 'Error' "$WORK"/server-launch*.log | tail -1)" >&2
    exit 1
  fi
done
CONTROL=http://127.0.0.1:$PORT
URL=http://127.0.0.1:$((PORT + 1))
say "plain (control) and launched servers healthy after $(( $(date +%s) - t0 )) s"

RUN=$WORK/run-launch.jsonl
rm -f "$RUN"
t0=$(date +%s)
since=$(date +%s.%N)
timeout 900 "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_single.py suites/e2e/test_needle.py \
  suites/e2e/test_mixed.py suites/e2e/test_prefix.py -k "${TL_SUITES:-single}" \
  --invariance-levels "${TL_LEVELS:-1,2,4}" --invariance-request-timeout "${TL_TIMEOUT:-600}" \
  --invariance-url "$URL" --invariance-url-control "$CONTROL" --invariance-engine openai \
  --invariance-dispatch independent --invariance-implementation transformers-serve \
  --invariance-target-version "$VERSION" --invariance-target-mode invariant \
  --invariance-records "$RUN" >"$WORK/pytest-launch.log" 2>&1
prc=$?
until=$(date +%s.%N)
sed "s/^/  the pytest run above said -> /" <(tail -1 "$WORK/pytest-launch.log")
say "suites: pytest rc $prc in $(( $(date +%s) - t0 )) s"
"$HPY" scripts/e2e_gate.py check "$RUN" --implementation transformers-serve --pytest-rc "$prc" \
  --append-to "$RECORDS" --require model,version --no-need-divergent --need-invariant
gate=$?

# 2. Cost: tokens/s of the plain and the launched server (census on), batch 1 and 8, in one run.
"$HPY" scripts/launch_cost.py --model "$MODEL" --server "plain=$CONTROL" --server "launch+census=$URL" \
  --batches 1,8 --max-tokens 16 --rounds 1 --timeout 900 --out "$COST" || gate=1

# 3. The census: SIGTERM to the launcher (it forwards, waits, merges), then the report of the ops
#    called while the suites ran (--strict: status 1 when an unrouted or declined op is among them).
stop_all
"$LAUNCH" census "$CENSUS" --since "$since" --until "$until" --strict >"$WORK/census-launch.txt"
crc=$?
sed -n '1p;/^unrouted:/p;/^declined:/p' "$WORK/census-launch.txt" | sed "s/^/  census (suites' window) -> /"
"$LAUNCH" census "$CENSUS" >"${CENSUS%.json}.md"
# Reported, not gated: measured here, the window's one unrouted op was aten.randint.low (1 call, no
# tensor input: an RNG draw that greedy decoding never reads), which the census cannot tell apart
# from an op on the probe's path.
[ "$crc" -eq 0 ] || echo "$TAG: CENSUS: ops the reference kernels did not run were called while the suites ran (see $WORK/census-launch.txt)" >&2
say "done in $(( $(date +%s) - START )) s (records: $RECORDS; census: $CENSUS, ${CENSUS%.json}.md; cost: $COST)"
exit "$gate"
