"""``python -m pytest_invariance.fakes --bug NAME``: one fake served until killed; the URL first."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from . import BUGS, LADDER_STYLES, NEIGHBOUR_TRIGGERS, SAMPLER_TRIGGERS, STALE_AFTER, FakeEngine


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 1,2,4,8, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pytest_invariance.fakes", description=__doc__)
    p.add_argument("--bug", choices=BUGS, default="none")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--report-ladder", choices=LADDER_STYLES, default="vllm")
    p.add_argument("--ladder", type=_sizes, default=None, metavar="1,2,4,...")
    p.add_argument("--neighbour-trigger", choices=NEIGHBOUR_TRIGGERS, default="long-prompt")
    p.add_argument("--replay-rate", type=float, default=0.02)
    p.add_argument("--step-s", type=float, default=0.002)
    p.add_argument("--no-prefix-cache", action="store_true")
    p.add_argument("--token-budget", type=int, default=2048)
    p.add_argument("--batch-threshold", type=int, default=48)
    p.add_argument("--row-from", type=int, default=1)
    p.add_argument("--sampler-trigger", choices=SAMPLER_TRIGGERS, default="top-logprobs")
    p.add_argument("--stale-after", choices=STALE_AFTER, default="finish")
    p.add_argument("--split-kv-tokens", type=int, default=1024)
    a = p.parse_args(argv)
    knobs = {"neighbour_trigger": a.neighbour_trigger, "replay_rate": a.replay_rate, "step_s": a.step_s,
             "prefix_cache": not a.no_prefix_cache, "token_budget": a.token_budget,
             "batch_threshold": a.batch_threshold, "row_from": a.row_from, "sampler_trigger": a.sampler_trigger,
             "stale_after": a.stale_after, "split_kv_tokens": a.split_kv_tokens,
             **({"ladder": a.ladder} if a.ladder else {})}  # fmt: skip
    try:
        fake = FakeEngine(a.bug, report_ladder=a.report_ladder, port=a.port, **knobs).start()
    except (ValueError, OSError) as exc:
        print(f"fake engine: {exc}", file=sys.stderr)
        return 2
    print(fake.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
