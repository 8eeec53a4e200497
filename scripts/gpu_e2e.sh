#!/usr/bin/env bash
# End-to-end on the GPU: the bundled engine on CUDA in invariant and default mode, the e2e suites
# against both (invariant as target, default as control; started one after the other, since each
# sizes its KV cache from the free memory); then, after that pair is stopped, the
# cache suite against a pair started with --prefix-cache (the other sweeps need it off, and two
# Llama-3-8B-sized pairs with their KV caches do not fit one GPU at once).
set -u
WORK=$1
P=${PRESET:-demo}
# E2E_ARGS: more pytest flags (e.g. --invariance-levels 1,2,3,4,5,8,9,16,17 to see a capture ladder's
# buckets); E2E_CACHE=0 skips the prefix-cache pair.
PYT=(python3 -m pytest suites/e2e -q -p no:cacheprovider -rfE --invariance-profile "${E2E_PROFILE:-quick}"
     --invariance-engine bundled --invariance-records "$WORK/records.jsonl" ${E2E_ARGS:-})
healthy() {  # port pid: wait for /health (the next engine sizes its KV cache from what is left)
  for _ in $(seq 1 150); do
    kill -0 "$2" 2>/dev/null || return 1
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=2)" \
      2>/dev/null && return 0
    sleep 2
  done
  return 1
}
pair() {  # name select extra-args...: start both modes one after the other, run the suites, stop them
  local name=$1 select=$2; shift 2
  python3 -m pytest_invariance.engine.server --device cuda --preset "$P" --port 8001 --batch-invariant "$@" \
    >"$WORK/engine-$name-invariant.log" 2>&1 &
  local inv=$!
  healthy 8001 $inv || { echo "engine $name-invariant did not start:"; tail -3 "$WORK/engine-$name-invariant.log"; }
  python3 -m pytest_invariance.engine.server --device cuda --preset "$P" --port 8002 "$@" \
    >"$WORK/engine-$name-default.log" 2>&1 &
  local def=$!
  healthy 8002 $def || { echo "engine $name-default did not start:"; tail -3 "$WORK/engine-$name-default.log"; }
  "${PYT[@]}" --invariance-url http://127.0.0.1:8001 --invariance-url-control http://127.0.0.1:8002 -k "$select"
  local rc=$?
  kill $inv $def 2>/dev/null
  wait $inv $def 2>/dev/null
  return $rc
}
pair main "not cache${E2E_K:+ and ($E2E_K)}"
rc=$?
rc2=0
if [ "${E2E_CACHE:-1}" != 0 ]; then
  pair cache "cache" --prefix-cache
  rc2=$?
fi
exit $(( rc > rc2 ? rc : rc2 ))
