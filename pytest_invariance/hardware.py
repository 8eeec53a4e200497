"""Hardware and software fingerprint carried by every record.

Invariance is a property of (hardware, software, kernel), so every verdict
travels with the machine it was measured on. Computed once per process;
torch is imported only when asked and only if installed.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from importlib.util import find_spec

from . import __version__


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.stdout.strip().splitlines()
    return line[0].strip() if line else None


def _version(module: str) -> str | None:
    if find_spec(module) is None:
        return None
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 - a missing distribution is not an error here
        return None


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _first_version(*distributions: str) -> str | None:
    """The version of the first installed distribution (the CUDA wheels torch depends on)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in distributions:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _cpu_identity(torch) -> dict:
    """The ISA ATen dispatches to (``ATEN_CPU_CAPABILITY`` lowers it) and AMX where the CPU has it."""
    isa = None
    if torch is not None:
        try:
            isa = str(torch.backends.cpu.get_cpu_capability())
        except (AttributeError, RuntimeError):
            isa = None
    return {"isa": isa, "amx": "amx_tile" in _cpu_flags()}


def _cuda_software(torch) -> dict:
    nccl = None
    try:
        nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
    except (AttributeError, RuntimeError, TypeError):
        nccl = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "cudnn": None if cudnn is None else str(cudnn),
        "cublas": _first_version("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12", "nvidia-cublas-cu11"),
        "nccl": nccl,
    }


@functools.lru_cache(maxsize=1)
def fingerprint() -> dict:
    """``{"hardware": {...}, "software": {...}}`` for the device this process runs on: the GPU
    ``gpus.pinned_gpu()`` chose (an xdist worker's own), else the CPU."""
    cores = os.cpu_count() or 0
    cpu = _cpu_model()
    hw: dict = {"name": cpu, "kind": "cpu", "cpu_model": cpu, "cores": cores, "device_count": 0}
    sw: dict = {
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "pytest_invariance": __version__,
        "torch": None,
        "triton": _version("triton"),
        "cublas": None,
        "cudnn": None,
        "nccl": None,
    }
    torch = None
    if find_spec("torch") is not None:
        import torch

        sw["torch"] = str(torch.__version__)
    hw.update(_cpu_identity(torch))
    if torch is not None and torch.cuda.is_available():
        from .gpus import pinned_gpu

        index = pinned_gpu()
        index = 0 if index is None else index
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        hw.update(
            name=props.name,
            kind="cuda",
            device_count=torch.cuda.device_count(),
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 1),
            gpu_index=index,
            gpu_uuid=None if uuid is None else str(uuid),
            cuda=torch.version.cuda,
            driver=_nvidia_driver(),
        )
        sw.update(_cuda_software(torch))
    return {"hardware": hw, "software": sw}


def _nvidia_gpus() -> list[str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def header_line() -> str:
    """Report-header line built without importing torch (nvidia-smi and package metadata),
    so a session that never touches an invariance test does not pay for torch."""
    gpus = _nvidia_gpus()
    if gpus:
        dev = f"{gpus[0]} x{len(gpus)} (name, driver; from nvidia-smi)"
    else:
        dev = f"{_cpu_model()} ({os.cpu_count() or 0} cores, no NVIDIA GPU seen)"
    soft = ", ".join(f"{m} {v}" for m in ("torch", "triton") if (v := _version(m)))
    return f"invariance: {dev}; {soft or 'torch not installed'}; python {platform.python_version()}"


def cuda_available() -> bool:
    """Whether CUDA tests can run, without importing torch when it is absent."""
    if find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())
