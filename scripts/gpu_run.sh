#!/usr/bin/env bash
# One command for the H200 (device tool): install the package without
# dependencies (the GPU image has torch, triton, pytest, pandas, xdist), run
# the named phases, append every record to $OUT/records.jsonl, pack full
# logs into $OUT/logs-TIME-PID.tar.gz and print a short table last.
#   [WORKERS=n] bash scripts/gpu_run.sh [--profile quick|full] PHASE[:SECONDS]...
# PHASE:SECONDS overrides that phase's time limit (e.g. matmul:540 for the full profile).
# FAMILY_SUITES="suites/ops/test_lora.py ..." narrows the families phase to some of its six suites.
# BENCH_FAMILIES="fp8-block-gemm,lora" narrows bench-families (bench_families.py --families).
# Phases: env families families-unit bench-families unit launch-tests matmul fp8 rowops attention attention-decode attention-stock moe allreduce bench-allreduce bench-gemm sweep-decode sweep-large bench-rowops bench-launch bench-attention attention-sweep ladder bench-moe engine engine-eager e2e
set -u
PROFILE=quick
if [ "${1:-}" = "--profile" ]; then PROFILE=$2; shift 2; fi
OUT=${OUT:-$PWD/out}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The engine's server needs FastAPI/uvicorn, absent from the GPU image: carried as wheels in .whl/.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$WORK/install.log" 2>&1 \
  || python3 -m pip install -q --no-deps --no-build-isolation . >>"$WORK/install.log" 2>&1 \
  || { echo "install failed"; tail -20 "$WORK/install.log"; exit 1; }
REC="$WORK/records.jsonl"
PYT=(python3 -m pytest -q -p no:cacheprovider -rfE --invariance-profile="$PROFILE" --invariance-records="$REC")
SUMMARY="$WORK/phases.txt"
# Pytest workers sharing the GPU (WORKERS=1: serial): overlaps one worker's Python
# with another's kernels. Kernel results do not depend on it (time-sliced contexts).
WORKERS=${WORKERS:-3}
XD=()
[ "$WORKERS" -gt 1 ] && XD=(-n "$WORKERS")

progress() {  # log command...: "K of N tests" for a pytest phase stopped at its limit
  # -q prints no percentage until a progress line fills, so count the outcome characters of the
  # progress lines, and take N from a collection (-n dropped: collected in this process, bounded).
  local log=$1; shift
  local args=() skip=0 a
  for a in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    if [ "$a" = "-n" ]; then skip=1; continue; fi
    args+=("$a")
  done
  local ran total
  ran=$(grep -E '^[.FEsxX]+( *\[ *[0-9]+%\])?$' "$log" | sed 's/\[.*//' | tr -cd '.FEsxX' | wc -c)
  total=$(timeout 120 "${args[@]}" --collect-only 2>/dev/null | grep -c '::')
  echo "$ran of $total tests"
}

phase() {  # name limit_s command...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  ( cd "$PWD" && OUT="$WORK" timeout "$limit" "$@" ) >"$WORK/$name.log" 2>&1
  local rc=$?
  # A pytest phase stopped at its limit says how far it got (K of N tests): with the elapsed
  # seconds that bounds the whole phase's cost (the full profile's per-family wall time).
  local done=""
  [ "$rc" = 124 ] && [ "${2:-}" = "-m" ] && [ "${3:-}" = pytest ] && done="stopped at $(progress "$WORK/$name.log" "$@"); "
  printf '%-16s rc=%-4s %5ss  %s%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$done" "$(tail -1 "$WORK/$name.log" | cut -c1-90)" >>"$SUMMARY"
}

for arg in "$@"; do
  p=${arg%%:*}
  LIMIT=""
  [ "$p" != "$arg" ] && LIMIT=${arg#*:}
  case $p in
    env) phase env "${LIMIT:-60}" python3 -c "import torch, triton; p = torch.cuda.get_device_properties(0); print(torch.__version__, triton.__version__, p.name, p.multi_processor_count, torch.version.cuda)";;
    families) phase families "${LIMIT:-400}" "${PYT[@]}" ${XD[@]+"${XD[@]}"} ${FAMILY_SUITES:-suites/ops/test_add_rmsnorm.py suites/ops/test_rmsnorm_fp8_quant.py suites/ops/test_fp8_block.py suites/ops/test_int4.py suites/ops/test_lora.py suites/ops/test_linear_attention.py} -m gpu;;
    families-unit) phase families-unit "${LIMIT:-120}" "${PYT[@]}" tests/reference_kernels/test_families_gpu.py tests/reference_kernels/test_int4_plans.py -m gpu;;
    bench-families) phase bench-families "${LIMIT:-200}" python3 benchmarks/bench_families.py --out "$WORK" ${BENCH_FAMILIES:+--families "$BENCH_FAMILIES"};;
    moe) phase moe "${LIMIT:-100}" "${PYT[@]}" suites/ops/test_moe.py -m gpu;;
    allreduce) phase allreduce "${LIMIT:-400}" "${PYT[@]}" suites/ops/test_allreduce.py -m gpu;;
    rowops) phase rowops "${LIMIT:-150}" "${PYT[@]}" ${XD[@]+"${XD[@]}"} suites/ops/test_rmsnorm.py suites/ops/test_softmax.py -m gpu;;
    matmul) phase matmul "${LIMIT:-200}" "${PYT[@]}" ${XD[@]+"${XD[@]}"} suites/ops/test_matmul.py -m gpu;;
    fp8) phase fp8 "${LIMIT:-200}" "${PYT[@]}" ${XD[@]+"${XD[@]}"} suites/ops/test_fp8.py -m gpu;;
    attention) phase attention "${LIMIT:-240}" "${PYT[@]}" ${XD[@]+"${XD[@]}"} --durations=30 suites/ops/test_attention_prefill.py suites/ops/test_attention_decode.py -m gpu -k "reference or mutant";;
    attention-decode) phase attention-decode "${LIMIT:-200}" "${PYT[@]}" ${XD[@]+"${XD[@]}"} suites/ops/test_attention_decode.py -m gpu -k "reference or mutant";;
    attention-stock) phase attention-stock "${LIMIT:-300}" "${PYT[@]}" ${XD[@]+"${XD[@]}"} --durations=30 suites/ops/test_attention_prefill.py suites/ops/test_attention_decode.py -m gpu -k "torch and not (math and L8192)";;
    launch-tests) phase launch-tests "${LIMIT:-90}" "${PYT[@]}" tests/reference_kernels/test_launch.py tests/reference_kernels/test_attention_fused_merge.py tests/engine/test_decode_graphs.py -m gpu;;
    unit) phase unit "${LIMIT:-120}" "${PYT[@]}" tests -m gpu;;
    bench-moe) phase bench-moe "${LIMIT:-150}" python3 benchmarks/bench_moe.py;;
    bench-allreduce) phase bench-allreduce "${LIMIT:-300}" python3 benchmarks/bench_allreduce.py --out "$WORK";;
    bench-rowops) phase bench-rowops "${LIMIT:-90}" python3 benchmarks/bench_rowops.py --out "$WORK";;
    bench-gemm) phase bench-gemm "${LIMIT:-150}" python3 benchmarks/bench_gemm.py --out "$WORK";;
    sweep-decode) phase sweep-decode "${LIMIT:-120}" python3 benchmarks/bench_gemm.py --sweep-decode;;
    sweep-large) phase sweep-large "${LIMIT:-200}" python3 benchmarks/bench_gemm.py --sweep-large;;
    bench-launch) phase bench-launch "${LIMIT:-60}" python3 benchmarks/bench_launch.py;;
    ladder) phase ladder "${LIMIT:-120}" python3 benchmarks/ladder_classes.py --model llama3-8b --device cuda --out "$WORK";;
    attention-sweep) phase attention-sweep "${LIMIT:-200}" python3 benchmarks/bench_attention.py --sweep;;
    engine-eager) phase engine-eager "${LIMIT:-200}" python3 benchmarks/bench_engine.py --model llama3-8b --device cuda --batches 1,8,64 --cuda-graphs off --out "$WORK";;
    bench-attention) phase bench-attention "${LIMIT:-150}" python3 benchmarks/bench_attention.py --quick;;
    e2e) phase e2e "${LIMIT:-${E2E_LIMIT:-150}}" bash scripts/gpu_e2e.sh "$WORK";;
    engine) phase engine "${LIMIT:-150}" python3 benchmarks/bench_engine.py --model llama3-8b --device cuda --batches 1,8,64 --out "$WORK";;
    *) echo "unknown phase $p" >>"$SUMMARY";;
  esac
done

# Appended, and logs named per invocation: two invocations in one device call keep both.
n_before=$(cat "$OUT/records.jsonl" 2>/dev/null | wc -l)
cat "$WORK"/*.jsonl >>"$OUT/records.jsonl" 2>/dev/null
tar -czf "$OUT/logs-$(date +%H%M%S)-$$.tar.gz" -C "$WORK" . 2>/dev/null
echo "records: $(( $(wc -l <"$OUT/records.jsonl") - n_before )) new lines, $(wc -l <"$OUT/records.jsonl") in $OUT/records.jsonl"
for arg in "$@"; do p=${arg%%:*}; grep -E "passed|failed|error" "$WORK/$p.log" 2>/dev/null | tail -1 | sed "s/^/$p: /"; done
cat "$SUMMARY"
