"""The distribution: what `pip install .` puts in site-packages, and its entry points."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # Build from a private copy: an in-place build rewrites build/ and *.egg-info in the checkout
    # while other xdist workers import the package from it.
    src = tmp_path_factory.mktemp("src") / "pytest-invariance"
    skip = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", "reports", ".whl")
    shutil.copytree(ROOT, src, ignore=skip)
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, f"pip wheel failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    (whl,) = out.glob("pytest_invariance-*.whl")
    return zipfile.ZipFile(whl)


def test_top_level_folders_install_under_the_namespace(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for path in (
        "pytest_invariance/plugin.py",
        "pytest_invariance/oracles/batch.py",
        "pytest_invariance/reference_kernels/registry.py",
        "pytest_invariance/suites/ops/test_rmsnorm.py",
        "pytest_invariance/engine/server.py",
    ):
        assert path in names, path
    top = {n.split("/")[0] for n in names}
    assert not top & {"oracles", "reference_kernels", "suites", "tests"}, top


def test_every_package_folder_is_listed_in_pyproject(wheel: zipfile.ZipFile) -> None:
    """A subpackage missing from pyproject's list would silently vanish from the wheel."""
    names = set(wheel.namelist())
    mapping = {"oracles": "pytest_invariance/oracles", "reference_kernels": "pytest_invariance/reference_kernels",
               "suites": "pytest_invariance/suites", "pytest_invariance": "pytest_invariance"}
    for src, dst in mapping.items():
        for init in (ROOT / src).rglob("__init__.py"):
            rel = init.relative_to(ROOT / src).as_posix()
            assert f"{dst}/{rel}" in names, f"{src}/{rel} is not packaged: add it to pyproject's packages"


def test_entry_points(wheel: zipfile.ZipFile) -> None:
    (ep,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(ep).decode()
    assert "[pytest11]\ninvariance = pytest_invariance.plugin" in text
    assert "pytest-invariance = pytest_invariance.cli:main" in text
    assert "[vllm.general_plugins]\ninvariance = pytest_invariance.launch.hook:vllm_plugin" in text


def test_a_checkout_without_an_install_imports_the_mapped_subpackages() -> None:
    """``python -S`` (no site-packages, so no editable finder) from the repository root: the
    folders pyproject maps into the package import under its name, as from a wheel."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import pytest_invariance.oracles.vocabulary as v, pytest_invariance.reference_kernels as rk;"
        "import pytest_invariance.suites; print(v.__file__, rk.__file__)"
    )
    res = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-1000:]
    assert str(ROOT / "oracles" / "vocabulary.py") in res.stdout


def test_the_readme_example_runs_from_the_installed_wheel(wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    """The README's fixture example, pasted into a new project that installed the wheel (not the
    checkout): the plugin, the public imports and the reference kernels all come from site."""
    import re

    pytest.importorskip("torch")
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel.filename],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    project = tmp_path / "project"
    project.mkdir()
    example = re.search(r"```python\n(# test_my_linear\.py.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    (project / "test_my_linear.py").write_text(
        example + "\n\ndef test_imports_come_from_the_wheel():\n    import pytest_invariance\n"
        f"    assert pytest_invariance.__file__.startswith({str(site)!r}), pytest_invariance.__file__\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(site)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--invariance-limit=17"],
                         cwd=project, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
