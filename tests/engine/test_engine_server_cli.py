"""``serve_main``: bad flags are one line and a non-zero exit; good flags start a real server."""

from __future__ import annotations

import socket

import pytest
from served import served

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")

from pytest_invariance.engine.server import build_parser, serve_main  # noqa: E402


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "abc"],
        ["--port", "70000"],
        ["--max-num-seqs", "0"],
        ["--chunk-size", "-4"],
        ["--dtype", "int8"],
        ["--device", "tpu"],
        ["--max-queue", "-1"],
        ["--model", "/nonexistent/model/dir"],
        ["--no-such-flag"],
    ],
)
def test_bad_flags_one_line_nonzero(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_main(argv) != 0
    err = capsys.readouterr().err
    assert err.startswith("pytest-invariance serve: error:") and err.count("\n") == 1, err


def test_defaults_bind_loopback() -> None:
    args = build_parser().parse_args([])
    assert args.host == "127.0.0.1" and args.api_key is None and not args.batch_invariant


def test_serve_subprocess_reports_its_settings(tmp_path) -> None:
    args = ["--batch-invariant", "--max-num-seqs", "4", "--chunk-size", "32", "--prefix-cache", "--api-key", "k",
            "--log-level", "warning"]  # fmt: skip
    with served(args, tmp_path / "server.log") as (base, _proc):
        assert requests.get(base + "/server_info", timeout=10).status_code == 401
        info = requests.get(base + "/server_info", headers={"Authorization": "Bearer k"}, timeout=30).json()
        assert info["mode"] == "invariant" and info["enable_deterministic_inference"] is True
        assert info["max_num_seqs"] == 4 and info["chunk_size"] == 32 and info["enable_prefix_cache"] is True
        assert info["dtype"] == "bfloat16" and info["device"] == "cpu"


def test_incomplete_model_config_names_the_key_and_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text('{"hidden_size": 64, "vocab_size": 256}')
    assert serve_main(["--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"pytest-invariance serve: error: {tmp_path / 'config.json'}: missing key 'num_attention_heads'\n"


def test_port_in_use_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert serve_main(["--port", str(port), "--log-level", "warning"]) == 1
    err = capsys.readouterr().err
    assert err == f"pytest-invariance serve: error: cannot listen on 127.0.0.1:{port}: the port is already in use\n"
