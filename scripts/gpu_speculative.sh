#!/usr/bin/env bash
# The speculative suite against four live engines: plain and speculative (--speculative ngram:K) in
# invariant mode on DEV_INV, the same pair in default mode on DEV_DEF. Each engine sizes its KV cache
# from the free memory, so on one H200 two Llama-3-8B-sized engines fit, four do not: give each
# pair its own GPU (defaults cuda:0 / cuda:1). DEV_INV=cpu DEV_DEF=cpu PRESET=demo runs it on a CPU.
#   scripts/gpu_speculative.sh WORKDIR      # PRESET (llama3-8b), SPEC (ngram:4), E2E_PROFILE (quick)
set -u
WORK=$1
mkdir -p "$WORK"
P=${PRESET:-llama3-8b}
SPEC=${SPEC:-ngram:4}
PY=${PYTHON:-python3}
healthy() {  # port pid: wait for /health
  for _ in $(seq 1 150); do
    kill -0 "$2" 2>/dev/null || return 1
    "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=2)" \
      2>/dev/null && return 0
    sleep 2
  done
  return 1
}
PIDS=()
start() {  # name port device extra-args...: one engine, started after the previous one is up
  local name=$1 port=$2 dev=$3; shift 3
  "$PY" -m pytest_invariance.engine.server --device "$dev" --preset "$P" --port "$port" "$@" \
    >"$WORK/engine-$name.log" 2>&1 &
  PIDS+=($!)
  healthy "$port" $! || { echo "engine $name did not start:"; tail -3 "$WORK/engine-$name.log"; }
}
start plain-invariant 8001 "${DEV_INV:-cuda:0}" --batch-invariant
start spec-invariant 8003 "${DEV_INV:-cuda:0}" --batch-invariant --speculative "$SPEC"
start plain-default 8002 "${DEV_DEF:-cuda:1}"
start spec-default 8004 "${DEV_DEF:-cuda:1}" --speculative "$SPEC"
"$PY" -m pytest suites/e2e/test_speculative.py -q -p no:cacheprovider -rfE \
  --invariance-profile "${E2E_PROFILE:-quick}" --invariance-engine bundled \
  --invariance-records "$WORK/records.jsonl" \
  --invariance-url http://127.0.0.1:8001 --invariance-url-control http://127.0.0.1:8002 \
  --invariance-url-speculative http://127.0.0.1:8003 --invariance-url-speculative-control http://127.0.0.1:8004
rc=$?
kill "${PIDS[@]}" 2>/dev/null
wait "${PIDS[@]}" 2>/dev/null
exit $rc
