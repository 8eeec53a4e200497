#!/usr/bin/env bash
# H200 (device tool): localization and the op census at Llama-3-8B shapes (issue 18), and the
# speculative suite and bench (issue 21). Carry .whl (FastAPI, uvicorn) and .whl/hf (transformers,
# without the numpy/pydantic the image has). Full logs and records under $OUT; a table last.
#   bash scripts/gpu_localize.sh [STEP...]   steps: bundled random random-ref greedy greedy-ref bench spec spec-bench
# greedy / greedy-ref: 8 greedy tokens (HF generate) of the probe alone and at batch 1/8/64, stock and
# under enable(): unique completions by token ids and by logits bits, control the planted split-K.
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/localize" "$OUT/spec"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl .whl/hf/*.whl >"$OUT/pip.log" 2>&1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$OUT/pip.log" 2>&1 || { tail -5 "$OUT/pip.log"; exit 1; }
L=(python3 -m pytest_invariance.cli localize)
TABLE="$OUT/table.txt"
step() {  # name limit_s command...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  printf '%-12s rc=%-4s %5ss  %s\n' "$name" "$?" "$(( $(date +%s) - t0 ))" "$(grep -v '^\s*$' "$OUT/$name.log" | tail -1 | cut -c1-110)" >>"$TABLE"
}
[ $# -gt 0 ] || set -- bundled random random-ref greedy greedy-ref bench
for s in "$@"; do
  case $s in
    bundled) step bundled 200 "${L[@]}" bundled:llama3-8b --device cuda --tokens 4 --batch 1,8,64 --out "$OUT/localize";;
    random) step random 240 "${L[@]}" random-llama:llama3-8b --device cuda --dtype bf16 --batch 1,8,64 --tokens 64 --census --out "$OUT/localize";;
    random-ref) step random-ref 240 "${L[@]}" random-llama:llama3-8b --device cuda --dtype bf16 --batch 1,8,64 --tokens 64 --census --under-reference --out "$OUT/localize";;
    greedy) step greedy 240 "${L[@]}" random-llama:llama3-8b --device cuda --dtype bf16 --batch 1,8,64 --tokens 16 --greedy 8 --out "$OUT/localize";;
    greedy-ref) step greedy-ref 300 "${L[@]}" random-llama:llama3-8b --device cuda --dtype bf16 --batch 1,8,64 --tokens 16 --greedy 8 --under-reference --out "$OUT/localize";;
    bench) step bench 240 python3 benchmarks/bench_localize.py --model random-llama:llama3-8b --device cuda --dtype bf16 --tokens 16 --out "$OUT/localize";;
    spec) DEV_INV=cuda:0 DEV_DEF=cuda:0 PRESET=demo PYTHON=python3 step spec 240 bash scripts/gpu_speculative.sh "$OUT/spec";;
    spec-bench) step spec-bench 240 python3 benchmarks/bench_engine.py --model llama3-8b --device cuda --speculative ngram:4 --batches 1,8,64 --repeats 3 --out "$OUT/spec";;
    *) echo "unknown step $s" >>"$TABLE";;
  esac
done
cat "$TABLE"
