"""A pytest plugin that measures what each test costs in CPU, not only in wall time.

``--cpu-times FILE`` writes one JSON line per test: its node id, its wall seconds and the CPU
seconds (user + system) spent by the whole process tree during its setup, call and teardown
(pytest itself, the session cluster's worker processes, and every process a test started
and waited for). A session fixture's cost lands on the first test that needs it, so the
file also shows which fixtures are expensive. Sorting the lines by ``cpu`` is how the suite's
heaviest tests are found; ``--durations`` says only how long each one waited.
"""

from __future__ import annotations

import json
import time

import psutil
import pytest


def pytest_addoption(parser):
    parser.addoption("--cpu-times", metavar="FILE", help="write each test's wall and process-tree CPU seconds to FILE")


def tree_cpu_seconds() -> float:
    """User + system seconds of this process, the children it has waited for, and every
    live descendant (with the children each of those has waited for)."""
    total = 0.0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            t = process.cpu_times()
        except psutil.Error:  # ended meanwhile: its time is in its parent's children figures
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = item.config.getoption("--cpu-times")
    if not path:
        yield
        return
    cpu, wall = tree_cpu_seconds(), time.perf_counter()
    yield
    record = {"test": item.nodeid, "wall": time.perf_counter() - wall, "cpu": tree_cpu_seconds() - cpu}
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")
