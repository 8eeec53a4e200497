# Shared by the real-engine e2e scripts (vllm_cpu.sh, transformers_serve.sh, *_launch.sh): their common
# settings, messages, a loud skip, the two servers started with the same flags everywhere, bounded health
# waits and stopping the servers this script started (by pid, nothing else, also on exit).
# Source it from the repository root after setting TAG (and PORT and the script's own settings).
# Env: VLLM_VENV (.venv-vllm), RECORDS (reports/cpu/records.jsonl), HARNESS_PY (.venv/bin/python).
VENV=${VLLM_VENV:-.venv-vllm}
RECORDS=${RECORDS:-reports/cpu/records.jsonl}
HPY=${HARNESS_PY:-.venv/bin/python}
LAUNCH=$(dirname "$HPY")/pytest-invariance
WORK=.vllm-cpu
MODEL=$WORK/tiny-llama
START=$(date +%s)
PIDS=()
say() { echo "${TAG:-e2e}: $*"; }
skip() {
  echo "################################################################################" >&2
  echo "${TAG:-e2e}: SKIP: $*" >&2
  echo "################################################################################" >&2
  exit 0
}
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}
# wait_healthy PID PORT [SECONDS]: 0 once GET /health answers 200; 1 when PID exits or time runs out
wait_healthy() {
  local pid=$1 port=$2 left=${3:-300}
  while [ "$left" -gt 0 ]; do
    curl -s -o /dev/null -m 5 -w "%{http_code}" "http://127.0.0.1:$port/health" 2>/dev/null | grep -q 200 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 2
    left=$((left - 2))
  done
  return 1
}
# vllm_serve PORT LOG SECONDS [prefix ...]: vLLM's OpenAI server on the tiny model (prefix: ENV=VALUE
# words or a wrapping command, both run under env); non-zero when it exits or is not healthy in time.
vllm_serve() {
  local port=$1 log=$2 wait=$3; shift 3
  env VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE=1 "$@" "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL" --served-model-name tiny-llama --host 127.0.0.1 --port "$port" --max-model-len 2048 \
    --enable-prompt-tokens-details >"$log" 2>&1 &
  PIDS+=("$!")
  wait_healthy "$!" "$port" "$wait"
}
# transformers_serve PORT LOG [command prefix ...]: `transformers serve --continuous-batching` on the tiny
# model, in the background (its pid last in PIDS). A small KV cache: with its defaults it was OOM-killed at 6.8 GB.
transformers_serve() {
  local port=$1 log=$2; shift 2
  "$@" "$VENV/bin/transformers" serve --continuous-batching --cb-num-blocks 128 --cb-block-size 32 \
    --cb-max-batch-tokens 512 --host 127.0.0.1 --port "$port" "$MODEL" >"$log" 2>&1 &
  PIDS+=("$!")
}
trap stop_all EXIT
# transformers_ready: the venv and tiny model scripts/vllm_cpu.sh made, accelerate in it (serve needs
# it to load a model); sets VERSION to transformers' version; a loud skip when something is missing.
transformers_ready() {
  [ -x "$HPY" ] || { echo "${TAG:-e2e}: $HPY missing (run make venv first)" >&2; exit 1; }
  [ -x "$VENV/bin/transformers" ] || skip "$VENV/bin/transformers missing (scripts/vllm_cpu.sh makes the venv)"
  [ -f "$MODEL/config.json" ] || skip "$MODEL missing (scripts/vllm_cpu.sh makes it)"
  "$VENV/bin/python" -c "import accelerate" 2>/dev/null || timeout 300 "$VENV/bin/pip" install -q accelerate \
    >"$WORK/install-accelerate.log" 2>&1 || skip "pip install accelerate failed: $(tail -1 "$WORK/install-accelerate.log")"
  VERSION=$("$VENV/bin/python" -c "import transformers; print(transformers.__version__)")
  say "transformers $VERSION"
}
