"""scripts/sglang_driver.py without the network: parsing the driver's summary lines, the expectations
per engine mode, extraction from a wheel, and the seeded ``runpy`` launch of an unmodified module.

The driver itself is never in the repository; here a stand-in module of our own plays its part.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sglang_driver.py"
spec = importlib.util.spec_from_file_location("sglang_driver", SCRIPT)
drv = importlib.util.module_from_spec(spec)
sys.modules["sglang_driver"] = drv
spec.loader.exec_module(drv)

PREFIX_OUT = "\n".join(
    f"Prompt {i} with prefix length {n}: total samples: {t}, Unique samples: {u}"
    for i, (n, t, u) in enumerate([(1, 5, 1), (511, 2, 2), (2048, 2, 1), (4097, 0, 0)])
)


def test_single_and_prefix_lines_are_parsed():
    assert drv.parse_single("Trial 1 ...\nTotal samples: 10, Unique samples: 3\n") == {"samples": 10, "unique": 3}
    prompts = drv.parse_prefix(PREFIX_OUT)["prompts"]
    assert [(p["prefix_length"], p["samples"], p["unique"]) for p in prompts] == [
        (1, 5, 1), (511, 2, 2), (2048, 2, 1), (4097, 0, 0)
    ]  # fmt: skip


def test_radix_and_p_vs_d_are_parsed():
    out = drv.parse_radix("Using Prompt: [5, 6, 7]\n...\n✗✗✗ TEST FAILED - Radix cache produces different results! ✗✗✗\n")
    assert out == {"consistent": False, "prompt_tokens": 3, "prompt_ids": [5, 6, 7]}
    text = "Compare sequence 0 in batch...\n✅ Token match\n✅ Logprobs match: [None]\n" \
           "Compare sequence 1 in batch...\n✅ Token match\n❌ Logprobs mismatch\n"  # fmt: skip
    assert drv.parse_p_vs_d(text) == {"sequences": 2, "token_match": 2, "logprob_match": 1}


@pytest.mark.parametrize("mode", ["single", "prefix", "radix_cache", "p_vs_d"])
def test_output_without_the_summary_is_an_error(mode):
    with pytest.raises(drv.DriverError):
        drv.PARSERS[mode]("Traceback (most recent call last):\n")


@pytest.mark.parametrize(
    "engine_mode, unique, met",
    [("invariant", 1, True), ("invariant", 2, False), ("default", 2, True), ("default", 1, False)],
)
def test_single_expectation(engine_mode, unique, met):
    assert drv.expectation(engine_mode, "single", {"samples": 10, "unique": unique})[0] is met


def test_prefix_expectation():
    prefix = drv.parse_prefix(PREFIX_OUT)
    assert drv.expectation("invariant", "prefix", prefix) == (False, "prefix lengths [511] gave > 1 unique samples")
    assert drv.expectation("default", "prefix", prefix)[0] is True
    same = {"prompts": [{**p, "unique": min(p["unique"], 1)} for p in prefix["prompts"]]}
    assert drv.expectation("invariant", "prefix", same)[0] is True
    assert drv.expectation("default", "prefix", same)[0] is False
    lonely = {"prompts": [{"prefix_length": 1, "samples": 1, "unique": 1}]}
    assert drv.expectation("invariant", "prefix", lonely)[0] is False  # nothing was compared


def test_radix_needs_a_proven_hit_in_invariant_mode():
    assert drv.expectation("invariant", "radix_cache", {"consistent": True, "cache_hit": True})[0] is True
    assert drv.expectation("invariant", "radix_cache", {"consistent": True, "cache_hit": False})[0] is False
    assert drv.expectation("default", "radix_cache", {"consistent": False})[0] is True  # reported only


def test_extraction_names_what_the_wheel_lacks(tmp_path):
    wheel = tmp_path / "sglang-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in drv.NEEDED[:2]:
            z.writestr(name, "x")
    with pytest.raises(drv.DriverError, match="lacks sglang/profiler.py"):
        drv.extract_driver(wheel, tmp_path / "out")
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr(drv.NEEDED[2], "y")
        z.writestr("sglang/__init__.py", "raise SystemExit('must not be extracted')")
    digests = drv.extract_driver(wheel, tmp_path / "out")
    assert set(digests) == set(drv.NEEDED)
    assert not (tmp_path / "out" / "sglang" / "__init__.py").exists()


def test_the_module_runs_unmodified_with_a_seeded_random(tmp_path):
    """A stand-in ``sglang.test.test_deterministic`` (namespace package, no __init__) sees the
    arguments and a seeded ``random``, and reads a file beside itself as the real one does."""
    mod = tmp_path / "sglang" / "test"
    mod.mkdir(parents=True)
    (mod / "long_prompt.txt").write_text("beside")
    (mod / "test_deterministic.py").write_text(
        "import os, random, sys\n"
        "print(sys.argv[1:], random.random(), open(os.path.join(os.path.dirname(__file__), 'long_prompt.txt')).read())\n"
    )
    out = [subprocess.run(drv.driver_command(seed, ["--port", "1"]), capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path)}, timeout=60).stdout  # fmt: skip
           for seed in (7, 7, 8)]
    assert out[0] == out[1] != out[2]
    assert out[0].startswith("['--port', '1'] ") and out[0].strip().endswith("beside")
