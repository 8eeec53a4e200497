#!/usr/bin/env bash
# vLLM CPU with n-gram speculation vs plain (issue 21): the speculative suite against two live vLLM
# servers on the venv and model scripts/vllm_cpu.sh made. vLLM has no invariant mode on CPU, so the
# same pair is both the target and the control; the records say what vLLM shows (acceptance from
# its /metrics). A finding, not a gate: the script fails only when a server does not start.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
WORK=.vllm-cpu
MODEL=$WORK/tiny-llama
RECORDS=${RECORDS:-reports/cpu/records.jsonl}
HPY=${HARNESS_PY:-.venv/bin/python}
TAG=vllm_speculative
# shellcheck source=scripts/real_target_lib.sh
source scripts/real_target_lib.sh
trap stop_all EXIT
[ -x "$VENV/bin/python" ] && [ -f "$MODEL/config.json" ] || skip "run scripts/vllm_cpu.sh first (venv and model)"
SPEC='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
start() {  # start PORT LOG [extra args]
  local port=$1 log=$2; shift 2
  env VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE=1 "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL" --served-model-name tiny-llama --host 127.0.0.1 --port "$port" --max-model-len 2048 "$@" >"$log" 2>&1 &
  PIDS+=("$!")
  wait_healthy "$!" "$port" 300 || { echo "$TAG: FAIL: server on $port did not start: $(grep -E 'Error' "$log" | tail -1)" >&2; exit 1; }
}
start 8751 "$WORK/server-plain.log"
start 8752 "$WORK/server-ngram.log" --speculative-config "$SPEC"
say "plain and ngram servers healthy"
"$HPY" -m pytest --pyargs pytest_invariance.suites.e2e.test_speculative -q -p no:cacheprovider -p no:xdist -rA \
  --invariance-engine vllm --invariance-url http://127.0.0.1:8751 --invariance-url-speculative http://127.0.0.1:8752 \
  --invariance-url-control http://127.0.0.1:8751 --invariance-url-speculative-control http://127.0.0.1:8752 \
  --invariance-records "$RECORDS" 2>&1 | sed 's/^\([0-9]* failed\)/  the run said -> \1/'
say "done"
