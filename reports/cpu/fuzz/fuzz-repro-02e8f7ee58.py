#!/usr/bin/env python3
# Reproducer written by pytest-invariance fuzz: python {this file} [URL] [--runs N]; exit 1 reproduced, 0 not, 2 server error.
# Found on vllm [default] @ http://127.0.0.1:8741: probe differs from the probe alone (logprob at step 1) beside a workload of 2 (shrinking cut short) requests, reproduced 1/3 [6 workloads in 4 s (failure found; hypothesis's replay was flaky, so shrinking stopped early), 20 runs with shrinking]
"""How a fuzz workload goes over the wire, and how the probe's answer is compared: bit for bit.

A workload is plain data: one greedy *probe* request and the co-running *neighbour* requests,
each an HTTP route, the JSON body a client would send, an arrival offset in milliseconds relative
to the probe, and, for a streamed neighbour, after how many chunks its client hangs up. The probe's
evidence is its token ids and the IEEE-754 bits of each token's logprob (as float64 hex), so two
answers are equal only when the arithmetic was.

This file needs only the standard library and ``requests``: every reproducer script the fuzzer
writes is this file's text, followed by the workload and the probe-alone answer as data, so the
script sends exactly what the fuzzer sent and compares exactly as it compared.
"""

import json
import struct
import sys
import threading
import time
from typing import Any

import requests

READ_TIMEOUT_S = 120.0


class WireError(Exception):
    """The probe could not be sent or its answer lacks what the comparison needs (one line)."""


def _bits(value: Any) -> str | None:
    """A logprob as the hex of its float64 bits (None: the server sent none)."""
    if value is None:
        return None
    return struct.pack(">d", float(value)).hex()


def _token_id(name: Any) -> Any:
    if isinstance(name, str) and name.startswith("token_id:"):
        return int(name[len("token_id:"):])
    return name


def probe_evidence(answer: Any) -> dict:
    """``{"token_ids": [...], "logprob_bits": [...]}`` from a completions answer. Token ids from
    ``choices[0].token_ids`` where the server returns them (vLLM, bundled), else the names in
    ``logprobs.tokens`` (``token_id:N`` or the token's text, which is lossy and flagged)."""
    try:
        choice = answer["choices"][0]
        lp = choice.get("logprobs") or {}
        names = lp.get("tokens")
        bits = [_bits(v) for v in lp.get("token_logprobs") or []]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise WireError(f"the probe's answer has no choices[0] with logprobs ({type(exc).__name__}: {exc})") from None
    ids = choice.get("token_ids")
    lossy = ids is None
    if ids is None:
        if names is None:
            raise WireError("the probe's answer carries neither token_ids nor logprobs.tokens")
        ids = [_token_id(n) for n in names]
        lossy = any(not isinstance(i, int) for i in ids)
    return {"token_ids": list(ids), "logprob_bits": bits, "lossy_ids": lossy}


def difference(alone: dict, other: dict) -> dict | None:
    """Where the probe's answer first differs from the probe alone (None: bitwise equal)."""
    a_ids, b_ids = alone["token_ids"], other["token_ids"]
    a_lp, b_lp = alone["logprob_bits"], other["logprob_bits"]
    for step in range(max(len(a_ids), len(b_ids))):
        a = a_ids[step] if step < len(a_ids) else None
        b = b_ids[step] if step < len(b_ids) else None
        if a != b:
            return {"step": step, "what": "token", "alone": a, "got": b}
        la = a_lp[step] if step < len(a_lp) else None
        lb = b_lp[step] if step < len(b_lp) else None
        if la != lb:
            return {"step": step, "what": "logprob", "alone": la, "got": lb}
    return None


def _post(url: str, req: dict, headers: dict, out: dict) -> None:
    """Send one request and record its status (and, for the probe, its JSON)."""
    cut = req.get("disconnect_after_chunks")
    stream = bool(req["body"].get("stream"))
    try:
        with requests.post(url + req["route"], json=req["body"], headers=headers, stream=stream,
                           timeout=(5.0, READ_TIMEOUT_S)) as resp:  # fmt: skip
            out["status"] = resp.status_code
            if not stream:
                out["json"] = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else None
                return
            chunks = 0
            for line in resp.iter_lines():
                if line.startswith(b"data:") and line.strip() != b"data: [DONE]":
                    chunks += 1
                    if cut is not None and chunks >= cut:
                        out["disconnected_after"] = chunks
                        return  # leaving the ``with`` closes the connection mid-stream
            out["chunks"] = chunks
    except (requests.RequestException, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def run(url: str, workload: dict, headers: dict | None = None) -> dict:
    """Send the probe and every neighbour at its offset; wait for all of them. Returns the probe's
    evidence and one status line per neighbour (an error there is recorded, not raised)."""
    url = url.rstrip("/")
    headers = dict(headers or {})
    reqs = [{**workload["probe"], "offset_ms": 0}] + list(workload.get("neighbours", []))
    first = min(r.get("offset_ms", 0) for r in reqs)
    outs: list[dict] = [{} for _ in reqs]
    start = time.monotonic() + 0.05

    def go(i: int) -> None:
        delay = start + (reqs[i].get("offset_ms", 0) - first) / 1000.0 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        _post(url, reqs[i], headers, outs[i])

    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    probe = outs[0]
    if "error" in probe:
        raise WireError(f"{url}{reqs[0]['route']}: the probe failed: {probe['error']}")
    if probe.get("status") != 200 or probe.get("json") is None:
        body = json.dumps(probe.get("json"))[:200] if probe.get("json") is not None else "no JSON body"
        raise WireError(f"{url}{reqs[0]['route']}: the probe got HTTP {probe.get('status')}: {body}")
    neighbours = [{k: v for k, v in o.items() if k != "json"} for o in outs[1:]]
    return {"probe": probe_evidence(probe["json"]), "neighbours": neighbours}


def alone(workload: dict) -> dict:
    """The same workload without its neighbours: the reference the probe must equal."""
    return {"probe": workload["probe"], "neighbours": []}


def reproduce(url: str, workload: dict, expected: dict, runs: int = 3, headers: dict | None = None) -> int:
    """The reproducer's body: the probe alone, then the workload ``runs`` times, each compared with
    the probe alone bit for bit. Exit status 1 when the divergence reproduced, 0 when it did not,
    2 when the server could not be asked."""
    try:
        ref = run(url, alone(workload), headers)["probe"]
        print(f"probe alone: {len(ref['token_ids'])} tokens; "
              + ("same bits as when the fuzzer ran" if difference(expected, ref) is None
                 else f"NOT the bits the fuzzer saw alone ({difference(expected, ref)})"))  # fmt: skip
        hits = 0
        for k in range(runs):
            got = run(url, workload, headers)
            d = difference(ref, got["probe"])
            hits += d is not None
            statuses = [n.get("status", n.get("error")) for n in got["neighbours"]]
            print(f"run {k + 1}/{runs}: " + ("probe DIFFERS from alone: " + json.dumps(d) if d else "probe equals alone")
                  + f" (neighbour statuses {statuses})")  # fmt: skip
    except WireError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = len(workload.get("neighbours", []))
    verdict = "REPRODUCED" if hits else "NOT REPRODUCED"
    print(f"{verdict}: the probe differed from the probe alone in {hits}/{runs} runs of {n + 1} requests")
    return 1 if hits else 0


def reproducer_main(default_url: str, workload: dict, expected: dict, argv: list[str]) -> int:
    """``python repro.py [URL] [--runs N]``: the URL the workload was found on unless one is given."""
    url, runs, rest = default_url, 3, list(argv)
    if "--runs" in rest:
        i = rest.index("--runs")
        try:
            runs = int(rest[i + 1])
        except (IndexError, ValueError):
            print("error: --runs needs a positive integer", file=sys.stderr)
            return 2
        del rest[i : i + 2]
    if rest:
        url = rest[0]
    return reproduce(url, workload, expected, max(runs, 1))


# ---- the workload pytest-invariance's fuzzer found (data) ----------------------------------------
FOUND_ON = {'engine': 'vllm', 'label': 'vllm [default] @ http://127.0.0.1:8741', 'mode': 'default', 'model': 'tiny-llama', 'summary': "probe differs from the probe alone (logprob at step 1) beside a workload of 2 (shrinking cut short) requests, reproduced 1/3 [6 workloads in 4 s (failure found; hypothesis's replay was flaky, so shrinking stopped early), 20 runs with shrinking]", 'url': 'http://127.0.0.1:8741', 'version': '0.32.0'}
WORKLOAD = json.loads('{\n "probe": {\n  "route": "/v1/completions",\n  "body": {\n   "prompt": [\n    65,\n    98,\n    63,\n    32,\n    95,\n    73,\n    39,\n    102,\n    68,\n    92,\n    65,\n    122,\n    94,\n    71,\n    102,\n    61,\n    110,\n    94,\n    77,\n    116,\n    93,\n    70,\n    103,\n    126,\n    90,\n    94,\n    50,\n    97,\n    50,\n    50,\n    124,\n    39,\n    87,\n    61,\n    65,\n    87,\n    90,\n    117,\n    88,\n    107,\n    96,\n    59,\n    115,\n    70,\n    91,\n    80,\n    110,\n    88,\n    46,\n    57,\n    101,\n    115,\n    34,\n    106,\n    80,\n    105,\n    74,\n    75,\n    45,\n    104,\n    111,\n    103,\n    101,\n    71,\n    72,\n    93,\n    65,\n    124,\n    70,\n    74,\n    98,\n    76,\n    41,\n    50,\n    116,\n    104,\n    98,\n    80,\n    64,\n    100,\n    118,\n    100,\n    104,\n    96,\n    71,\n    68,\n    91,\n    33,\n    114,\n    42,\n    32,\n    124,\n    93,\n    110,\n    116,\n    124,\n    125,\n    92,\n    55,\n    37,\n    123,\n    64,\n    67,\n    125,\n    95,\n    64,\n    125,\n    38,\n    65,\n    109,\n    63,\n    86,\n    39,\n    108,\n    72,\n    81,\n    105,\n    37,\n    91,\n    36,\n    112,\n    79,\n    76,\n    53,\n    83,\n    67,\n    87,\n    123,\n    55\n   ],\n   "max_tokens": 8,\n   "temperature": 0.0,\n   "logprobs": 1,\n   "model": "tiny-llama",\n   "return_token_ids": true,\n   "ignore_eos": true\n  }\n },\n "neighbours": [\n  {\n   "route": "/v1/completions",\n   "body": {\n    "max_tokens": 8,\n    "model": "tiny-llama",\n    "prompt": [\n     81,\n     85,\n     37,\n     65,\n     97,\n     94,\n     83,\n     70,\n     93,\n     77,\n     106,\n     59,\n     96,\n     49,\n     68,\n     49,\n     44,\n     111,\n     64,\n     100,\n     122,\n     109,\n     50,\n     71,\n     44,\n     125,\n     41,\n     119,\n     74,\n     92,\n     103,\n     44,\n     77,\n     87,\n     72,\n     110,\n     113,\n     58,\n     102,\n     93,\n     88,\n     98,\n     65,\n     39,\n     102,\n     33,\n     43,\n     124,\n     83,\n     122,\n     117,\n     112,\n     32,\n     110,\n     95,\n     74,\n     63,\n     125,\n     73,\n     122,\n     40,\n     56,\n     104,\n     60,\n     62,\n     50,\n     101,\n     89,\n     43,\n     42,\n     72,\n     97,\n     94,\n     45,\n     70,\n     102,\n     69,\n     122,\n     47,\n     102,\n     74,\n     101,\n     58,\n     109,\n     102,\n     107,\n     68,\n     88,\n     43,\n     108,\n     81,\n     72,\n     105,\n     62,\n     69,\n     55,\n     56,\n     55,\n     36,\n     110,\n     116,\n     65,\n     92,\n     40,\n     43,\n     118,\n     48,\n     51,\n     36,\n     42,\n     121,\n     101,\n     119,\n     82,\n     122,\n     99,\n     67,\n     98,\n     62,\n     59,\n     118,\n     107,\n     85,\n     106,\n     67,\n     89,\n     95\n    ],\n    "temperature": 0.0\n   },\n   "offset_ms": 0\n  }\n ]\n}')
PROBE_ALONE = json.loads('{"token_ids": [3159, 1443, 1440, 1443, 1440, 3159, 3159, 2982], "logprob_bits": ["c0189ec180000000", "c018d7f700000000", "c018da3c40000000", "c0185d3b40000000", "c018a78c80000000", "c01837ff60000000", "c0190465e0000000", "c019362300000000"], "lossy_ids": false}')

if __name__ == "__main__":
    sys.exit(reproducer_main(FOUND_ON["url"], WORKLOAD, PROBE_ALONE, sys.argv[1:]))
