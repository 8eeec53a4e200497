"""The summary's words: classes caught over the configured oracles, misses by name and reason,
false alarms counted; the command line's exit status and its one-line errors."""

from __future__ import annotations

from pytest_invariance.cli import main
from pytest_invariance.power import cache
from pytest_invariance.power.config import PowerConfig
from pytest_invariance.power.report import oracle_power, summary_line


def e(name, oracle, caught, layer="op", **kw):
    return {"name": name, "layer": layer, "oracle": oracle, "what": name, "caught": caught, "twin": "invariant",
            "false_alarm": False, "rate": None, "runs": 1, **kw}


ENTRIES = [
    e("split-by-batch", "batch-size", True),
    e("only-at-6", "batch-size", False, reason="size not swept: needs N=6"),
    e("rare-1-in-10", "batch-size", True, rate=1.0),
    e("rare-1-in-10", "run-to-run", False, rate=0.8, reason="detection 0.80 at 3 trials"),
    e("split-by-batch", "run-to-run", False, blind="deterministic"),
    e("padding", "unique-samples", True, layer="e2e"),
]


def test_summary_names_each_miss_with_its_reason_and_counts_false_alarms() -> None:
    assert summary_line(ENTRIES) == ("this configuration catches 3 of 4 planted classes; blind to: only-at-6 "
                                     "(size not swept: needs N=6); 0 false alarms on 4 clean twins")
    only_rerun = summary_line(ENTRIES, ["run-to-run"])  # the e2e classes count whatever the per-op oracles
    assert only_rerun == ("this configuration catches 1 of 2 planted classes; blind to: rare-1-in-10 "
                          "(detection 0.80 at 3 trials); 0 false alarms on 2 clean twins")
    alarmed = [*ENTRIES[:1], e("stream-k", "batch-size", True, false_alarm=True, twin="divergent")]
    assert summary_line(alarmed).endswith("1 false alarm on 2 clean twins (stream-k)")


def test_oracle_power_leaves_classes_out_of_its_reach_aside() -> None:
    p = oracle_power(ENTRIES, "run-to-run")
    assert (p.caught, p.classes, p.probabilistic_miss) == (0, 1, True)
    assert p.text == "run-to-run 0/1 (blind to rare-1-in-10 (detection 0.80 at 3 trials))"
    assert oracle_power(ENTRIES, "chunking") is None


def test_command_reads_the_cache_and_exits_1_on_a_false_alarm(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path))
    cache.store(PowerConfig(trials=2), "ops", ENTRIES[:5], 1.0, "test")
    assert main(["power", "--trials", "2", "--oracles", "batch-size"]) == 0
    out = capsys.readouterr().out
    assert "power: this configuration catches 2 of 3 planted classes; blind to: only-at-6" in out
    assert "[cached " in out
    cache.store(PowerConfig(trials=2), "ops", [e("stream-k", "batch-size", True, false_alarm=True)], 1.0, "t")
    assert main(["power", "--trials", "2"]) == 1


def test_command_bad_values_are_one_line(capsys) -> None:
    assert main(["power", "--oracles", "batch-size,sideways"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown oracle sideways" in err[0]
    assert main(["power", "--trials", "0"]) == 2


def test_e2e_entries_from_the_suites_records() -> None:
    from pytest_invariance.power.e2e import _entries, miss_reason

    recs = [{"oracle": "cache", "verdict": "divergent", "nodeid": "x/test_cache.py::test_cache"},
            {"oracle": "unique-samples", "verdict": "invariant", "nodeid": "x/test_prefix.py::test_prefix"},
            {"oracle": "prefill-decode", "verdict": "divergent", "nodeid": "x/test_pd.py::test_prefill_decode"}]
    got = {(x["oracle"], x["caught"]) for x in _entries("warm-cache", recs, PowerConfig(), "")}
    assert got == {("cache", True), ("unique-samples", False), ("prefill-decode", True)}  # any divergent counts
    missed = _entries("padding", [], PowerConfig(levels=(1, 2, 4, 8)), "")
    assert missed[0]["reason"] == "every level on the capture ladder"
    assert _entries("padding", [], PowerConfig(), "the fake wrote no records")[0]["reason"] == "the fake wrote no records"
    assert "replays" in miss_reason("replay", PowerConfig())
    assert miss_reason("large-batch", PowerConfig(levels=(1, 2, 17))) == "no level of 48 rows or more"
    assert miss_reason("large-batch", PowerConfig()) == ""  # the default single sweep reaches 65
