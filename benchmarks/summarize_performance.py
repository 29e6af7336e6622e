#!/usr/bin/env python
"""One table of every performance result in benchmarks/results/ (search, ground truth,
training, encoding, the 10M pipeline) -> benchmarks/results/performance.md, and the same
table into the README's "Performance" section (between its performance markers).

    .venv/bin/python benchmarks/summarize_performance.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _mem(side: dict) -> str:
    if "memory" in side:
        return f"{side['memory']['max_process_peak_rss_mb']:.0f}"
    return f"{side.get('peak_rss_mb', float('nan')):.0f}"


MACHINE_MARK = " †"


def rows(cpu: str | None = None) -> list[str]:
    """Table rows; a row measured on another CPU than ``cpu`` ends its stage with a mark."""
    out = []
    for n in ("10M", "100M"):
        for bits in (32, 64):
            r = _load(f"search_{n}_{bits}b.json")
            if r:
                a = r["agreement"]
                out.append(
                    _mark(
                        r,
                        cpu,
                        f"| search top-100, 1000 queries, {n} codes, {bits} bits | {r['ours']['seconds']:.1f} s "
                        f"({r['ours']['pairs_per_second'] / 1e9:.2f} G pairs/s) | faiss.IndexBinaryFlat {r['peer']['seconds']:.1f} s | "
                        f"**{r['speedup_pairs_per_second']:.2f}x** pairs/s | identical distances: {a['identical_distances']}, "
                        f"ids up to ties: {a['ids_equal_up_to_ties']} | {_mem(r['ours'])} |",
                    )
                )
    for name in ("groundtruth_10M.json", "groundtruth_10M_epyc.json"):  # an Intel and an AMD CPU
        r = _load(name)
        if not r:
            continue
        out.append(
            _mark(
                r,
                cpu,
                f"| exact L2 top-100, 1000 queries, 10M x 128 uint8, {r['machine']['cpu_model']} | {r['ours']['seconds']:.1f} s | faiss.IndexFlatL2 "
                f"{r['peer']['seconds']:.1f} s | **{r['ratio_ours_over_peer_seconds']:.2f}x** time | identical distances: "
                f"{r['agreement']['identical_distances']}, ids up to ties: {r['agreement']['ids_equal_up_to_ties']} | {_mem(r['ours'])} |",
            )
        )
    for n in ("10M", "100M"):
        for method in ("dish", "dish-allreduce", "itq"):
            r = _load(f"train_{n}_{method}.json")
            if r:
                p = r["params"]
                out.append(
                    _mark(
                        r,
                        cpu,
                        f"| train {method} {n} x 128, {p['bits']} bits, {p['iterations']} iterations | {r['ours']['seconds']:.0f} s "
                        f"({r['ours']['passes']} passes) | floor: {p['iterations']} plain passes {r['peer']['seconds']:.0f} s | "
                        f"**{r['ratio_ours_over_peer_seconds']:.2f}x** time | - | {_mem(r['ours'])} |",
                    )
                )
    for n in ("10M", "100M"):
        r = _load(f"encode_{n}_32b.json")
        if r:
            out.append(
                _mark(
                    r,
                    cpu,
                    f"| encode {n} x 128 -> 32-bit codes (zarr) | {r['ours']['seconds']:.1f} s | floor: one plain pass "
                    f"{r['peer']['seconds']:.1f} s | **{r['ratio_ours_over_peer_seconds']:.2f}x** time | - | {_mem(r['ours'])} |",
                )
            )
    r = _load("verify_10M.json")
    if r:
        secs = r["seconds_per_pass"]
        out.append(
            _mark(
                r,
                cpu,
                f"| read pass 10M x 128 uint8, chunks verified (checksums) | {secs['verified']:.2f} s | unverified read pass "
                f"{secs['unverified']:.2f} s | **{1 + r['verification_overhead']:.3f}x** time | - | - |",
            )
        )
    r = _load("train_itq_vs_faiss_1M.json")
    if r:
        out.append(
            _mark(
                r,
                cpu,
                f"| ITQ 32 bits, 50 iterations, 1M x 128 | {r['ours']['seconds']:.1f} s (cluster) | faiss.ITQTransform "
                f"{r['peer']['seconds']:.1f} s (in memory) | {r['ratio_ours_over_peer_seconds']:.2f}x time | Fashion-MNIST map "
                f"{r['ours']['fashion_mnist_map']} vs {r['peer']['fashion_mnist_map']} | {_mem(r['ours'])} |",
            )
        )
    return out


def _mark(r: dict, cpu: str | None, row: str) -> str:
    """``row`` with MACHINE_MARK after its stage when ``r`` was measured on another CPU."""
    other = cpu and r.get("machine", {}).get("cpu_model") not in (None, cpu)
    return row.replace(" | ", MACHINE_MARK + " | ", 1) if other else row


def table() -> str:
    """performance.md's text, from the result files."""
    any_result = next(
        (RESULTS / f for f in ("train_10M_dish.json", "search_10M_32b.json") if (RESULTS / f).exists()), None
    )
    machine = json.loads(any_result.read_text())["machine"] if any_result else {}
    table_rows = rows(machine.get("cpu_model"))
    lines = [
        f"Machine: {machine.get('cores')} cores, {machine.get('cpu_model')}, {machine.get('ram_total_gb')} GB RAM "
        "(a shared virtual machine: each result records the CPU time stolen by the hypervisor).",
        "",
        "| stage | ours | peer | ratio | agreement / quality | our max process RSS MB |",
        "|---|---|---|---|---|---|",
        *table_rows,
    ]
    if any(MACHINE_MARK in r for r in table_rows):
        others = sorted(
            {
                json.loads(f.read_text()).get("machine", {}).get("cpu_model")
                for f in RESULTS.glob("*.json")
                if f.name.startswith(("search_", "train_", "encode_", "groundtruth_"))
            }
            - {machine.get("cpu_model")}
        )
        lines += [
            "",
            f"{MACHINE_MARK.strip()} measured on another machine ({', '.join(map(str, others))}; the row names the CPU "
            "where it matters); its ratio compares two runs on that machine, its seconds are not comparable. The "
            "Xeon rows ran before chunk verification, the Xeon ground-truth row with the earlier L2 kernel.",
        ]
    p = _load("pipeline_10M.json")
    if p:
        lines += [
            "",
            f"Full 10M pipeline (synth, split, {p['params']['ground_truth'].split(' squared')[0]} ground truth, "
            f"LSH + DisH training, encoding, search, "
            f"precision@50..1000 at 32 and 64 bits): **{p['total_seconds'] / 60:.1f} min**; see `pipeline_10M.md`.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = table()
    (RESULTS / "performance.md").write_text(text)
    readme = RESULTS.parent.parent / "README.md"
    readme_text = readme.read_text()
    start, end = "<!-- performance:start -->\n", "<!-- performance:end -->"
    if start in readme_text and end in readme_text:
        head, rest = readme_text.split(start, 1)
        readme.write_text(head + start + text + end + rest.split(end, 1)[1])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
