"""Add ``ram_bytes_per_vector`` to the rows of a recall result written before bench_recall
counted it, then re-render its .md and .png.

Such a result recorded ``bytes_per_vector``: the index alone (codes, lists, ids, tables), or
for FAISS's float indexes the whole index, vectors included. Every row that re-ranked
exactly read the database vectors from memory as well, ``d`` bytes per vector of uint8 data;
this adds them, so the number is what the timed search read from RAM, as bench_recall counts
it now. A row whose index size was never recorded (FAISS's multi-hash tables) cannot be
recounted and is dropped. The result says what was recounted and dropped.

    .venv/bin/python benchmarks/recount_ram.py benchmarks/results/recall/sift-synth-10M --d 128
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_recall import is_result, refuse_out, replace_file, write_report  # noqa: E402


def reads_vectors(row: dict) -> bool:
    """Whether the row's timed search re-ranked by exact distances to the vectors in RAM
    (FAISS's own float indexes hold their vectors inside the index already)."""
    return "exact" in row["family"] or "exact re-rank" in row["config"]


def recount(result: dict, d: int, itemsize: int) -> dict:
    kept, dropped = [], []
    for row in result["rows"]:
        if "ram_bytes_per_vector" in row:
            kept.append(row)
            continue
        index_bytes = row.get("bytes_per_vector")
        if index_bytes is None:
            dropped.append(row["config"])
            continue
        row["ram_bytes_per_vector"] = index_bytes + (d * itemsize if reads_vectors(row) else 0)
        kept.append(row)
    result["rows"] = kept
    result["ram_recount"] = (
        f"ram_bytes_per_vector added after the run from each row's recorded bytes_per_vector, plus the {d * itemsize} "
        "bytes of each database vector for the rows that re-rank exactly from the vectors in RAM"
        + (f"; dropped {len(dropped)} rows whose index size was not recorded: {', '.join(dropped)}" if dropped else "")
    )
    chosen = {}
    for family, best in result["chosen"].items():
        chosen[family] = next((r for r in kept if best and r["config"] == best["config"]), None) if best else None
    result["chosen"] = chosen
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the result's path without suffix")
    parser.add_argument("--d", type=int, required=True, help="features per database vector")
    parser.add_argument("--itemsize", type=int, default=1, help="bytes per feature (1: uint8)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    refused = refuse_out(out) or (None if out.with_suffix(".json").exists() else f"{out}.json does not exist")
    if refused:
        parser.error(f"{refused}; nothing was changed")
    result = json.loads(out.with_suffix(".json").read_text())
    if not is_result(result) or "rows" not in result:
        parser.error(f"{out.with_suffix('.json')} is not a result of benchmarks/bench_recall.py; nothing was changed")
    if "ram_recount" in result or all("ram_bytes_per_vector" in row for row in result["rows"]):
        parser.error(f"{out.with_suffix('.json')} already counts its RAM; nothing was changed")
    result = recount(result, args.d, args.itemsize)
    replace_file(out.with_suffix(".json"), lambda path: Path(path).write_text(json.dumps(result, indent=1) + "\n"))
    write_report(result, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
