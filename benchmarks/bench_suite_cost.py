"""What the test suite costs a contributor on a fresh clone: wall and CPU seconds of each
checkout's set-up and of its README's test command, the checkouts run one after the other.

For each --commit, in the order given: clone this repository into a temporary folder, check
the commit out, run its set-up script as its ``.ci/run`` does (``bash deploy/setup.sh test``;
checkouts whose script takes no mode get ``bash deploy/setup.sh``), then the test command
``.venv/bin/python -m pytest -q -p no:cacheprovider`` with ``CI=true``. Set-up and tests are
timed apart because pip's cache makes the first set-up on a machine slower than the next ones;
the suite's figure is the test command's.

CPU seconds are user + system of the whole process tree: this process becomes the sub-reaper
of what it starts (Linux ``PR_SET_CHILD_SUBREAPER``), so worker processes that outlive their
parents are reaped here too, and the resource usage of every reaped descendant is counted (what
``/usr/bin/time`` reports, plus any orphans). Processes still alive when a stage ends are
listed in the result and killed.

    .venv/bin/python benchmarks/bench_suite_cost.py --commit a6e40e2 --commit HEAD \\
        --out benchmarks/results/suite_cost.json

--profile adds the suite's ``--cpu-times`` plugin to the test command and records the heaviest
tests and modules by CPU; its own cost (a few psutil calls per test) is then part of the
measured figure. A checkout older than the plugin gets this checkout's copy of it (through
PYTHONPATH, as ``-p dhash_cpu_times``). With two or more commits profiled, the first and the
last are compared test by test: the tests both have (the same pytest node id; a renamed test
counts as removed and added), what each of them cost in either run, and the tests only one
of them has.

--fast-tier runs the edit-test loop's tier instead (the test command with ``-m "not slow"``),
which the README promises in a few minutes on 2 cores.

--again runs the test command a second time in the same clone and records it beside the
first: the first run of a fresh clone also fills the caches its kernels keep beside the code
(numba's compiled functions, written once by whichever process compiles them first), which an
edit-test loop finds filled.

--baseline-result FILE puts the runs of an earlier result (e.g. an older commit measured just
before on the same machine) in the table, first, with the ratio of the last run to its first.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harness.measure import machine_info  # noqa: E402 - after the sys.path entry above
from benchmarks.harness.runs import check_result_out, write_pair  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
TEST_COMMAND = [".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
FAST_TIER = ["-m", "not slow"]  # the fast tier's selection (tests/conftest.py marks the rest slow)
# pytest's last line: "N passed, ... in S s", framed by "=" signs except under -q; a process that
# outlives its test may still print after it, so the line is searched for, not taken last
SUMMARY = re.compile(r"^(?:=+ )?(\d+ (?:passed|failed|error).*? in [\d.]+s(?: \([\d:]+\))?)")


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def children_cpu() -> tuple[float, float, float]:
    """(user + system, user, system) seconds of every descendant reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_utime, usage.ru_stime


def reap_leftovers() -> list[str]:
    """Kill and reap descendants still alive after a stage (orphans re-parented to us); their
    CPU then joins the children figures. Returns their command lines."""
    left = []
    for proc in psutil.Process().children(recursive=True):
        try:
            left.append(" ".join(proc.cmdline())[:200])
            proc.kill()
        except psutil.Error:
            continue
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.1)
    return left


def timed(cmd: list[str], cwd: Path, log: Path, env: dict | None = None) -> dict:
    """Run ``cmd`` in ``cwd`` (output to ``log``, ``env`` added to the environment); its wall
    seconds and its tree's CPU seconds."""
    total0, user0, sys0 = children_cpu()
    started = time.perf_counter()
    with open(log, "w") as out:
        status = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "CI": "true", **(env or {})}).returncode  # fmt: skip
    wall = time.perf_counter() - started
    leftovers = reap_leftovers()
    total1, user1, sys1 = children_cpu()
    return {
        "command": " ".join(cmd),
        "status": status,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(total1 - total0, 1),
        "user_seconds": round(user1 - user0, 1),
        "system_seconds": round(sys1 - sys0, 1),
        "leftover_processes": leftovers,
    }


def setup_command(tree: Path) -> list[str]:
    script = (tree / "deploy" / "setup.sh").read_text()
    return ["bash", "deploy/setup.sh", "test"] if "usage: bash deploy/setup.sh run|test" in script else [
        "bash", "deploy/setup.sh"]  # fmt: skip


def profile_lines(profile: Path) -> list[dict]:
    """The lines of a ``--cpu-times`` file: one dict (test, wall, cpu) per test."""
    return [json.loads(line) for line in profile.read_text().splitlines() if line.strip()]


def heaviest(profile: Path, count: int = 40) -> dict:
    """The tests and test modules of a ``--cpu-times`` file with the most CPU seconds."""
    tests = profile_lines(profile)
    modules: dict[str, float] = {}
    for test in tests:
        module = test["test"].split("::")[0]
        modules[module] = modules.get(module, 0.0) + test["cpu"]
    top = sorted(tests, key=lambda t: -t["cpu"])[:count]
    return {
        "sum_cpu_seconds": round(sum(t["cpu"] for t in tests), 1),
        "tests": [{"test": t["test"], "cpu": round(t["cpu"], 1), "wall": round(t["wall"], 1)} for t in top],
        "modules": {m: round(c, 1) for m, c in sorted(modules.items(), key=lambda mc: -mc[1])[:count]},
    }


def per_test_cpu(profile: Path) -> dict[str, float]:
    """Node id -> CPU seconds of a ``--cpu-times`` file."""
    return {t["test"]: t["cpu"] for t in profile_lines(profile)}


def compare_tests(first: dict[str, float], last: dict[str, float], count: int = 15) -> dict:
    """Two runs' tests side by side: those both have (same node id) and those only one has."""
    both = first.keys() & last.keys()
    added = sorted(last.keys() - first.keys(), key=lambda t: -last[t])
    added_modules: dict[str, float] = {}
    for test in added:
        module = test.split("::")[0]
        added_modules[module] = added_modules.get(module, 0.0) + last[test]
    return {
        "both": {"tests": len(both), "first_cpu": round(sum(first[t] for t in both), 1),
                 "last_cpu": round(sum(last[t] for t in both), 1)},
        "only_first": {"tests": len(first.keys() - both), "cpu": round(sum(first[t] for t in first.keys() - both), 1)},
        "only_last": {"tests": len(added), "cpu": round(sum(last[t] for t in added), 1),
                      "heaviest": [{"test": t, "cpu": round(last[t], 1)} for t in added[:count]],
                      "modules": {m: round(c, 1) for m, c in sorted(added_modules.items(), key=lambda mc: -mc[1])[:count]}},
    }  # fmt: skip


def _summary(log: Path) -> str:
    lines = log.read_text().splitlines()
    return next((m.group(1) for line in reversed(lines) if (m := SUMMARY.search(line))), lines[-1] if lines else "")


def measure(commit: str, workdir: Path, profile: bool = False, fast_tier: bool = False, again: bool = False) -> dict:
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", commit], capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    tree = workdir / sha[:12]
    subprocess.run(["git", "clone", "-q", str(REPO), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", "--detach", sha], check=True)
    setup = timed(setup_command(tree), tree, workdir / f"{sha[:12]}-setup.log")
    if setup["status"]:
        raise SystemExit(f"set-up of {commit} failed; see {workdir / (sha[:12] + '-setup.log')}")
    log = workdir / f"{sha[:12]}-tests.log"
    cpu_file = workdir / f"{sha[:12]}-cpu-times.jsonl"
    command = TEST_COMMAND + (FAST_TIER if fast_tier else [])
    plugin, env = [], None
    if profile and not (tree / "tests" / "cpu_times.py").exists():  # older than the plugin: lend it ours
        lent = workdir / f"{sha[:12]}-plugin"
        lent.mkdir()
        (lent / "dhash_cpu_times.py").write_text((REPO / "tests" / "cpu_times.py").read_text())
        plugin, env = ["-p", "dhash_cpu_times"], {"PYTHONPATH": str(lent)}
    tests = timed(command + (plugin + ["--cpu-times", str(cpu_file)] if profile else []), tree, log, env)
    tests["summary"] = _summary(log)
    run = {"commit": commit, "sha": sha, "setup": setup, "tests": tests, "test_command": " ".join(command)}
    if again:
        again_log = workdir / f"{sha[:12]}-tests-again.log"
        run["tests_again"] = {**timed(command, tree, again_log), "summary": _summary(again_log)}
    if profile and cpu_file.exists():
        run["profile"] = heaviest(cpu_file)
        run["per_test_cpu"] = per_test_cpu(cpu_file)  # compared in main, then dropped from the result
    return run


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        "# Test suite cost on a fresh clone, checkouts run one after the other"
        + (" (the fast tier)" if result.get("fast_tier") else ""),
        "",
        f"- command: `{result['command']}`",
        f"- test command: `{result['runs'][-1].get('test_command', ' '.join(TEST_COMMAND))}` (with CI=true)",
        f"- machine: {m['cpu_model']}, {m['cores']} cores, {m['ram_total_gb']} GB RAM; {m['platform']}",
        "- CPU: user + system seconds of the whole process tree (every reaped descendant, orphans included)",
        "",
        "| commit | set-up wall s | set-up CPU s | tests wall min | tests CPU s (user + sys) | tests CPU min | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        s, t = run["setup"], run["tests"]
        where = f", in {run['from']}" if "from" in run else ""
        lines.append(
            f"| `{run['sha'][:7]}` ({run['commit']}{where}) | {s['wall_seconds']:.0f} | {s['cpu_seconds']:.0f} | "
            f"{t['wall_seconds'] / 60:.1f} | {t['cpu_seconds']:.0f} ({t['user_seconds']:.0f} + "
            f"{t['system_seconds']:.0f}) | {t['cpu_seconds'] / 60:.1f} | {t['summary']} |"
        )
    for run in result["runs"]:
        if "tests_again" in run:
            t = run["tests_again"]
            lines += [
                "",
                f"- `{run['sha'][:7]}` run again in the same clone (the caches its first run filled, numba's "
                f"compiled kernels among them, are warm, as in an edit-test loop): {t['wall_seconds'] / 60:.1f} min "
                f"wall, {t['cpu_seconds']:.0f} s CPU ({t['user_seconds']:.0f} + {t['system_seconds']:.0f}); "
                f"{t['summary']}",
            ]
    if len(result["runs"]) > 1:
        first, last = result["runs"][0]["tests"], result["runs"][-1]["tests"]
        lines += ["", f"- tests CPU of the last over the first: {last['cpu_seconds'] / first['cpu_seconds']:.2f}; "
                  f"wall: {last['wall_seconds'] / first['wall_seconds']:.2f}"]  # fmt: skip
    if "compared" in result:
        c = result["compared"]
        first, last, both = c["first"][:7], c["last"][:7], c["both"]
        lines += [
            "",
            f"## `{first}` and `{last}` test by test (`--cpu-times`; same pytest node id = same test)",
            "",
            f"| tests | count | CPU s in `{first}` | CPU s in `{last}` |",
            "|---|---|---|---|",
            f"| in both | {both['tests']} | {both['first_cpu']:.0f} | {both['last_cpu']:.0f} |",
            f"| only in `{first}` (removed or renamed) | {c['only_first']['tests']} | {c['only_first']['cpu']:.0f} | |",
            f"| only in `{last}` (added or renamed) | {c['only_last']['tests']} | | {c['only_last']['cpu']:.0f} |",
            "",
            f"- the tests both have cost {both['last_cpu'] / both['first_cpu']:.2f}x in `{last}` what they cost "
            f"in `{first}`; a session fixture's cost counts with the first test that uses it, in either run",
            "",
            f"| test module of the tests only in `{last}` | CPU s |",
            "|---|---|",
        ]
        lines += [f"| {m} | {cpu:.0f} |" for m, cpu in c["only_last"]["modules"].items()]
    for run in result["runs"]:
        if "profile" in run:
            prof = run["profile"]
            lines += ["", f"## Heaviest test modules of `{run['sha'][:7]}` by CPU seconds (`--cpu-times`; "
                      f"sum over tests {prof['sum_cpu_seconds']:.0f} s)", "", "| module | CPU s |", "|---|---|"]  # fmt: skip
            lines += [f"| {m} | {c:.0f} |" for m, c in list(prof["modules"].items())[:20]]
            lines += [
                "",
                "| test (a session fixture's cost lands on its first test) | CPU s | wall s |",
                "|---|---|---|",
            ]
            lines += [f"| `{t['test']}` | {t['cpu']:.0f} | {t['wall']:.0f} |" for t in prof["tests"][:25]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", action="append", help="a commit to measure (repeat; default HEAD)")
    parser.add_argument("--out", default="benchmarks/results/suite_cost.json")
    parser.add_argument("--baseline-result", help="an earlier result of this script whose runs come first in the table")
    parser.add_argument("--profile", action="store_true", help="run the tests with --cpu-times; record the heaviest")
    parser.add_argument("--fast-tier", action="store_true", help='run the fast tier only (-m "not slow")')
    parser.add_argument("--again", action="store_true", help="run the tests a second time in the same clone")
    parser.add_argument("--overwrite", action="store_true", help="replace a suite-cost result written before")
    args = parser.parse_args(argv)
    check_result_out(args.out, overwrite=args.overwrite)
    become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    runs = []
    if args.baseline_result:
        earlier = json.loads(Path(args.baseline_result).read_text())
        runs += [{**run, "from": args.baseline_result} for run in earlier["runs"]]
    with tempfile.TemporaryDirectory(prefix="dhash-suite-cost-") as work:
        for commit in args.commit or ["HEAD"]:
            runs.append(measure(commit, Path(work), profile=args.profile, fast_tier=args.fast_tier, again=args.again))
            print({k: v for k, v in runs[-1].items() if k != "per_test_cpu"}, flush=True)
    result = {
        "command": " ".join(["benchmarks/bench_suite_cost.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "fast_tier": args.fast_tier,
        "runs": runs,
    }
    profiled = [run for run in runs if "per_test_cpu" in run]
    if len(profiled) > 1:
        first, last = profiled[0], profiled[-1]
        result["compared"] = {"first": first["sha"], "last": last["sha"],
                              **compare_tests(first["per_test_cpu"], last["per_test_cpu"])}  # fmt: skip
    for run in runs:
        run.pop("per_test_cpu", None)
    write_pair(result, markdown(result), args.out, overwrite=args.overwrite)
    print(markdown(result))


if __name__ == "__main__":
    main()
