"""Records name what was tested: vLLM's ``/server_info`` (JSON or string form), SGLang's flat
``/server_info`` and a plain OpenAI server's ``/v1/models`` become the same record keys.

The inputs follow the shapes vLLM 0.32 CPU and SGLang serve (keys and value forms as measured);
the values are made up here.
"""

from __future__ import annotations

from pytest_invariance.adapters.sglang import identity
from pytest_invariance.adapters.vllm import VLLMAdapter, normalize, parse_config_string

JSON_FORM = {
    "vllm_config": {
        "model_config": {"model": "/m/tiny", "served_model_name": "tiny", "dtype": "torch.bfloat16",
                         "quantization": None, "max_model_len": 2048, "enforce_eager": False, "seed": 0},
        "cache_config": {"block_size": 128, "enable_prefix_caching": True, "cache_dtype": "auto"},
        "scheduler_config": {"max_num_batched_tokens": 2048, "enable_chunked_prefill": True, "max_num_seqs": 128},
        "compilation_config": {"mode": 2, "cudagraph_mode": 0},
        "parallel_config": {"tensor_parallel_size": 1},
        "device_config": {"device": "cpu"},
    },
    "vllm_env": {"VLLM_BATCH_INVARIANT": False},
}  # fmt: skip

STRING_FORM = (
    "model='/m/tiny', speculative_config=None, tokenizer='/m/tiny', dtype=torch.float16, max_seq_len=4096, "
    "quantization=fp8, enforce_eager=True, observability_config=ObservabilityConfig(a=1, b=None), "
    "device_config=cpu, seed=0, served_model_name=tiny, enable_prefix_caching=False, "
    "enable_chunked_prefill=True, compilation_config={'mode': <CompilationMode.NONE: 0>, "
    "'cudagraph_mode': <CUDAGraphMode.PIECEWISE: 1>, 'max_num_seqs': 9}"
)


def test_vllm_json_form_gives_model_dtype_and_the_invariance_settings():
    info = normalize(JSON_FORM, "0.32.0")
    assert info["model"] == "tiny" and info["model_path"] == "/m/tiny" and info["version"] == "0.32.0"
    assert info["dtype"] == "bfloat16" and info["quantization"] == "none"
    assert (info["block_size"], info["chunk_size"], info["max_num_seqs"]) == (128, 2048, 128)
    assert info["enable_prefix_cache"] is True and info["enable_chunked_prefill"] is True
    assert info["enforce_eager"] is False and info["cudagraph_mode"] == "NONE"
    assert info["batch_invariant"] is False and VLLMAdapter("http://x").mode(info) == "default"


def test_vllm_string_form_is_parsed_for_its_top_level_pairs():
    flat = parse_config_string(STRING_FORM)
    assert flat["dtype"] == "torch.float16" and flat["max_model_len"] == 4096
    assert flat["enforce_eager"] is True and flat["enable_prefix_cache"] is False
    assert flat["cudagraph_mode"] == "PIECEWISE" and flat["compilation_mode"] == "NONE"
    assert "max_num_seqs" not in flat  # a key inside a nested object is not a top-level setting
    info = normalize({"vllm_config": STRING_FORM})
    assert info["dtype"] == "float16" and info["quantization"] == "fp8" and info["model"] == "tiny"


def test_sglang_flat_info_gets_the_record_keys():
    info = identity({"model_path": "/m/q", "disable_radix_cache": True, "disable_cuda_graph": False,
                     "max_running_requests": 48, "version": "0.5.23", "dtype": "bfloat16"})  # fmt: skip
    assert info["model"] == "/m/q" and info["enable_prefix_cache"] is False and info["cuda_graph"] is True
    assert info["max_num_seqs"] == 48 and info["version"] == "0.5.23" and info["engine"] == "sglang"


def test_vllm_speculative_counters_are_read_from_metrics() -> None:
    from pytest_invariance.adapters.vllm import parse_spec_decode_metrics

    page = ('# TYPE vllm:spec_decode_num_draft_tokens counter\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 17.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 9.0\n')  # fmt: skip
    assert parse_spec_decode_metrics(page) == {"draft_tokens": 40, "accepted_tokens": 17}
    assert parse_spec_decode_metrics("vllm:num_requests_running 0\n") is None


def test_a_given_target_mode_wins_over_vllms_own_report_which_is_kept():
    """vLLM under ``pytest-invariance launch`` reports its own ``VLLM_BATCH_INVARIANT`` (off), so its
    records said ``default`` and the mode check fired; ``--invariance-target-mode invariant`` names it."""
    from pytest_invariance.adapters.openai import OpenAIAdapter
    from pytest_invariance.e2e.target import Target, name_target

    info = normalize(JSON_FORM, "0.32.0")
    t = Target(VLLMAdapter("http://t"), "target", "invariant", info=info, mode="default")
    name_target(t, mode="invariant")
    assert t.mode == "invariant" and t.mode_check() is None
    cfg = t.config()
    assert cfg["mode_source"] == "--invariance-target-mode" and cfg["reported_mode"] == "default"
    control = Target(VLLMAdapter("http://c"), "control", "default", info=normalize(JSON_FORM), mode="default")
    name_target(control, mode="invariant")
    assert control.mode == "default" and "mode_source" not in control.info  # its own report stands
    plain = Target(OpenAIAdapter("http://p"), "control", "default", info={"model": "m"})
    name_target(plain, implementation="transformers-serve", mode="invariant")  # no mode reported: default
    assert plain.mode == "default" and plain.info["mode_source"] == "--invariance-target-mode"
    assert plain.info["implementation"] == "transformers-serve" and "reported_mode" not in plain.info
