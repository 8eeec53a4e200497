"""The plugin's command-line options and ini keys, apart from its hooks (``plugin.py``), so each file
keeps one job. Imports nothing heavy: argparse types only, no torch, no FastAPI."""

from __future__ import annotations

import pytest

from .engine.argtypes import positive_int, positive_seconds  # argparse only: no torch, no FastAPI
from .oracles.vocabulary import ENGINES, PROFILES

_positive_int = positive_int()


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("invariance", "batch-invariance checks (pytest-invariance)")
    group.addoption("--invariance-url", dest="invariance_url", metavar="URL", default=None,
                    help="base URL of a live engine for the e2e suites (default: start the bundled engine)")
    group.addoption("--invariance-url-control", dest="invariance_url_control", metavar="URL", default=None,
                    help="a target with invariance off, for inverse tests")
    group.addoption("--invariance-url-speculative", dest="invariance_url_speculative", metavar="URL", default=None,
                    help="the --invariance-url engine again with speculative decoding on (the speculative suite)")
    group.addoption("--invariance-url-speculative-control", dest="invariance_url_speculative_control",
                    metavar="URL", default=None,
                    help="the --invariance-url-control engine again with speculative decoding on")
    group.addoption("--invariance-engine", dest="invariance_engine", choices=ENGINES, default=None,
                    help="API flavour of --invariance-url: %(choices)s")
    group.addoption("--invariance-records", dest="invariance_records", metavar="PATH", default=None,
                    help="append every record to this JSONL file (written by the controller only)")
    group.addoption("--invariance-report", dest="invariance_report", metavar="DIR", default=None,
                    help="render matrix.md/.html/.csv/.json into DIR at session end")
    group.addoption("--invariance-trials", dest="invariance_trials", metavar="N", type=_positive_int,
                    default=None, help="trials per check, fresh inputs each (default 3)")
    group.addoption("--invariance-profile", dest="invariance_profile", choices=PROFILES, default=None,
                    help="sweep size: quick (switch points and vLLM/SGLang capture ladders +-1 to 65 rows), "
                    "full (every size to 512, then powers of two +-1 to 8192) or exhaustive (1..limit)")
    group.addoption("--invariance-limit", dest="invariance_limit", metavar="N", type=_positive_int, default=None,
                    help="largest batch swept: caps the profile or extends it by the same rule "
                    "(exhaustive: 1..N, default 512); a suite's own cap for a large shape still applies")
    group.addoption("--invariance-dispatch", dest="invariance_dispatch", choices=("list", "independent"),
                    default=None, help="how e2e sweeps send a batch: list (one request carrying every prompt, "
                    "the default) or independent (one connection per request, staggered arrivals)")
    group.addoption("--invariance-power", dest="invariance_power", action="store_const", const="on", default=None,
                    help="measure this configuration's power over the shipped zoo of planted bugs, the e2e zoo "
                    "too where e2e suites ran, and print the per-class table (ini invariance_power: auto, the "
                    "default, reads the cache and measures the per-op zoo once on a miss; off measures nothing)")
    group.addoption("--invariance-seed", dest="invariance_seed", metavar="N", type=int, default=None,
                    help="base seed of the input generators (default 0)")
    group.addoption("--invariance-expect", dest="invariance_expect", metavar="MATRIX.json", default=None,
                    help="fail the run when a cell that was invariant in MATRIX.json no longer is")
    group.addoption("--invariance-request-timeout", dest="invariance_request_timeout", metavar="S",
                    type=positive_seconds("--invariance-request-timeout"), default=None,
                    help="longest wait for a live engine's next byte (read timeout, default 120 s)")
    group.addoption("--invariance-request-deadline", dest="invariance_request_deadline", metavar="S",
                    type=positive_seconds("--invariance-request-deadline"), default=None,
                    help="wall-clock bound on one request to a live engine, however it trickles "
                    "(default: the read timeout + 10 s + 1 s per token requested)")
    group.addoption("--invariance-api-key", dest="invariance_api_key", metavar="KEY", default=None,
                    help="bearer token sent to --invariance-url and --invariance-url-control")
    group.addoption("--invariance-model", dest="invariance_model", metavar="NAME", default=None,
                    help="model name sent in each request (default: the first of the server's /v1/models)")
    # e2e sweep shape (issue 15): what the sweeps send and compare; defaults depend on the target
    group.addoption("--invariance-probe-tokens", dest="invariance_probe_tokens", metavar="N", type=_positive_int,
                    default=None, help="probe prompt length in tokens for the e2e sweeps (default: 129 for a "
                    "--invariance-url target, the short text probe for the bundled engine)")
    group.addoption("--invariance-neighbour-tokens", dest="invariance_neighbour_tokens", metavar="N,N,...",
                    default=None, help="neighbour prompt lengths in tokens for the needle/mixed/logprobs sweeps")
    group.addoption("--invariance-prefix-lengths", dest="invariance_prefix_lengths", metavar="N,N,...",
                    default=None, help="shared-prefix lengths of the prefix sweep (default: the reported block "
                    "and chunk sizes +-1)")
    group.addoption("--invariance-levels", dest="invariance_levels", metavar="N,N,...", default=None,
                    help="concurrency levels of the single and mixed e2e sweeps (default: powers of two to 16 "
                    "quick, 128 full, plus every capture-ladder edge -1, edge, +1: the target's reported ladder, "
                    "else the vLLM and SGLang defaults)")
    group.addoption("--invariance-replays", dest="invariance_replays", metavar="K", type=_positive_int, default=None,
                    help="replays of the e2e replay check's concurrent workload (default 5; at least 2)")
    group.addoption("--invariance-fuzz-examples", dest="invariance_fuzz_examples", metavar="N", type=_positive_int,
                    default=None, help="workloads the e2e fuzz check generates (default by profile: quick 50, full 200)")
    group.addoption("--invariance-fuzz-time", dest="invariance_fuzz_time", metavar="S",
                    type=positive_seconds("--invariance-fuzz-time"), default=None,
                    help="wall-clock budget of the e2e fuzz search, shrinking apart (default quick 300 s, full 1200 s)")
    group.addoption("--invariance-fuzz-dir", dest="invariance_fuzz_dir", metavar="DIR", default=None,
                    help="where the fuzz check keeps its example database and writes reproducers (default: "
                    "DIR/fuzz of --invariance-report, else ./invariance-fuzz)")
    group.addoption("--invariance-prompts", dest="invariance_prompts", choices=("auto", "ids", "text"),
                    default=None, help="send prompts as token ids or text (auto: text for --invariance-engine "
                    "openai, ids otherwise)")
    group.addoption("--invariance-evidence", dest="invariance_evidence", choices=("auto", "logprobs", "tokens", "text"),
                    default=None, help="what the e2e sweeps compare: token ids and logprob bits, token ids, or "
                    "text (auto: asks the server once whether it returns logprobs and token ids)")
    group.addoption("--invariance-implementation", dest="invariance_implementation", metavar="NAME", default=None,
                    help="name the software behind --invariance-url in records (e.g. transformers-serve), where "
                    "its API flavour (openai) does not")
    group.addoption("--invariance-target-version", dest="invariance_target_version", metavar="V", default=None,
                    help="the target's version for records, where the server reports none")
    group.addoption("--invariance-gpus", dest="invariance_gpus", metavar="I,J,...", default=None,
                    help="GPU indices the xdist workers spread over (worker i takes entry i mod length; "
                    "default: every visible GPU, worker i on GPU i mod count)")
    group.addoption("--invariance-target-mode", dest="invariance_target_mode", choices=("invariant", "default"),
                    default=None, help="the --invariance-url target's mode for records (invariant: it runs under "
                    "pytest-invariance launch); it wins over the server's own report, which is kept as "
                    "reported_mode; the control is default where it reports none")
    for key in ("fuzz_examples", "fuzz_time", "fuzz_dir"):
        parser.addini(f"invariance_{key}", f"default --invariance-{key.replace('_', '-')}", default=None)
    for key in ("probe_tokens", "neighbour_tokens", "prefix_lengths", "levels", "prompts", "evidence", "implementation",
                "target_version", "gpus", "target_mode"):
        parser.addini(f"invariance_{key}", f"default --invariance-{key.replace('_', '-')}", default=None)
    parser.addini("invariance_url", "default --invariance-url", default=None)
    parser.addini("invariance_request_timeout", "default --invariance-request-timeout (seconds)", default=None)
    parser.addini("invariance_request_deadline", "default --invariance-request-deadline (seconds)", default=None)
    parser.addini("invariance_api_key", "default --invariance-api-key", default=None)
    parser.addini("invariance_model", "default --invariance-model", default=None)
    parser.addini("invariance_engine", "default --invariance-engine", default=None)
    parser.addini("invariance_records", "default --invariance-records", default=None)
    parser.addini("invariance_report", "default --invariance-report", default=None)
    parser.addini("invariance_trials", "default --invariance-trials", default=None)
    parser.addini("invariance_profile", "default --invariance-profile", default=None)
    parser.addini("invariance_limit", "default --invariance-limit", default=None)
    parser.addini("invariance_expect", "default --invariance-expect", default=None)
    parser.addini("invariance_dispatch", "default --invariance-dispatch (list or independent)", default=None)
    parser.addini("invariance_seed", "default --invariance-seed (an integer)", default=None)
    parser.addini("invariance_power", "default --invariance-power (auto, on or off)", default=None)
