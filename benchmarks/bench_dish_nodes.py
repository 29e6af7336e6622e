"""DisH with nodes holding their rows, against streaming them, per iteration, beside the floors.

DisH (ADMM, --nodes nodes, random topology, --bits bits, tol 0) on Fashion-MNIST (all 70,000
rows, 784 uint8 features, stored in chunks), for each partition in --partitions, on one local
cluster of 2 worker processes x 1 thread:

* held: this checkout's default, each node's rows read once and kept on its worker;
* streamed: the same code with the dask setting ``dhash.resident-memory-fraction`` at 0, so
  that every iteration reads the nodes' rows from storage (what every fit did before);
* --baseline-tree DIR: another checkout (e.g. an older commit) run the same way in a child
  process, for the ratio against it.

Seconds per iteration = (fit with --iters-long iterations - fit with --iters-short) divided
by the difference: start-up and the mean pass cancel, and the ADMM steps are included. Every
run's model id is recorded: held, streamed and the baseline must learn the same model.

Floors of one iteration's data pass, measured in the same run:

* compute floor: its FLOPs, 4 n d r (the projection X C and the Gram B^T X, counted as
  GEMMs), divided by the float32 GEMM rate of one thread on this machine (measured here on
  the same shapes) times the worker threads;
* plain-pass floor: one pass of the cluster that reads every stored chunk and computes
  X C, nothing else;
* math: the iteration's own kernels (the Gram pass over the nodes' rows in memory and every
  node's ADMM steps) in one process on one BLAS thread, no Dask, divided by the 2 workers;
* Dask floor: the iteration's dependent task rounds with empty tasks.

    .venv/bin/python benchmarks/bench_dish_nodes.py --baseline-tree /tmp/a6e40e2 \\
        --out benchmarks/results/dish_nodes_fmnist.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harness.measure import (  # noqa: E402 - after the sys.path entry above
    dish_pass_flops,
    gemm_rate,
    machine_info,
)


def _package():
    """The library under its current name, or under the name older checkouts used."""
    try:
        import dask_hashcodes

        return dask_hashcodes
    except ImportError:  # a checkout from before the rename
        import dhash

        return dhash


def _fashion_mnist(lib):
    load = getattr(lib.workflows, "load_dataset", None) or lib.workflows.dataset  # the older name
    return load("fashion-mnist")


def fit_seconds(lib, partition: str, iters: int, args, *, streamed: bool) -> tuple[float, str]:
    """(seconds, model id) of one DisH fit on the cluster the process is connected to."""
    import dask

    ds = _fashion_mnist(lib)
    X, y = ds.features_dask(), np.asarray(ds.labels)
    model = lib.DisH(args.bits, nodes=args.nodes, partition=partition, max_iter=iters, tol=0.0,
                     consensus_tol=0.0, random_state=0)  # fmt: skip
    settings = {"dhash.resident-memory-fraction": 0.0} if streamed else {}
    with dask.config.set(settings):
        started = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - started
    return seconds, model.model_id


def per_iteration(lib, partition: str, args, *, streamed: bool) -> dict:
    """Seconds per iteration, the median of --repeats (long - short) pairs. A warm-up fit
    comes first (the workers import, compile and cache what every fit needs, which would
    otherwise inflate the first short fit and flatter the difference), and after every fit
    the cluster is left holding nothing of it (a later fit must not find the rows an earlier
    one read still in memory)."""
    fit_seconds(lib, partition, args.iters_short, args, streamed=streamed)
    settle()
    pairs, model_id = [], None
    for _ in range(args.repeats):
        short, _ = fit_seconds(lib, partition, args.iters_short, args, streamed=streamed)
        settle()
        long, model_id = fit_seconds(lib, partition, args.iters_long, args, streamed=streamed)
        settle()
        pairs.append((short, long))
    per = sorted((long - short) / (args.iters_long - args.iters_short) for short, long in pairs)
    return {
        "seconds_per_iteration": per[len(per) // 2],
        "fit_seconds": [{str(args.iters_short): short, str(args.iters_long): long} for short, long in pairs],
        "model_id": model_id,
    }


def settle(timeout: float = 30.0) -> None:
    """Until the cluster holds no result of the fits before: they are released once collected."""
    import gc

    from distributed import get_client

    client = get_client()
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        if not client.who_has() or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def plain_pass_seconds(lib, r: int) -> float:
    """One cluster pass that reads every stored chunk and computes X C."""
    import dask

    X = _fashion_mnist(lib).features_dask()
    C = np.random.default_rng(0).standard_normal((X.shape[1], r)).astype(np.float32)
    total = X.map_blocks(lambda b: np.asarray(b, np.float32) @ C, chunks=(X.chunks[0], (r,)), dtype=np.float32).sum()
    started = time.perf_counter()
    dask.compute(total)
    return time.perf_counter() - started


# one iteration of this checkout: the pass (one task per worker), then one task per worker for
# each of the 5 default inner steps (the last multiplier step runs on the client)
TASK_ROUNDS = 6


def _passed_on(state, states):
    return state


def task_round_seconds(rounds: int, d: int, r: int, nodes: int) -> float:
    """Seconds of ``rounds`` dependent rounds of one empty task per worker, each reading the
    other workers' previous results (the nodes' d x r dictionaries and multipliers): what the
    ADMM exchanges of one iteration cost in Dask alone, without their math. Best of 5."""
    from distributed import get_client

    client = get_client()
    workers = sorted(client.scheduler_info()["workers"])
    per_worker = [np.zeros((d, r)) for _ in range(2 * nodes // len(workers))]
    best = float("inf")
    for _ in range(5):
        states = [client.scatter(per_worker, workers=[w]) for w in workers]
        started = time.perf_counter()
        for _ in range(rounds):
            states = [client.submit(_passed_on, states[g], states, workers=[w], allow_other_workers=False, pure=False)
                      for g, w in enumerate(workers)]  # fmt: skip
        client.gather(states)
        best = min(best, time.perf_counter() - started)
    return best


def math_seconds(lib, partition: str, args, inner_steps: int = 5) -> float:
    """Seconds of one iteration's math alone, per worker: the Gram pass over every node's
    rows (already in memory, as held) and the ADMM steps of every node (``inner_steps``
    dictionary and multiplier steps, random topology), run in this process on one BLAS
    thread with this checkout's kernels, divided by the 2 worker threads. Best of 3. This is
    what an iteration would cost with no Dask at all and the work split perfectly."""
    from threadpoolctl import threadpool_limits

    from dask_hashcodes.distributed.graph import reduction_fan_in
    from dask_hashcodes.hashing.dish_nodes import _loaded, _reduced_block, node_pieces, partition_rows
    from dask_hashcodes.hashing.dish_topology import build_topology
    from dask_hashcodes.kernels.dish import admm_round, random_orthonormal
    from dask_hashcodes.kernels.gram import gram_chunk
    from dask_hashcodes.kernels.stats import add

    ds = _fashion_mnist(lib)
    X, y = ds.features_dask(), np.asarray(ds.labels)
    node_rows = partition_rows(X, args.nodes, partition, 0, y)
    blocks = [_loaded(pieces) for pieces in node_pieces(X, node_rows)]
    mean = np.asarray(X.mean(axis=0).compute())
    rng = np.random.default_rng(0)
    C = [random_orthonormal(X.shape[1], args.bits, rng) for _ in range(args.nodes)]
    Lam = [np.zeros_like(c) for c in C]
    neighbours = build_topology("random", args.nodes, seed=0)
    fan_in = reduction_fan_in()

    def iteration():
        grams = [_reduced_block(pieces, gram_chunk, add, fan_in, mean, C[i]) for i, pieces in enumerate(blocks)]
        current, multipliers = list(C), list(Lam)
        for step in range(inner_steps + 1):
            flags = {"update_multiplier": step > 0, "update_dictionary": step < inner_steps}
            stepped = [admm_round(grams[i], multipliers[i], current[i], [current[j] for j in neighbours[i]], 1.0,
                                  **flags) for i in range(args.nodes)]  # fmt: skip
            multipliers, current = [m for m, _ in stepped], [c for _, c in stepped]

    best = float("inf")
    with threadpool_limits(1):
        iteration()  # compiles and warms what the kernels need
        for _ in range(3):
            started = time.perf_counter()
            iteration()
            best = min(best, time.perf_counter() - started)
    return best / 2


def measure(args, *, baseline: bool) -> dict:
    """Every partition's runs on a fresh local cluster (2 x 1)."""
    lib = _package()
    client = lib.connect(workers=2, threads=1, quiet=True)
    try:
        out = {"plain_pass_seconds": plain_pass_seconds(lib, args.bits), "runs": {}}
        if not baseline:  # the default inner steps (5): 5 rounds of exchanges, and the pass's own round
            out["task_rounds_seconds"] = task_round_seconds(TASK_ROUNDS, 784, args.bits, args.nodes)
            out["math_seconds"] = {p: math_seconds(lib, p, args) for p in args.partitions.split(",")}
        for partition in args.partitions.split(","):
            modes = {"baseline": per_iteration(lib, partition, args, streamed=False)} if baseline else {
                "held": per_iteration(lib, partition, args, streamed=False),
                "streamed": per_iteration(lib, partition, args, streamed=True),
            }  # fmt: skip
            out["runs"][partition] = modes
            print(partition, json.dumps(modes), flush=True)
    finally:
        lib.disconnect(client)
    return out


def baseline_child(args) -> dict:
    """The same measurement in another checkout, in a child process that imports it."""
    import tempfile

    tree = Path(args.baseline_tree).resolve()
    shim = Path(tempfile.mkdtemp(prefix="dhash-baseline-"))  # outside the results: it holds a data set
    if (tree / "pipeline" / "dask_hashcodes").is_dir():
        path = tree / "pipeline"
    else:  # before the rename the package directory was pipeline/, imported as dhash
        (shim / "dhash").symlink_to(tree / "pipeline")
        path = shim
    data = shim / "data"  # the checkout builds its own copy of the data set, in its own format
    env = {**os.environ, "PYTHONPATH": f"{path}{os.pathsep}{REPO}", "DHASH_DATA_DIR": str(data),
           "DASK_DHASH__DATA_DIR": str(data)}  # fmt: skip
    cmd = [sys.executable, __file__, "--child", *sys.argv[1:]]
    try:
        done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    finally:
        # the folder mkdtemp made for this run, holding only the symlink and the data set the
        # child wrote; rmtree removes a symlink itself, never what it points to
        shutil.rmtree(shim, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(result: dict) -> str:
    p, floors = result["params"], result["floors"]
    lines = [
        f"# DisH nodes holding their rows: Fashion-MNIST, {p['nodes']} nodes, {p['bits']} bits",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores; local cluster of 2 worker "
        "processes x 1 thread",
        f"- seconds per iteration: (fit of {p['iters_long']} iterations - fit of {p['iters_short']}) / "
        f"{p['iters_long'] - p['iters_short']}, the ADMM steps included; the median of {p.get('repeats', 1)} pairs, "
        "after a warm-up fit, the cluster emptied between fits",
        f"- compute floor of one data pass: 4 n d r = {floors['pass_flops'] / 1e9:.2f} GFLOP at "
        f"{floors['gemm_flops_per_thread'] / 1e9:.1f} GFLOP/s per thread x 2 threads = "
        f"{floors['compute_floor_seconds']:.3f} s; plain pass (read every chunk, X C): "
        f"{floors['plain_pass_seconds']:.3f} s",
        f"- Dask floor of one iteration's task rounds ({TASK_ROUNDS} dependent rounds of one empty task per worker, "
        f"each reading the other worker's dictionaries and multipliers: the pass's round and the {TASK_ROUNDS - 1} "
        f"ADMM exchanges of 5 inner steps, without their math): {floors['task_rounds_seconds']:.3f} s",
        "",
        "- math of one iteration: the Gram pass over the nodes' rows in memory and the ADMM steps of every "
        "node, in one process on one BLAS thread with no Dask, divided by the 2 worker threads: "
        + ", ".join(f"{p} {s:.3f} s" for p, s in floors.get("math_seconds_per_iteration", {}).items()),
        "",
        "| partition | run | s per iteration | / compute floor | / math | / plain pass | model id |",
        "|---|---|---|---|---|---|---|",
    ]
    for partition, modes in result["runs"].items():
        math = floors.get("math_seconds_per_iteration", {}).get(partition)
        for mode, run in modes.items():
            s = run["seconds_per_iteration"]
            lines.append(
                f"| {partition} | {mode} | {s:.3f} | {s / floors['compute_floor_seconds']:.1f} | "
                f"{f'{s / math:.1f}' if math else '-'} | {s / floors['plain_pass_seconds']:.2f} | `{run['model_id']}` |"
            )
    for partition, ratio in result.get("held_speedup", {}).items():
        lines.append("")
        lines.append(f"- {partition}: held is {ratio['vs_streamed']:.1f}x faster per iteration than streamed"
                     + (f", {ratio['vs_baseline']:.1f}x than the baseline" if "vs_baseline" in ratio else "")
                     + f"; same model: {ratio['same_model']}")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--partitions", default="contiguous,by-label")
    parser.add_argument("--iters-short", type=int, default=2)
    parser.add_argument("--iters-long", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3, help="(short, long) pairs; the median is reported")
    parser.add_argument("--baseline-tree", help="another checkout to run the same way (a child process)")
    parser.add_argument("--out", default="benchmarks/results/dish_nodes_fmnist.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args, baseline=True)))
        return
    measured = measure(args, baseline=False)
    runs = measured["runs"]
    if args.baseline_tree:
        base = baseline_child(args)
        for partition, modes in base["runs"].items():
            runs[partition]["baseline"] = modes["baseline"]
    d, n = 784, 70000
    flops = dish_pass_flops(n, d, args.bits)
    rate = gemm_rate(d, args.bits)
    speedup = {}
    for partition, modes in runs.items():
        held = modes["held"]["seconds_per_iteration"]
        entry = {"vs_streamed": modes["streamed"]["seconds_per_iteration"] / held}
        if "baseline" in modes:
            entry["vs_baseline"] = modes["baseline"]["seconds_per_iteration"] / held
        entry["same_model"] = len({m["model_id"] for m in modes.values()}) == 1
        speedup[partition] = entry
    result = {
        "command": " ".join(["benchmarks/bench_dish_nodes.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "params": {
            k: getattr(args, k) for k in ("nodes", "bits", "partitions", "iters_short", "iters_long", "repeats")
        },
        "floors": {
            "pass_flops": flops,
            "gemm_flops_per_thread": rate,
            "compute_floor_seconds": flops / (2 * rate),
            "plain_pass_seconds": measured["plain_pass_seconds"],
            "task_rounds_seconds": measured["task_rounds_seconds"],
            "math_seconds_per_iteration": measured["math_seconds"],
        },
        "runs": runs,
        "held_speedup": speedup,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
