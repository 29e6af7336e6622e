"""Does an index ever make `dhash search` slower than the plain scan? Whole commands, timed.

For each --sizes entry (sift-synth rows, or fashion-mnist: its 70,000 images, the real-data
row beside the synthetic ones; 64-bit ITQ codes): `dhash search` of --queries queries for the
top --k, run as a user runs it (its own local cluster, start-up and output included) three
ways: the linear scan (no --index), through a multi-index (`dhash index --kind mih`, whose
search times a sample of the queries both ways and runs the faster one), and through an
inverted file (`dhash index --kind ivf`, --ivf-lists lists or dhash's default, default
nprobe). Each command runs
--repeats times, alternating, and the fastest run counts (a busy machine slows a run, it
never speeds one up). Wall seconds and the CPU seconds of the whole process tree are kept.

The multi-index must give the scan's distances exactly; the inverted file's recall of the
scan's top-k (ties count as found) is reported beside its time.

Everything a size needs is made under --work when missing (dataset, split, model, codes,
both indexes) and kept for a re-run; their build times are reported, not counted.

    .venv/bin/python benchmarks/bench_index_vs_scan.py --sizes 2000000,10000000,fashion-mnist \\
        --ivf-lists 0,4096,0 --work /work/bigdata/index_vs_scan --out benchmarks/results/index_vs_scan_64b

(dhash's default at 10M, 4 sqrt(n) = 12,649 lists, takes about 40 minutes to build on 2 cores.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harness.measure import machine_info  # noqa: E402 - after the sys.path entry above

DHASH = str(Path(sys.executable).with_name("dhash"))
REAL_DATA = "fashion-mnist"  # a --sizes entry: its 70,000 images (dhash ingest's built-in source) instead of sift-synth


def size_label(n: str) -> str:
    return "Fashion-MNIST, 70,000" if n == REAL_DATA else f"{int(n):,}"


def run(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one dhash command; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([DHASH, *args, "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"dhash {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def prepare(n: str, lists: int, args, work: Path) -> tuple[dict, dict]:
    """Paths of the dataset, model, codes and indexes at size n (made when missing), and the
    seconds each step took when it ran now."""
    from dask_hashcodes import workflows

    paths = {
        "data": work / ("fashion-mnist.zarr" if n == REAL_DATA else f"sift{n}.zarr"),
        "model": work / f"itq{n}.model",
        "codes": work / f"codes{n}.zarr",
        "mih": work / f"mih{n}",
        "ivf": work / f"ivf{n}",
    }
    steps = {}
    if not paths["data"].exists():
        if n == REAL_DATA:
            steps["ingest"] = run(["ingest", REAL_DATA, "--out", str(paths["data"])])[0]
        else:
            steps["synth"] = run(
                ["synth", "sift", "--n", str(n), "--seed", str(args.seed), "--out", str(paths["data"])]
            )[0]
        workflows.split(str(paths["data"]), queries=args.queries, seed=args.seed, name="bench")
    if not paths["model"].exists():
        steps["train"] = run(["train", "--dataset", str(paths["data"]), "--split", "bench", "--method", "itq",
                              "--bits", str(args.bits), "--seed", str(args.seed), "--out", str(paths["model"])])[0]  # fmt: skip
    if not paths["codes"].exists():
        steps["encode"] = run(["encode", "--dataset", str(paths["data"]), "--model", str(paths["model"]),
                               "--out", str(paths["codes"])])[0]  # fmt: skip
    for kind in ("mih", "ivf"):
        if not paths[kind].exists():
            features = ["--dataset", str(paths["data"])] if kind == "ivf" else []  # what the lists cluster
            if kind == "ivf" and lists:
                features += ["--lists", str(lists)]
            steps[f"index_{kind}"] = run(["index", "--kind", kind, "--codes", str(paths["codes"]), *features,
                                          "--out", str(paths[kind])])[0]  # fmt: skip
    return paths, steps


def searches(paths: dict, args, work: Path) -> dict:
    """The three searches, --repeats times each, alternating: fastest wall and its CPU."""
    common = ["search", "--dataset", str(paths["data"]), "--split", "bench", "--model", str(paths["model"]),
              "--codes", str(paths["codes"]), "--k", str(args.k), "--overwrite"]  # fmt: skip
    ways = {"scan": [], "mih": ["--index", str(paths["mih"])], "ivf": ["--index", str(paths["ivf"])]}
    timings: dict[str, list] = {way: [] for way in ways}
    for _ in range(args.repeats):
        for way, extra in ways.items():
            timings[way].append(run([*common, *extra, "--out", str(work / f"found_{way}.parquet")]))
    return {way: {"wall_seconds": min(t)[0], "cpu_seconds": min(t)[1], "runs": t} for way, t in timings.items()}


def agreement(work: Path, k: int) -> dict:
    """The multi-index's and the inverted file's answers against the scan's."""
    import pyarrow.parquet as pq

    def table(way):
        t = pq.read_table(work / f"found_{way}.parquet").to_pydict()
        by_query: dict = {}
        for q, d in zip(t["query_id"], t["hamming"]):
            by_query.setdefault(q, []).append(d)
        return {q: sorted(v) for q, v in by_query.items()}

    scan, mih, ivf = table("scan"), table("mih"), table("ivf")
    found = sum(int(np.sum(np.asarray(ivf.get(q, [])) <= d[-1])) if d else 0 for q, d in scan.items())
    return {
        "mih_identical_distances": mih == scan,
        "ivf_recall_of_scan_topk": min(found, len(scan) * k) / (len(scan) * k),
    }


def _median_wall(search: dict) -> float:
    return float(np.median([wall for wall, _ in search["runs"]]))


def markdown(result: dict) -> str:
    p = result["params"]
    lines = [
        f"# `dhash search` through an index against the plain scan, whole commands ({p['queries']} queries, "
        f"top-{p['k']}, {p['bits']}-bit ITQ codes of sift-synth{' and Fashion-MNIST' if REAL_DATA in p['sizes'] else ''})",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores; each command starts its "
        "own local cluster (the default workers and threads), as a user's does",
        f"- seconds: the fastest and the median of {p['repeats']} runs of each command, the three run in turn; CPU: "
        "user + system seconds of the command's whole process tree in the fastest run",
        "",
        "| codes | search | wall s | median wall s | CPU s | / scan (wall) | / scan (median) | answer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, size in result["sizes"].items():
        scan = size["searches"]["scan"]["wall_seconds"]
        scan_median = _median_wall(size["searches"]["scan"])
        answers = {
            "scan": "exact",
            "mih": "identical distances" if size["agreement"]["mih_identical_distances"] else "DIFFERENT distances",
            "ivf": f"recall {size['agreement']['ivf_recall_of_scan_topk']:.4f} of the scan's top-{p['k']}",
        }
        names = {"scan": "linear scan", "mih": "multi-index",
                 "ivf": f"inverted file ({size['ivf_lists']:,} lists in {size.get('ivf_quantiser_dims', 128)} "
                        "dims, default nprobe)"}  # fmt: skip
        for way, s in size["searches"].items():
            lines.append(
                f"| {size_label(n)} | {names[way]} | {s['wall_seconds']:.2f} | {_median_wall(s):.2f} | "
                f"{s['cpu_seconds']:.1f} | {s['wall_seconds'] / scan:.3f} | {_median_wall(s) / scan_median:.3f} | "
                f"{answers[way]} |"
            )
    lines.append("")
    for n, size in result["sizes"].items():
        if size["build_seconds"]:
            built = ", ".join(f"{k} {v:.1f} s" for k, v in size["build_seconds"].items())
            lines.append(f"- built for {size_label(n)} codes in this run (not counted above): {built}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes",
        default="2000000,10000000",
        help=f"database rows of sift-synth, comma-separated; {REAL_DATA} for that real data set",
    )
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--bits", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--ivf-lists", default="", help="per size, comma-separated: the inverted file's lists (0: dhash's default)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", required=True, help="datasets, models, codes and indexes (kept for a re-run)")
    ap.add_argument("--out", required=True, help="result path without suffix (.json and .md are written)")
    args = ap.parse_args(argv)
    sizes = {}
    counts = [v if v == REAL_DATA else str(int(v)) for v in args.sizes.split(",")]
    lists = [int(v) for v in args.ivf_lists.split(",")] if args.ivf_lists else [0] * len(counts)
    if len(lists) != len(counts):
        raise SystemExit(f"--ivf-lists gives {len(lists)} values for {len(counts)} sizes")
    for n, n_lists in zip(counts, lists):
        work = Path(args.work).resolve() / str(n)
        work.mkdir(parents=True, exist_ok=True)
        paths, steps = prepare(n, n_lists, args, work)
        timed = searches(paths, args, work)
        from dask_hashcodes.storage.codes import open_codes
        from dask_hashcodes.storage.ivf_index import open_ivf

        built = open_ivf(str(paths["ivf"]), open_codes(str(paths["codes"])))
        sizes[str(n)] = {"build_seconds": steps, "searches": timed, "agreement": agreement(work, args.k),
                         "ivf_lists": int(built.n_lists), "ivf_quantiser_dims": int(built.centroids.shape[1])}  # fmt: skip
        print(n, json.dumps(sizes[str(n)]["agreement"]), {w: round(s["wall_seconds"], 1) for w, s in timed.items()},
              flush=True)  # fmt: skip
    result = {
        "command": " ".join(["benchmarks/bench_index_vs_scan.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "params": {k: getattr(args, k) for k in ("sizes", "queries", "k", "bits", "repeats", "seed")},
        "sizes": sizes,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
