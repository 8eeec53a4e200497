"""``pytest-invariance localize MODEL``: localize a model's divergence, print the culprit table,
append the records (and render the matrix with ``--report``).

Every user error is one line and exit status 2; a divergent verdict exits 1; the records of a run
are written whatever its verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="a local Hugging Face model directory, random-llama:PRESET (tiny, llama3-8b), or the bundled engine's model: bundled[-invariant][:demo|llama3-8b] (its own dtype, --dtype ignored)")
    p.add_argument("--batch", default="1,8,64", help="batch sizes, comma separated (default 1,8,64)")
    p.add_argument("--positions", default="ends", help="probe positions: ends (0 and N-1), all ({0,1,mid,N-2,N-1}) or a list")
    p.add_argument("--tokens", type=int, default=16, help="tokens per row (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", help="bf16, fp16 or fp32 (default fp32)")
    p.add_argument("--under-reference", action="store_true", help="run under reference_kernels.enable()")
    p.add_argument("--no-control", action="store_true", help="skip the planted split-K control")
    p.add_argument("--plant", metavar="PATH[:KIND]", help="swap module PATH for a mutant first (splitk-matmul or rmsnorm-split): a demo that localization names it")
    p.add_argument("--hash-only", action="store_true",
                   help="keep a digest per op instead of the probe's slices (least memory; no ULP distances)")
    p.add_argument("--census", action="store_true", help="also run the op census (one record per distinct op)")
    p.add_argument("--greedy", type=int, default=0, metavar="N",
                   help="instead of localizing: N greedy tokens of the probe alone and in every batch (Hugging Face "
                        "generate); unique completions by token ids and by logits bits, control: the planted split-K")  # fmt: skip
    p.add_argument("--out", default="reports/localize", metavar="DIR", help="records.jsonl is appended here")
    p.add_argument("--report", action="store_true", help="render the matrix from DIR/records.jsonl into DIR")


class CommandError(ValueError):
    """A bad argument or an unusable model (one line)."""


def _ints(text: str, what: str) -> list[int]:
    try:
        out = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise CommandError(f"{what} {text!r}: expected comma-separated integers") from None
    if not out or min(out) < 1:
        raise CommandError(f"{what} {text!r}: expected positive integers")
    return out


def _positions(text: str) -> Any:
    return text if text in ("ends", "all") else [int(s) for s in text.split(",")] if text.replace(",", "").isdigit() else None


def _record(checked: Any, name: str, run_id: str, model_spec: str) -> dict:
    from pytest_invariance import hardware
    from pytest_invariance.oracles.verdict import decide
    from pytest_invariance.records import make_record

    ctl = checked.control
    control = None if ctl is None else {"name": ctl.name, "diverged": ctl.diverged, "evidence": checked.control_evidence(),
                                        **({"error": ctl.error} if ctl.error else {})}  # fmt: skip
    verdict = decide(checked.diverged, None if ctl is None else ctl.diverged,
                     error=checked.error is not None or bool(ctl and ctl.error))  # fmt: skip
    return make_record(
        run_id=run_id, fingerprint=hardware.fingerprint(), family="engine", implementation=f"model:{name}",
        oracle="localize", verdict=verdict, nodeid=f"cli::localize::{name}", contract="bitwise",
        evidence=checked.evidence, control=control, trials=1,
        extra={"summary": checked.summary, "model": model_spec, "error": checked.error}, **checked.subject,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """The command's body; raises :class:`CommandError` for one-line user errors."""
    from .models import ModelError, load, token_rows

    sizes = _ints(args.batch, "--batch")
    positions = _positions(args.positions)
    if positions is None:
        raise CommandError(f"--positions {args.positions!r}: expected ends, all or comma-separated integers")
    if args.tokens < 1:
        raise CommandError(f"--tokens {args.tokens}: expected a positive integer")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {args.out}: exists and is not a directory")
    try:
        loaded = load(args.model, device=args.device, dtype=args.dtype, seed=args.seed)
    except ModelError as e:
        raise CommandError(str(e)) from None
    from pytest_invariance.recordio import append_records
    from pytest_invariance.records import new_run_id
    from pytest_invariance.reference_kernels import enable

    from .check import run_check
    from .probe import KEEP_NUMEL

    if args.plant:
        from .plant import plant

        path, _, kind = args.plant.partition(":")
        try:
            loaded.model = plant(loaded.model, path, kind or "splitk-matmul")
        except ValueError as e:
            raise CommandError(f"--plant {args.plant}: {e}") from None
        loaded.name += f"+{kind or 'splitk-matmul'}@{path}"

    ids = token_rows(loaded.vocab, args.tokens, max(sizes), args.seed, loaded.device)
    run_id = new_run_id()
    mode = enable() if args.under_reference else contextlib.nullcontext()
    if args.greedy:
        with mode:
            return _greedy(args, loaded, ids, sizes, positions, run_id, out)
    t0 = time.perf_counter()
    with mode:
        checked = run_check(loaded.model, ids[0], ids[1:], batch_sizes=sizes, positions=positions,
                            call=loaded.call, control=not args.no_control, before_run=loaded.before_run,
                            keep_numel=0 if args.hash_only else KEEP_NUMEL)  # fmt: skip
        records = [_record(checked, loaded.name, run_id, args.model)]
        took = time.perf_counter() - t0
        census_text = ""
        if args.census:
            from .census import census, census_records

            t1 = time.perf_counter()
            result = census(loaded.model, ids[: max(sizes)], call=loaded.call, before_run=loaded.before_run)
            records += census_records(result, run_id=run_id, model=loaded.name)
            census_text = result.table() + f"\ncensus: {len(result.ops)} distinct ops in {time.perf_counter() - t1:.1f} s"
    print(checked.summary)
    ctl = checked.control
    if ctl is not None:
        print(f"control {ctl.name}: {'named it' if ctl.diverged else 'did NOT name it' if ctl.diverged is False else ctl.error}")
    print(f"verdict: {records[0]['verdict']} ({took:.1f} s, {args.device}, {str(loaded.dtype).removeprefix('torch.')}"
          f"{', under reference_kernels.enable()' if args.under_reference else ''})")  # fmt: skip
    if census_text:
        print(census_text)
    out.mkdir(parents=True, exist_ok=True)
    append_records(out / "records.jsonl", records)
    print(f"records: {out / 'records.jsonl'} (+{len(records)})")
    if args.report:
        from pytest_invariance.matrix import render_matrix
        from pytest_invariance.recordio import read_records

        every, _ = read_records([out / "records.jsonl"])
        for path in render_matrix(every, out).values():
            print(path)
    return EXIT_FOUND if records[0]["verdict"] in ("divergent", "incomplete") else EXIT_OK


def _greedy(args: argparse.Namespace, loaded: Any, ids: Any, sizes: list[int], positions: Any, run_id: str,
            out: Path) -> int:  # fmt: skip
    """``--greedy N``: unique greedy completions of the probe, and of the planted control, as one record."""
    from pytest_invariance import hardware
    from pytest_invariance.oracles.verdict import decide
    from pytest_invariance.oracles.vocabulary import quantization_of
    from pytest_invariance.recordio import append_records
    from pytest_invariance.records import make_record

    from .greedy import greedy_completions
    from .plant import first_linear, plant

    if args.greedy < 1:
        raise CommandError(f"--greedy {args.greedy}: expected a positive integer")
    if not hasattr(loaded.model, "generate"):
        raise CommandError(f"--greedy: {args.model} has no generate (a Hugging Face model or random-llama:PRESET)")
    kw = {"batch_sizes": sizes, "positions": positions, "new_tokens": args.greedy}
    res = greedy_completions(loaded.model, ids[0], ids[1:], **kw)
    site = None if args.no_control else first_linear(loaded.model)
    ctl = greedy_completions(plant(loaded.model, site), ids[0], ids[1:], **kw) if site else None
    dt = str(loaded.dtype).removeprefix("torch.")
    control = None if ctl is None else {"name": f"planted splitk-matmul at {site}", "diverged": ctl.diverged,
                                        "evidence": {k: v for k, v in ctl.evidence().items() if k != "completions"}}  # fmt: skip
    rec = make_record(
        run_id=run_id, fingerprint=hardware.fingerprint(), family="engine", implementation=f"model:{loaded.name}",
        oracle="unique-samples", verdict=decide(res.diverged, None if ctl is None else ctl.diverged),
        nodeid=f"cli::localize-greedy::{loaded.name}", contract="bitwise", evidence=res.evidence(), control=control,
        trials=1, dtype=dt, quantization=quantization_of(loaded.dtype),
        mode="invariant" if args.under_reference else "default",
        shape={"probe": list(ids[0].shape), "batch_sizes": sorted(set(sizes)), "new_tokens": args.greedy},
        extra={"summary": res.describe(), "model": args.model},
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    append_records(out / "records.jsonl", [rec])
    print(f"records: {out / 'records.jsonl'} (+1)")
    if ctl is not None:
        print(f"control planted splitk-matmul at {site}: {ctl.describe()}")
    print(res.describe())  # last: the line a log's tail shows (scripts/gpu_localize.sh)
    print(f"verdict: {rec['verdict']} ({res.seconds:.1f} s, {args.device}, {dt}"
          f"{', under reference_kernels.enable()' if args.under_reference else ''})")  # fmt: skip
    return EXIT_FOUND if rec["verdict"] in ("divergent", "incomplete") else EXIT_OK


def main(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except CommandError as e:
        print(f"pytest-invariance localize: error: {e}", file=sys.stderr)
        return EXIT_USAGE
