"""What ``pip install .`` puts into site-packages: the package ``dask_hashcodes`` and its
dist-info, nothing else at top level (no ``pipeline``, ``jobs`` or ``benchmarks`` that would
collide with other projects), the ``dhash`` command, and the data files the package reads.

The wheel is built the way pip builds it for a non-editable install (setuptools, from
pyproject.toml), without dependencies or network, from a copy of the files a source
distribution holds (so the build leaves nothing in the checkout).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    for folder in ("pipeline", "jobs"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
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
    assert "[console_scripts]" in text and "dhash = dask_hashcodes.cli.main:main" in text
