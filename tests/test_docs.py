"""The documentation site builds with ``mkdocs build --strict`` (every link, nav entry, included
results file and API target resolves, no warning), its generated pages say what the code says,
and the README stays a short entry point that links into the site."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 250


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = [
        m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers") if not importlib.util.find_spec(m)
    ]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} not installed; pip install -e '.[test]' (or '.[docs]') installs them")
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[docs]'); CI always builds the site")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # a theme banner, not a build problem
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=out,  # not the repository: the site must build from any directory
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def _text(html_file: Path) -> str:
    """The visible text of a built page (tags dropped, entities kept simple)."""
    text = re.sub(r"<[^>]+>", " ", html_file.read_text())
    return " ".join(text.replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&").split())


def test_cli_reference_lists_every_command_and_option(site):
    from dask_hashcodes.cli.options import COMMANDS, options_of

    page = _text(site / "cli" / "index.html")
    for command in COMMANDS:
        assert f"dhash {command}" in page, command
        for opt in options_of(command).values():
            shown = opt.name.upper() if getattr(opt, "positional", False) else opt.flag
            assert shown in page, (command, shown)


def test_api_reference_is_rendered_from_docstrings(site):
    page = _text(site / "api" / "estimators" / "index.html")
    for name in ("ITQ", "DisH", "SGH", "MAC", "ADSH", "make_hasher", "load_model"):
        assert name in page, name
    # the docstrings themselves, not only the names
    from dask_hashcodes.hashing.linear import ITQ

    first_line = (ITQ.__doc__ or "").strip().splitlines()[0]
    assert " ".join(first_line.split()[:4]) in page


def test_benchmark_pages_include_the_committed_results(site):
    page = _text(site / "benchmarks" / "index.html")
    assert "--8<--" not in page  # every include was resolved
    assert page.count("|") < 50  # tables were rendered, not left as Markdown source
    assert "faiss" in page.lower()


def test_docs_are_for_users():
    for path in [*DOCS.rglob("*.md"), README]:
        text = path.read_text()
        assert "../shared" not in text, path
        assert not re.search(r"(?i)\bnotes?\b", text), f"{path}: says 'note(s)'"
        assert not re.search(r"(?i)\bissue\s*#?\d+", text), f"{path}: names an issue number"


def test_readme_is_a_short_entry_point():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    assert lines[0].startswith("# dask-hashcodes")
    start = lines[1:].index("```bash") + 1
    commands = lines[start + 1 : start + 3]
    # the first installs the runtime only (no test extra: no torch, OpenCV or MkDocs), the second the test extra
    assert commands[0].startswith("bash deploy/setup.sh run && .venv/bin/dhash demo"), commands
    assert commands[1].startswith("bash deploy/setup.sh test && .venv/bin/python -m pytest -q"), commands
    # the commands come right after the title (marked as not run by tests/test_doc_examples.py: CI runs them)
    assert all(not line.strip() or line.startswith("<!-- not run:") for line in lines[1:start]), lines[1:start]
    # every page the README links to exists
    for target in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (ROOT / target).is_file(), target


def _shell_commands(text: str):
    """Each `dhash COMMAND ...` of the bash blocks in ``text``, continuation lines joined."""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].split(" # ")[0]
            for part in line.split("&&"):
                words = part.split()
                if words and words[0].endswith("dhash") and len(words) > 1:
                    yield words[1], words[2:]


def test_documented_commands_use_real_options():
    """Every `dhash COMMAND --flag` shown in the README and the docs is an option of COMMAND."""
    from dask_hashcodes.cli.options import COMMANDS, options_of

    pages = [README, *DOCS.rglob("*.md")]
    seen = 0
    for path in pages:
        for command, args in _shell_commands(path.read_text()):
            assert command in COMMANDS, f"{path.name}: dhash {command} is not a command"
            flags = {opt.flag for opt in options_of(command).values()} | {"--help"}
            for arg in args:
                flag = arg.split("=")[0]
                if flag.startswith("--"):
                    assert flag in flags, f"{path.name}: dhash {command} has no option {flag}"
            seen += 1
    assert seen > 30  # the README's tour and the guides' examples were all read


def test_python_examples_use_public_names():
    """The Python examples of the README and the docs import only what `dask_hashcodes` exports,
    in one convention: `import dask_hashcodes as dh` (then `dh.NAME`) or
    `from dask_hashcodes import NAME`, never a submodule; inline examples in the text use `dh.`.
    The architecture page is for contributors: its new method is code written inside the
    library, which imports the modules it extends."""
    import ast

    import dask_hashcodes

    public = set(dask_hashcodes.__all__)
    seen = 0
    for path in [README, *(p for p in DOCS.rglob("*.md") if p.name != "code-layout.md")]:
        text = path.read_text()
        for block in re.findall(r"```python\n(.*?)```", text, re.S):
            tree = ast.parse(block)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] == "dask_hashcodes":
                    assert node.module == "dask_hashcodes", f"{path.name}: {ast.unparse(node)} imports a submodule"
                    for alias in node.names:
                        assert alias.name in public, (
                            f"{path.name}: `from dask_hashcodes import {alias.name}` is not public"
                        )
                        seen += 1
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] == "dask_hashcodes":
                            assert (alias.name, alias.asname) == ("dask_hashcodes", "dh"), (
                                f"{path.name}: write `import dask_hashcodes as dh`, not {ast.unparse(node)}"
                            )
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                    assert node.value.id != "dask_hashcodes", f"{path.name}: dask_hashcodes.{node.attr}: use dh."
                    if node.value.id == "dh":
                        assert node.attr in public, f"{path.name}: dh.{node.attr} is not public"
                        seen += 1
        for name in re.findall(r"`[^`]*\bdh\.(\w+)\(", text):
            assert name in public, f"{path.name}: dh.{name} is not public"
        assert not re.findall(r"`[^`]*\bdask_hashcodes\.\w+\(", text), f"{path.name}: write dh.NAME(...) in examples"
    assert seen > 10


def test_documented_dashboard_task_names_are_the_codes():
    """The task names the storage guide lists for the dashboard are prefixes the code gives its
    tasks (a string literal that starts a task's name or key)."""
    text = (DOCS / "storage-and-clusters.md").read_text()
    bullet = re.search(r"Tasks have names on the dashboard(.*?)(?:\n- |\n\n)", text, re.S)
    assert bullet, "storage-and-clusters.md lists the dashboard's task names"
    names = [n for n in re.findall(r"`([a-z0-9-]+)`", bullet.group(1)) if n not in ("-combine", "-merge")]
    assert len(names) >= 8, names
    source = "\n".join(p.read_text() for p in (ROOT / "pipeline" / "dask_hashcodes").rglob("*.py"))
    for name in names:
        assert re.search(rf"""f?["']{re.escape(name)}(["']|-)""", source), f"no task is named {name}"
