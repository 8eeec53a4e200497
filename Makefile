# Two commands a fresh machine needs: `make demo` and `make test`.
# Each bootstraps .venv on first use. Where the system Python already has torch
# (a GPU box) the venv sees it (--system-site-packages) and keeps it; elsewhere
# the CPU build torch==2.13.0 is installed.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# make test's fuzz budget (suites/e2e/test_fuzz.py): a few workloads; the e2e suites run alone use the profile's
FUZZ_BUDGET ?= --invariance-fuzz-examples 4 --invariance-fuzz-time 30 --invariance-fuzz-dir reports/_scratch/fuzz
REPORT_DIR ?= reports/demo

SGLANG_OUT ?= reports/_scratch/sglang-driver

.PHONY: demo test lint venv clean-venv e2e-vllm e2e-transformers e2e-transformers-launch sglang-driver

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	    echo "venv: system torch found, keeping it"; $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else $(PYTHON) -m venv $(VENV); fi; \
	fi
	@$(PY) -c "import torch" >/dev/null 2>&1 || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

# The second pass runs the shipped suites' Triton reference kernels under the
# Triton interpreter (CPU, tiny shapes): the same kernels the GPU compiles.
test: $(STAMP)
	@$(PY) -m pytest -n 2 --dist loadgroup -q tests suites $(FUZZ_BUDGET) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest ran no tests"; exit 1; fi; \
	TRITON_INTERPRET=1 $(PY) -m pytest -n 2 -q -p no:cacheprovider suites/ops -k "cpu and reference-triton"; rc2=$$?; \
	if [ $$rc2 -eq 5 ]; then echo "make test: no interpreter suite rows ran"; exit 1; fi; \
	exit $$(( rc > rc2 ? rc : rc2 ))

demo: $(STAMP)
	$(PY) -m pytest_invariance.demo --out $(REPORT_DIR)

# vLLM's CPU build as a real e2e target: its own venv (.venv-vllm), a tiny local model, the inverse
# suites and the batch-invariant probe; records appended to reports/cpu/records.jsonl.
e2e-vllm: $(STAMP)
	bash scripts/vllm_cpu.sh

# `transformers serve --continuous-batching` in text mode, on the venv and model e2e-vllm made.
e2e-transformers: $(STAMP)
	bash scripts/transformers_serve.sh

# The same server under `pytest-invariance launch` (reference kernels + op census), plain as control.
e2e-transformers-launch: $(STAMP)
	bash scripts/transformers_launch.sh

# SGLang's own determinism driver (from the sglang wheel on PyPI, fetched to a temp dir, never kept)
# against the bundled engine in both modes; a wheel that cannot be fetched is a loud skip.
sglang-driver: $(STAMP)
	$(PY) scripts/sglang_driver.py --out $(SGLANG_OUT)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean-venv:
	rm -rf $(VENV)
