#!/usr/bin/env bash
# End-to-end on the GPU: the bundled engine on CUDA in invariant and default
# mode, the e2e suites against both (invariant as target, default as control).
set -u
WORK=$1
python3 -m pytest_invariance.engine.server --device cuda --preset "${PRESET:-demo}" --batch-invariant --port 8001 >"$WORK/engine-invariant.log" 2>&1 &
INV=$!
python3 -m pytest_invariance.engine.server --device cuda --preset "${PRESET:-demo}" --port 8002 >"$WORK/engine-default.log" 2>&1 &
DEF=$!
trap 'kill $INV $DEF 2>/dev/null' EXIT
for spec in "8001 $INV invariant" "8002 $DEF default"; do
  set -- $spec
  for _ in $(seq 1 60); do
    kill -0 "$2" 2>/dev/null || { echo "engine ($3) exited:"; tail -5 "$WORK/engine-$3.log"; exit 1; }
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2>/dev/null && break
    sleep 2
  done
done
python3 -m pytest suites/e2e -q -p no:cacheprovider -rfE --invariance-profile "${E2E_PROFILE:-quick}" \
  --invariance-url http://127.0.0.1:8001 --invariance-url-control http://127.0.0.1:8002 \
  --invariance-engine bundled --invariance-records "$WORK/records.jsonl" ${E2E_K:+-k "$E2E_K"}
