"""Measuring a run: peak memory of a process tree (psutil polling plus the kernel's
high-water marks), the machine, disk use. Shared by ``python -m benchmarks`` and the benchmark scripts."""

from __future__ import annotations

import os
import platform
import threading
import time
from pathlib import Path

import numpy as np
import psutil

MB = 1024 * 1024
POLL_SECONDS = 0.1


def _status_kb(pid: int) -> dict:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of ``pid`` in kB (from /proc/PID/status)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(rest.split()[0])
    return out


def _pss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _role(proc: psutil.Process, root_pid: int, root_role: str) -> str:
    if proc.pid == root_pid:
        return root_role
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return "?"
    if "resource_tracker" in cmd:
        return "multiprocessing resource tracker"
    if "spawn_main" in cmd or "multiprocessing-fork" in cmd or "forkserver" in cmd:
        return "dask worker"
    return "child: " + cmd[:80]


class TreeWatcher:
    """Polls a process and all its descendants until stopped; keeps per-process and summed peaks."""

    def __init__(self, pid: int, root_role: str, interval: float = POLL_SECONDS):
        self.pid = pid
        self.root_role = root_role
        self.interval = interval
        self.procs: dict[int, dict] = {}
        self.peak_sum_rss_kb = 0
        self.peak_sum_pss_kb = 0
        self.peak_sum_anon_kb = 0
        self.peak_processes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        try:
            root = psutil.Process(self.pid)
            tree = [root] + root.children(recursive=True)
        except psutil.Error:
            return
        sum_rss = sum_pss = sum_anon = alive = 0
        for proc in tree:
            try:
                st = _status_kb(proc.pid)
            except (OSError, ValueError):
                continue  # exited, or a zombie without memory lines
            if "VmRSS" not in st:
                continue
            info = self.procs.get(proc.pid)
            if info is None:
                info = self.procs[proc.pid] = {
                    "pid": proc.pid,
                    "role": _role(proc, self.pid, self.root_role),
                    "peak_rss_kb": 0,
                    "hwm_kb": 0,
                    "peak_anon_kb": 0,
                    "peak_file_kb": 0,
                }
            info["peak_rss_kb"] = max(info["peak_rss_kb"], st["VmRSS"])
            info["hwm_kb"] = max(info["hwm_kb"], st.get("VmHWM", 0))
            info["peak_anon_kb"] = max(info["peak_anon_kb"], st.get("RssAnon", 0))
            info["peak_file_kb"] = max(info["peak_file_kb"], st.get("RssFile", 0))
            pss = _pss_kb(proc.pid)
            sum_rss += st["VmRSS"]
            sum_anon += st.get("RssAnon", 0)
            sum_pss += pss if pss is not None else st["VmRSS"]
            alive += 1
        self.peak_sum_rss_kb = max(self.peak_sum_rss_kb, sum_rss)
        self.peak_sum_pss_kb = max(self.peak_sum_pss_kb, sum_pss)
        self.peak_sum_anon_kb = max(self.peak_sum_anon_kb, sum_anon)
        self.peak_processes = max(self.peak_processes, alive)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.interval)


def tree_memory(watch: TreeWatcher) -> dict:
    """Summary of a finished watch: the largest process and the summed peaks, in MB."""
    procs = sorted(watch.procs.values(), key=lambda p: -max(p["peak_rss_kb"], p["hwm_kb"]))
    per_process = [
        {"pid": p["pid"], "role": p["role"], "peak_rss_mb": round(max(p["peak_rss_kb"], p["hwm_kb"]) / 1024, 1)}
        for p in procs
    ]
    return {
        "max_process_peak_rss_mb": max((p["peak_rss_mb"] for p in per_process), default=0.0),
        "peak_sum_rss_mb": round(watch.peak_sum_rss_kb / 1024, 1),
        "per_process": per_process,
    }


def disk_usage(path: Path) -> dict:
    """Allocated bytes (du) and apparent bytes of a file or directory tree."""
    allocated = apparent = files = 0
    paths = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for p in paths:
        st = p.stat()
        allocated += st.st_blocks * 512
        apparent += st.st_size
        files += 1
    return {"disk_mb": round(allocated / MB, 1), "apparent_mb": round(apparent / MB, 1), "files": files}


def reset_peak_rss() -> None:
    """Start this process's peak resident set (VmHWM) afresh from its current one."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: reset VmHWM to the current RSS
    except OSError:
        pass


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM) in MB. Not getrusage's ru_maxrss: Linux
    carries that over from the parent across fork and exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def machine_info() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import dask
    import distributed
    import zarr

    return {
        "cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "cpu_model": model,
        "ram_total_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "zarr": zarr.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
    }


def dish_pass_flops(n: int, d: int, r: int) -> int:
    """FLOPs of one DisH data pass: X C and B^T X, 2 n d r each (the ADMM steps on d x r
    matrices and the mean pass are negligible beside them)."""
    return 4 * n * d * r


def gemm_rate(d: int, r: int) -> float:
    """FLOP/s of one thread's float32 (rows x d) @ (d x r), the projection's shape: the rate
    compute floors divide a stage's FLOPs by."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    A = rng.standard_normal((8192, d)).astype(np.float32)
    B = rng.standard_normal((d, r)).astype(np.float32)
    with threadpool_limits(1):
        A @ B
        best = float("inf")
        for _ in range(20):
            started = time.perf_counter()
            A @ B
            best = min(best, time.perf_counter() - started)
    return 2 * A.shape[0] * d * r / best
