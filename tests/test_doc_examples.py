"""Every example of the README and the documentation runs as written, and runs again.

Each fenced Python and shell block (``python``, ``py``, ``bash``, ``sh``, ``shell``,
``console``) of README.md and docs/**/*.md is run, page by page: the blocks of a page in
order, in one fresh temporary directory, the Python blocks in one Python process and one
namespace (``__name__ == "__main__"``, as in a script run by the user), the shell blocks with
``bash -e`` in that directory and this virtualenv's ``bin`` first on PATH. Each page runs
twice, the second time in another fresh directory, so nothing depends on what a previous run
left behind and every example can be run again. What one run can leave behind for the next,
outside its own fresh directory, is the shared state: the files of the session's data directory
(``DHASH_DATA_DIR``), the datasets published on the session's cluster, the Dask variables on its
scheduler and the keys its scheduler and workers hold. When the first run left all of that as it
found it, the second would start from the very state the first did, and repeat it: it is then
skipped (the test says so), and it runs whenever the first run changed any of it.

A block that only illustrates (it needs an S3 bucket, a SLURM cluster, the repository's
set-up script) is marked on the line right before its fence::

    <!-- not run: needs an S3 bucket and its credentials -->

and the reason must not be empty. A block that raises or exits non-zero fails its page with
the block's text and the error.

The pages run against the test session's cluster, named in ``DASK_SCHEDULER_ADDRESS`` as a
user with a running cluster would: every ``dhash`` command and ``connect()`` joins it instead
of starting (and paying the start-up of) a local cluster of its own. Starting a local cluster
is what the command-line tests exercise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^```\s*([\w+-]*)")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:(.*?)-->\s*$")
MARKER = re.compile(r"^\s*<!--\s*not run\b")  # a marker on a line of its own (the text may quote one)
PAGE_TIMEOUT = 1800  # seconds for one run of one page (a shared machine can be slow)


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason, when marked

    def script(self) -> str:
        """The code to run: for a console block, its `$ ` lines (the rest is shown output)."""
        if self.lang != "console":
            return self.text
        return "\n".join(line[2:] for line in self.text.splitlines() if line.startswith("$ "))


def blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced code blocks of a Markdown page with their language and marking."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, lang = i, match.group(1).lower()
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        marked = NOT_RUN.match(lines[start - 1]) if start else None
        text = "\n".join(lines[start + 1 : i]) + "\n"
        found.append(
            Block(path.relative_to(root).as_posix(), start + 1, lang, text, marked and marked.group(1).strip())
        )
        i += 1
    return found


def runnable(path: Path, root: Path = ROOT) -> list[Block]:
    return [b for b in blocks(path, root) if b.lang in PYTHON | SHELL and b.not_run is None]


RUN_PAGES = [p for p in PAGES if runnable(p)]

# One run of one page: a process of its own (isolated from pytest and from the other run),
# its Python blocks exec'd in one namespace, its shell blocks run by bash -e, in order. The
# worker processes of a local cluster import this file as __mp_main__, not as __main__, so
# they never run the blocks.
DRIVER = textwrap.dedent(
    """
    import json, os, subprocess, sys, traceback

    def main(plan_file, result_file):
        plan = json.load(open(plan_file))
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        for n, block in enumerate(plan):
            print(f"=== block at line {block['line']} ({block['lang']})", file=sys.stderr, flush=True)
            print(f"=== block at line {block['line']} ({block['lang']})", flush=True)
            try:
                if block["lang"] in ("python", "py"):
                    namespace["__file__"] = plan_file
                    exec(compile(block["code"], f"{block['page']}:{block['line']}", "exec"), namespace)
                    sys.stdout.flush()
                    sys.stderr.flush()
                else:
                    status = subprocess.run(["bash", "-e", "-c", block["code"]]).returncode
                    if status:
                        raise SystemExit(f"bash -e exited with status {status}")
            except BaseException as error:
                traceback.print_exc()
                json.dump({"failed": n, "error": repr(error)}, open(result_file, "w"))
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1)
        json.dump({"failed": None}, open(result_file, "w"))

    if __name__ == "__main__":
        main(sys.argv[1], sys.argv[2])
    """
)


def run_page(page: Path, workdir: Path, scratch: Path, root: Path = ROOT, scheduler: str | None = None) -> dict:
    """Run the page's blocks in ``workdir``; the driver and its plan live in ``scratch``.
    With ``scheduler``, the examples join that cluster (``DASK_SCHEDULER_ADDRESS``)."""
    plan = [{"page": b.page, "line": b.line, "lang": b.lang, "code": b.script()} for b in runnable(page, root)]
    plan_file, result_file, driver = scratch / "plan.json", scratch / "result.json", scratch / "run_blocks.py"
    plan_file.write_text(json.dumps(plan))
    driver.write_text(DRIVER)
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    if scheduler:
        env["DASK_SCHEDULER_ADDRESS"] = scheduler
    started, cpu = time.perf_counter(), os.times()
    proc = subprocess.run(
        [sys.executable, str(driver), str(plan_file), str(result_file)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )
    after = os.times()
    result = json.loads(result_file.read_text()) if result_file.exists() else {"failed": "?", "error": "no result"}
    return {
        "proc": proc,
        "plan": plan,
        "result": result,
        "wall": time.perf_counter() - started,
        "cpu": (after.children_user - cpu.children_user) + (after.children_system - cpu.children_system),
    }


def failure(page: Path, run: dict, attempt: int, root: Path = ROOT) -> str:
    proc, result, plan = run["proc"], run["result"], run["plan"]
    failed = result.get("failed")
    if isinstance(failed, int):
        block = plan[failed]
        head = f"{block['page']}, block at line {block['line']} ({block['lang']}), run {attempt}:\n"
        head += textwrap.indent(block["code"], "    ") + f"\nerror: {result['error']}\n"
    else:
        head = f"{page.relative_to(root)}, run {attempt}: the page's process ended with status {proc.returncode}\n"
    return f"{head}--- stdout (end)\n{proc.stdout[-4000:]}\n--- stderr (end)\n{proc.stderr[-8000:]}"


def test_every_block_is_run_or_marked_with_a_reason():
    """An unrun block says why; a marker sits right before a fenced block; only code blocks
    are marked."""
    seen = 0
    for page in PAGES:
        lines = page.read_text().splitlines()
        for n, line in enumerate(lines):
            if MARKER.search(line):
                where = f"{page.relative_to(ROOT)}:{n + 1}"
                match = NOT_RUN.match(line)
                assert match, f"{where}: write the marker as `<!-- not run: REASON -->` on a line of its own"
                assert match.group(1).strip(), f"{where}: a `not run` marker needs a reason"
                assert n + 1 < len(lines) and FENCE.match(lines[n + 1]), f"{where}: the marker must precede a fence"
        for block in blocks(page):
            if block.not_run is not None:
                assert block.lang in PYTHON | SHELL, f"{block.page}:{block.line}: only code blocks are run"
            elif block.lang in PYTHON | SHELL:
                seen += 1
    assert seen >= 12  # the README's and the guides' examples were found


def test_block_parser_and_the_runner_can_fail(tmp_path):
    """The runner reports a failing block with its text and error (the test can fail)."""
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```python\nx = 1\n```\n\n<!-- not run: illustrative -->\n```bash\nfalse\n```\n\n"
        "```console\n$ echo ok > out.txt\nok\n```\n\n```python\nassert open('out.txt').read() == 'ok\\n'\n"
        "raise ValueError(x)\n```\n"
    )
    found = blocks(page, tmp_path)
    assert [(b.lang, b.not_run) for b in found] == [
        ("python", None),
        ("bash", "illustrative"),
        ("console", None),
        ("python", None),
    ]
    assert found[2].script() == "echo ok > out.txt"
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    work.mkdir(), scratch.mkdir()
    run = run_page(page, work, scratch, tmp_path)
    assert run["proc"].returncode == 1 and run["result"]["failed"] == 2
    message = failure(page, run, 1, tmp_path)
    assert "block at line 17" in message and "raise ValueError(x)" in message and "ValueError: 1" in message


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=[p.relative_to(ROOT).as_posix() for p in RUN_PAGES])
def test_page_examples_run_twice(page, tmp_path, cluster, client, data_dir):
    """The page's blocks run in order in a fresh directory, then again in another one when the
    first run changed the shared state the second would start from."""
    if "fashion-mnist" in page.read_text():
        from tests.conftest import require_fashion_mnist

        require_fashion_mnist()
    times = []
    for attempt in (1, 2):
        before = shared_state(client, data_dir)
        workdir, scratch = tmp_path / f"run{attempt}", tmp_path / f"scratch{attempt}"
        workdir.mkdir(), scratch.mkdir()
        run = run_page(page, workdir, scratch, scheduler=cluster.scheduler_address)
        if run["proc"].returncode != 0 or run["result"].get("failed") is not None:
            pytest.fail(failure(page, run, attempt), pytrace=False)
        times.append(f"run {attempt}: {run['wall']:.0f} s wall, {run['cpu']:.0f} s CPU")
        changed = [name for name, value in shared_state(client, data_dir).items() if value != before[name]]
        if not changed:
            times.append("shared state unchanged, so a second run would repeat the first: not run")
            break
        times.append(f"changed: {', '.join(changed)}")
    print(f"{page.relative_to(ROOT)}: " + "; ".join(times))


def shared_state(client, data_dir: Path) -> dict:
    """Everything a page's run can leave for a later run outside its own directory: the data
    directory's files (name, size, modification time), the cluster's published datasets, the
    scheduler's variables, and the keys the scheduler and each worker hold."""

    def scheduler_state(dask_scheduler):
        variables = dask_scheduler.extensions.get("variables")
        return {
            "tasks": sorted(map(str, dask_scheduler.tasks)),
            "variables": sorted(map(str, variables.variables)) if variables else [],
        }

    def worker_keys(dask_worker):
        return sorted(map(str, dask_worker.data))

    files = sorted(
        (p.relative_to(data_dir).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in data_dir.rglob("*")
        if p.is_file()
    )
    return {
        "data directory": files,
        "published datasets": sorted(map(str, client.list_datasets())),
        "scheduler": client.run_on_scheduler(scheduler_state),
        "worker keys": sorted(client.run(worker_keys).values()),
    }
