#!/usr/bin/env python
"""Peak memory of `dhash synth sift` (10M rows) and `dhash ingest` (a 1 GiB .bvecs file).

Acceptance: "`dhash synth sift --n 10000000` then `dhash ingest` of a generated 1 GB
`.bvecs` file both run with peak RSS under 2 GB".

Each step runs as a subprocess (``python -m dask_hashcodes.cli ...``, exactly what ``dhash`` runs) and
the whole process tree is watched every ~0.1 s with psutil: the client process, which also
hosts the LocalCluster's scheduler and nannies, and every descendant (the Dask worker
processes and multiprocessing's resource tracker). Per process we keep the largest RSS seen
and the kernel's own high-water mark (VmHWM in /proc/PID/status, exact between polls);
over the tree we keep the peak of the summed RSS (and of summed PSS, which counts shared
pages once). ``os.wait4`` gives a third, exact figure: the largest peak RSS of the client
and every descendant it reaped.

The .bvecs input is written block by block from ``dask_hashcodes.data.synth.sift_rows`` (never
held in memory), and a few random ingested rows are compared with the file. A bare
``python -c "import numpy, zarr, dask, distributed, pipeline"`` gives the import floor.

Writes ``--out`` (JSON) and a Markdown table beside it (same name, .md). The work
directory is deleted at the end (it needs about 3 GB free at the default sizes).

    .venv/bin/python benchmarks/bench_memory.py            # full size: 10M rows, 1 GiB .bvecs
    .venv/bin/python benchmarks/bench_memory.py --n 200000 --bvecs-gb 0.05 --out /tmp/m.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout even if the package is not installed

from benchmarks.harness.measure import TreeWatcher, disk_usage, machine_info  # noqa: E402

MB = 1024 * 1024
LIMIT_MB = 2048
D = 128
POLL_SECONDS = 0.1
IMPORT_FLOOR_CODE = "import numpy, zarr, dask, distributed, pipeline"


# ------------------------------------------------------------------- process tree watch


def run_measured(cmd: list[str], *, cwd: Path, log: Path, root_role: str = "main process") -> dict:
    """Run ``cmd`` to completion while watching its process tree; returns the memory figures."""
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(log, "wb") as out:
        popen = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        try:
            with TreeWatcher(popen.pid, root_role) as watch:
                # wait4 (not popen.wait) so we also get the kernel's rusage of the child:
                # ru_maxrss = max peak RSS of the child and all descendants it reaped (kB)
                _, status, usage = os.wait4(popen.pid, 0)
        except BaseException:
            _kill_tree(popen.pid)
            raise
        popen.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    procs = sorted(watch.procs.values(), key=lambda p: -max(p["peak_rss_kb"], p["hwm_kb"]))
    per_process = [
        {
            "pid": p["pid"],
            "role": p["role"],
            "peak_rss_mb": round(max(p["peak_rss_kb"], p["hwm_kb"]) / 1024, 1),
            "peak_rss_polled_mb": round(p["peak_rss_kb"] / 1024, 1),
            "peak_anon_mb": round(p["peak_anon_kb"] / 1024, 1),
            "peak_file_backed_mb": round(p["peak_file_kb"] / 1024, 1),
        }
        for p in procs
    ]
    polled_max = max((p["peak_rss_mb"] for p in per_process), default=0.0)
    return {
        "returncode": popen.returncode,
        "wall_seconds": round(wall, 2),
        # 1-minute load average before and after: times (not memory) are skewed by other work on the machine
        "load_avg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "max_process_peak_rss_mb": round(max(polled_max, usage.ru_maxrss / 1024), 1),
        "max_process_peak_rss_wait4_mb": round(usage.ru_maxrss / 1024, 1),
        "peak_sum_rss_mb": round(watch.peak_sum_rss_kb / 1024, 1),
        "peak_sum_pss_mb": round(watch.peak_sum_pss_kb / 1024, 1),
        "peak_sum_anon_mb": round(watch.peak_sum_anon_kb / 1024, 1),
        "processes_seen": len(per_process),
        "peak_processes_alive": watch.peak_processes,
        "samples": watch.samples,
        "per_process": per_process,
    }


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        tree = root.children(recursive=True) + [root]
    except psutil.Error:
        return
    for proc in tree:
        try:
            proc.kill()
        except psutil.Error:
            pass


# ------------------------------------------------------------------------- helpers


def write_bvecs(path: Path, n: int, seed: int, block_rows: int = 262_144) -> dict:
    """``n`` sift-synth rows (seed ``seed``) as a .bvecs file, one block of records at a time."""
    from dask_hashcodes.data.synth import sift_rows
    from dask_hashcodes.data.texmex import record_dtype

    record = record_dtype("bvecs", D)
    started = time.perf_counter()
    with open(path, "wb") as f:
        for start in range(0, n, block_rows):
            stop = min(n, start + block_rows)
            records = np.empty(stop - start, dtype=record)
            records["dim"] = D
            records["vec"] = sift_rows(seed, start, stop)
            records.tofile(f)
    secs = time.perf_counter() - started
    assert path.stat().st_size == n * record.itemsize, "bvecs file has the wrong size"
    return {
        "rows": n,
        "record_bytes": record.itemsize,
        "seconds": round(secs, 2),
        "bytes": path.stat().st_size,
        "size_mb": round(path.stat().st_size / MB, 1),
    }


def check_ingested(dataset: Path, bvecs: Path, n: int, rng: np.random.Generator, k: int = 32) -> dict:
    from dask_hashcodes.data.texmex import record_dtype
    from dask_hashcodes.storage.datasets import open_dataset

    ds = open_dataset(dataset)
    assert (ds.n, ds.d, ds.dtype) == (n, D, np.uint8), f"ingested dataset is {ds!r}"
    records = np.memmap(bvecs, dtype=record_dtype("bvecs", D), mode="r", shape=(n,))
    rows = np.unique(np.concatenate([[0, n - 1], rng.integers(0, n, k)]))
    for i in rows:
        i = int(i)
        if not np.array_equal(ds.features[i], records["vec"][i]):
            raise AssertionError(f"ingested row {i} differs from the .bvecs file")
    del records
    return {"rows_checked": len(rows), "equal": True, "chunk_rows": int(ds.chunk_rows)}


def check_synth(dataset: Path, n: int, seed: int, rng: np.random.Generator, k: int = 8) -> dict:
    from dask_hashcodes.data.synth import sift_rows
    from dask_hashcodes.storage.datasets import open_dataset

    ds = open_dataset(dataset)
    assert (ds.n, ds.d, ds.dtype) == (n, D, np.uint8), f"synth dataset is {ds!r}"
    rows = np.unique(np.concatenate([[0, n - 1], rng.integers(0, n, k)]))
    for i in rows:
        i = int(i)
        if not np.array_equal(ds.features[i], sift_rows(seed, i, i + 1)[0]):
            raise AssertionError(f"synth row {i} differs from sift_rows(seed={seed})")
    return {"rows_checked": len(rows), "equal_to_sift_rows": True, "chunk_rows": int(ds.chunk_rows)}


def fmt_cmd(cmd: list[str]) -> str:
    return shlex.join(cmd)


def _repo_relative(path: str) -> str:
    """``path`` relative to the repository root when it lies inside it (without resolving symlinks)."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(REPO))
    except ValueError:
        return str(absolute)


# ---------------------------------------------------------------------------- report


def markdown(result: dict) -> str:
    s, i = result["synth"], result["ingest"]
    m = result["machine"]
    lim = result["limit_mb"]
    floor = result["import_floor_rss_mb"]

    def proc_line(step):
        return ", ".join(f"{p['role']} {p['peak_rss_mb']:.0f}" for p in step["per_process"])

    lines = [
        "# Peak memory: `dhash synth sift` and `dhash ingest`",
        "",
        f"Acceptance: both steps run with peak RSS under {lim} MB (2 GB). "
        f"Result: **{'PASS' if result['pass'] else 'FAIL'}** "
        f"(every process and the summed tree, {result['date']}).",
        "",
        f"Machine: {m['cores']} cores ({m['cpu_model']}), {m['ram_total_gb']} GiB RAM; "
        f"Python {m['python']}, numpy {m['numpy']}, zarr {m['zarr']}, dask {m['dask']}.",
        "",
        "| step | rows | data size (MB, raw uint8) | wall (s) | rows/s | max 1-process peak RSS (MB) | peak tree RSS sum (MB) | peak tree PSS sum (MB) | peak RSS / data size | under limit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for name, step, size in (("synth sift", s, s["raw_data_mb"]), ("ingest .bvecs", i, i["input_file_mb"])):
        lines.append(
            f"| {name} | {step['rows']:,} | {size:,.0f} | {step['wall_seconds']:.1f} | {step['rows_per_second']:,.0f} "
            f"| {step['max_process_peak_rss_mb']:,.0f} | {step['peak_sum_rss_mb']:,.0f} | {step['peak_sum_pss_mb']:,.0f} "
            f"| {step['max_process_peak_rss_mb'] / size:.2f} | {'yes' if step['pass'] else 'NO'} |"
        )
    lines.append(f'| import floor (`python -c "{IMPORT_FLOOR_CODE}"`) | - | - | - | - | {floor:,.0f} | - | - | - | - |')
    lines += [
        "",
        f"- 1-minute load average before/after: synth {s['load_avg_1min_before_after']}, ingest "
        f"{i['load_avg_1min_before_after']} on {m['cores']} cores; a load above the core count means other work "
        f"shared the CPUs and the times are pessimistic (memory figures are not affected).",
        f"- wall and rows/s are for the whole command (interpreter, imports and, for synth, starting the "
        f"LocalCluster); synth's own timing of the generation: {s.get('generate_seconds_reported', float('nan')):.1f} s, "
        f"{s.get('generate_rows_per_second_reported', 0):,} rows/s.",
        f"- synth per process (MB): {proc_line(s)}.",
        f"- ingest per process (MB): {proc_line(i)}; of its peak, "
        f"{i['per_process'][0]['peak_file_backed_mb']:,.0f} MB is file-backed (page-cache pages mapped by the "
        f"process) and {i['per_process'][0]['peak_anon_mb']:,.0f} MB anonymous (the reader reads blocks with plain "
        f"file reads, so this does not grow with the input size).",
        f"- synth dataset on disk: {s['dataset_disk']['disk_mb']:,.0f} MB ({s['dataset_disk']['files']} files); "
        f"ingested dataset on disk: {i['dataset_disk']['disk_mb']:,.0f} MB; "
        f".bvecs input: {i['input_file_mb']:,.0f} MB ({i['rows']:,} records of 132 bytes).",
        "- Peak RSS per process is the larger of the 0.1 s psutil polls, the kernel's VmHWM and "
        "`wait4` ru_maxrss; the tree sum counts shared pages (libraries) once per process, PSS splits them.",
        "",
        "Reproduce (about 3 GB free disk in /tmp):",
        "",
        "```",
        result["command"],
        "```",
        "",
        "Steps run:",
        "",
        "```",
        s["command"],
        i["command"],
        "```",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="sift-synth rows (default 10,000,000)")
    ap.add_argument("--bvecs-gb", type=float, default=1.0, help="size of the generated .bvecs in GiB (default 1.0)")
    ap.add_argument("--workdir", help="scratch directory (default: a new temp dir under /tmp, deleted at the end)")
    ap.add_argument(
        "--out",
        default=str(REPO / "benchmarks" / "results" / "memory.json"),
        help="result JSON (a .md table is written beside it)",
    )
    ap.add_argument("--workers", type=int, default=2, help="synth: local cluster worker processes (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="sift-synth seed of the synth step (the .bvecs uses seed+1)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)

    # as run from the repository root, so the line can be pasted there
    command = fmt_cmd([_repo_relative(sys.executable), _repo_relative(sys.argv[0])] + sys.argv[1:])
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="dhash-bench-memory-", dir="/tmp"))
    bvecs_rows = int(args.bvecs_gb * 2**30) // (4 + D)
    need = (args.n * D + 2 * bvecs_rows * D) * 1.15
    free = shutil.disk_usage(workdir).free
    if free < need:
        print(
            f"error: {workdir} has {free / 2**30:.1f} GiB free; this run needs about {need / 2**30:.1f} GiB",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    rng = np.random.default_rng(12345)
    print(f"workdir {workdir} ({free / 2**30:.0f} GiB free)", file=sys.stderr)

    try:
        # 0. import floor
        floor = run_measured([py, "-c", IMPORT_FLOOR_CODE], cwd=REPO, log=workdir / "import.log")
        print(f"import floor: {floor['max_process_peak_rss_mb']:.0f} MB", file=sys.stderr)

        # 1. synth
        synth_out = workdir / "synth.zarr"
        synth_cmd = [
            py,
            "-m",
            "dask_hashcodes.cli",
            "synth",
            "sift",
            "--n",
            str(args.n),
            "--seed",
            str(args.seed),
            "--out",
            str(synth_out),
            "--workers",
            str(args.workers),
            "--threads",
            "1",
            "--quiet",
        ]
        print(f"synth: {fmt_cmd(synth_cmd)}", file=sys.stderr)
        synth = run_measured(synth_cmd, cwd=REPO, log=workdir / "synth.log", root_role="client (+ scheduler, nannies)")
        synth_log = (workdir / "synth.log").read_text()
        if synth["returncode"] != 0:
            raise RuntimeError(f"synth failed ({synth['returncode']}):\n{synth_log[-3000:]}")
        synth.update(
            {
                "command": fmt_cmd(synth_cmd),
                "rows": args.n,
                "workers": args.workers,
                "threads": 1,
                "rows_per_second": round(args.n / synth["wall_seconds"]),
                "raw_data_mb": round(args.n * D / MB, 1),
                "dataset_disk": disk_usage(synth_out),
                "stdout": synth_log.strip()[-500:],
                "check": check_synth(synth_out, args.n, args.seed, rng),
            }
        )
        # the command's own timing of the generation (without interpreter and cluster start-up)
        found = re.search(r"in ([0-9.]+)s \(([0-9,]+) rows/s\)", synth_log)
        if found:
            synth["generate_seconds_reported"] = float(found.group(1))
            synth["generate_rows_per_second_reported"] = int(found.group(2).replace(",", ""))
        print(
            f"synth: {synth['wall_seconds']:.1f}s, max process {synth['max_process_peak_rss_mb']:.0f} MB, "
            f"tree sum {synth['peak_sum_rss_mb']:.0f} MB",
            file=sys.stderr,
        )
        shutil.rmtree(synth_out)  # free the disk before the next step

        # 2. a ~1 GiB .bvecs, written block by block, then ingest
        bvecs = workdir / "big.bvecs"
        gen = write_bvecs(bvecs, bvecs_rows, seed=args.seed + 1)
        gen["generator_process_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(f"bvecs: {gen['size_mb']:.0f} MB in {gen['seconds']:.1f}s", file=sys.stderr)
        ingest_out = workdir / "ingested.zarr"
        ingest_cmd = [py, "-m", "dask_hashcodes.cli", "ingest", str(bvecs), "--out", str(ingest_out), "--quiet"]
        print(f"ingest: {fmt_cmd(ingest_cmd)}", file=sys.stderr)
        ingest = run_measured(ingest_cmd, cwd=REPO, log=workdir / "ingest.log", root_role="ingest process")
        ingest_log = (workdir / "ingest.log").read_text()
        if ingest["returncode"] != 0:
            raise RuntimeError(f"ingest failed ({ingest['returncode']}):\n{ingest_log[-3000:]}")
        ingest.update(
            {
                "command": fmt_cmd(ingest_cmd),
                "rows": bvecs_rows,
                "rows_per_second": round(bvecs_rows / ingest["wall_seconds"]),
                "input_file_mb": gen["size_mb"],
                "input_generation": gen,
                "dataset_disk": disk_usage(ingest_out),
                "stdout": ingest_log.strip()[-500:],
                "check": check_ingested(ingest_out, bvecs, bvecs_rows, rng),
            }
        )
        ingest["peak_rss_over_input_size"] = round(ingest["max_process_peak_rss_mb"] / gen["size_mb"], 3)
        print(
            f"ingest: {ingest['wall_seconds']:.1f}s, peak {ingest['max_process_peak_rss_mb']:.0f} MB", file=sys.stderr
        )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    for step in (synth, ingest):
        step["pass"] = bool(step["max_process_peak_rss_mb"] < LIMIT_MB and step["peak_sum_rss_mb"] < LIMIT_MB)
    synth["peak_rss_over_data_size"] = round(synth["max_process_peak_rss_mb"] / synth["raw_data_mb"], 3)
    result = {
        "benchmark": "memory",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine_info(),
        "limit_mb": LIMIT_MB,
        "pass_rule": "every process's peak RSS and the peak of the summed RSS of the process tree are below limit_mb, for both steps",
        "import_floor_rss_mb": floor["max_process_peak_rss_mb"],
        "import_floor_command": fmt_cmd([py, "-c", IMPORT_FLOOR_CODE]),
        "synth": synth,
        "ingest": ingest,
        "pass": bool(synth["pass"] and ingest["pass"]),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(f"{'PASS' if result['pass'] else 'FAIL'}: wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
