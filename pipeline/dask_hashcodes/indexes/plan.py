"""The automatic choice between the two exact Hamming searches of a stored multi-index: its
substring tables (multi-index hashing) or the linear scan of the same codes.

Both return the same answer (the exact top-k, ties by id; every code within a radius), so the
choice only decides the speed, never a result. Which is faster depends on the codes, not
only on their number and length: multi-index hashing looks at the codes whose substrings lie
near the query's, and how many those are depends on how the codes spread (and on k: a
candidate source for re-ranking asks for a deep top-R and needs a wide search radius). So
the choice is measured on the search itself: a sample of its queries runs both ways on one
shard of the index (every shard does the same work in a search), and the faster one runs the
whole search. The trial runs on a worker when there is a cluster: the first compiled kernel a
process runs costs it about a second of start-up, which the workers pay for the search
anyway and the client would pay for the trial alone. The tables are not free: each shard's
task reads them from storage (4 bytes per code, more than a 32-bit code itself) before it
can use them.
So the trial also times reading one shard's tables, and the tables win only when the time
they save on the whole batch (the sample's saving scaled to every query) exceeds that read:
a small batch, or codes the scan covers quickly, never pays for tables it cannot recoup.

Even a trial costs a search something: a worker's time, and the tables' kernels loaded. So
an index's build already times both searches on its first shard at a few depths
(``calibration``), and a top-k search that the tables clearly lose there runs by the scan
with no trial at all, as fast as the plain scan (``calibrated_choice``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.hamming import hamming_radius, hamming_topk
from dask_hashcodes.kernels.mih import mih_radius, mih_topk, tables_from_arrays

log = logging.getLogger(__name__)

TRIAL_QUERIES = 64  # enough that each timing is well above the timer's and the call's overhead
TRIAL_REPEATS = 3  # the fastest of three: a busy machine slows a run, it never speeds one up
SCAN, MIH = "linear scan", "multi-index hashing"


def trial_queries(query_codes: np.ndarray) -> np.ndarray:
    """Up to TRIAL_QUERIES of the queries, evenly spaced (a batch may be ordered)."""
    if len(query_codes) <= TRIAL_QUERIES:
        return query_codes
    return query_codes[np.linspace(0, len(query_codes) - 1, TRIAL_QUERIES).astype(np.int64)]


def _fastest_seconds(run) -> float:
    run()  # the first call loads the compiled kernel
    best = np.inf
    for _ in range(TRIAL_REPEATS):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


# multi-index hashing is timed on this many of the sample first: when even that projects to
# EARLY_MARGIN times the scan's time, the trial stops there (a loser's full runs would cost
# the trial more than the whole choice can save; the margin keeps one slow run on a busy
# machine from deciding against the tables)
EARLY_QUERIES = 8
EARLY_MARGIN = 2.0


def _searches(codes: np.ndarray, n_bits: int, *, k: int | None, radius: int | None):
    """(scan(queries), mih(queries, substrings)): the two exact searches of one shard's
    ``codes`` at top-``k`` or within ``radius``, as the whole search runs them."""
    ids = np.arange(len(codes), dtype=np.int64)
    if k is not None:
        scan = lambda queries: hamming_topk(codes, ids, queries=queries, k=k)  # noqa: E731
        mih = lambda queries, subs: mih_topk(codes, ids, subs, queries=queries, k=k, n_bits=n_bits)  # noqa: E731
    else:
        scan = lambda queries: hamming_radius(queries, codes, ids, radius)  # noqa: E731
        mih = lambda queries, subs: mih_radius(codes, ids, subs, queries=queries, radius=radius, n_bits=n_bits)  # noqa: E731
    return scan, mih


def _mih_seconds(mih, substrings, sample: np.ndarray, scan_seconds: float, give_up: float) -> tuple[float, bool]:
    """(seconds of multi-index hashing on ``sample``, whether projected): projected from
    EARLY_QUERIES of it when that already comes to ``give_up`` times ``scan_seconds`` (a
    loser's full runs would cost more than the answer is worth), else the fastest full run."""
    early = sample[:EARLY_QUERIES]
    if len(early) < len(sample):
        # the fastest of a few runs, as for the scan: one run of a few queries takes tens of
        # microseconds, which a single pause of the worker's process would multiply
        projected = _fastest_seconds(lambda: mih(early, substrings)) * len(sample) / len(early)
        if projected >= give_up * scan_seconds:
            return projected, True
    return _fastest_seconds(lambda: mih(sample, substrings)), False


def trial_seconds(tables, sample: np.ndarray, *, k: int | None = None, radius: int | None = None) -> dict:
    """The timings the choice compares, on the first shard of a stored multi-index (the
    StoredTables of storage.mih_index.open_index) for the ``sample`` queries (``trial_queries``
    of the batch), at top-``k`` or within ``radius``: the sample's seconds by the linear scan
    (``scan``) and by multi-index hashing (``mih``; projected from EARLY_QUERIES when that
    already shows a clear loss, ``early``), the seconds of reading the shard's tables
    (``tables``), and the shard's codes (``codes``)."""
    attrs = tables.attrs
    codes = tables.codes.reader(0)
    scan, mih = _searches(codes, int(attrs["n_bits"]), k=k, radius=radius)
    out = {"codes": len(codes), "scan": _fastest_seconds(lambda: scan(sample))}
    started = time.perf_counter()
    order, offsets = tables.order(0), tables.offsets(0)[0]
    out["tables"] = time.perf_counter() - started  # what every shard's task pays before using its tables
    substrings = tables_from_arrays(np.asarray(attrs["starts"], np.int64), order, offsets)
    out["mih"], out["early"] = _mih_seconds(mih, substrings, sample, out["scan"], EARLY_MARGIN)
    return out


# The build of a stored multi-index times both searches on its first shard at these depths
# (``calibration``), so that a search the tables cannot win skips its trial and never reads
# a table. Two rules decide that:
# - the tables lost by CALIBRATED_MARGIN: at both calibrated depths around k, or at the
#   deepest for a k beyond it (a deeper top-k needs a wider radius through the tables, while
#   the scan stays one pass). The margin covers a search on another CPU than the build's: a
#   scan twice as fast or twice as slow relative to the tables loses or wins the same way;
# - the whole batch's scan, projected from the calibration, would take less than
#   TRIAL_SECONDS: the most the tables could save (were they free) is less than the trial's
#   own cost (a task's round trip, the workers loading the tables' kernels, the sample read
#   and timed both ways).
CALIBRATED_K = (1, 10, 100, 1000)
CALIBRATED_MARGIN = 3.0
CALIBRATION_GIVE_UP = 10.0  # the build stops timing the tables early only at a loss this clear
TRIAL_SECONDS = 0.25  # about what a trial adds to a search's CPU time, in seconds


def calibration(codes: np.ndarray, substrings: dict, n_bits: int, n_total: int) -> dict:
    """Both searches timed on one shard (``codes`` and their ``substrings`` tables, as
    kernels.mih.build_tables makes them) at each CALIBRATED_K, with a sample of the shard's
    own codes as the queries: the ``calibration`` attribute of an index of ``n_total`` codes.
    Its own codes lie nearer the tables' buckets than unseen queries do, which favours the
    tables: a loss measured this way is not overstated."""
    sample = trial_queries(codes)
    per_k = {}
    for k in CALIBRATED_K:
        scan, mih = _searches(codes, n_bits, k=k, radius=None)
        scan_seconds = _fastest_seconds(lambda: scan(sample))  # noqa: B023 (called right here)
        mih_seconds, _ = _mih_seconds(mih, substrings, sample, scan_seconds, CALIBRATION_GIVE_UP)
        per_k[str(k)] = {"scan": scan_seconds, "mih": mih_seconds}
    return {"n": int(n_total), "codes": len(codes), "queries": len(sample), "k": per_k}


def calibrated_choice(attrs: dict, k: int | None, n_queries: int | None = None) -> tuple[str, str] | None:
    """(SCAN, why) when the build's calibration of the stored multi-index with ``attrs``
    shows that the tables cannot win a top-``k`` search of ``n_queries`` queries (None:
    unknown, the projection is not made); None when a trial must decide (a radius search,
    k None; a k below every calibrated one; an index built before calibration)."""
    try:
        calibrated = attrs.get("calibration", {})
        per_k = {int(depth): (float(t["scan"]), float(t["mih"])) for depth, t in calibrated["k"].items()}
        pairs = float(calibrated["queries"]) * float(calibrated["codes"])
        n_total = calibrated.get("n")
        n_total = None if n_total is None else int(n_total)
    except KeyError:
        return None  # built before calibration
    except (TypeError, ValueError, AttributeError):
        raise InputError(
            "a multi-index has a damaged calibration attribute; build the index again from its codes with "
            "`overwrite=True`"
        ) from None
    depths = sorted(per_k)
    if k is None or not depths or k < depths[0]:
        return None
    below = max(d for d in depths if d <= k)
    bracket = [per_k[d] for d in [below] + ([d for d in depths if d > k][:1] if below < k else [])]
    if all(mih >= CALIBRATED_MARGIN * scan for scan, mih in bracket):
        scan, mih = per_k[below]
        return SCAN, (
            f"when the index was built, top-{below} searches on one shard took {mih:.3g} s by multi-index "
            f"hashing and {scan:.3g} s by the linear scan"
        )
    if n_queries is not None and n_total is not None and pairs > 0:
        whole_scan = max(scan for scan, _ in bracket) / pairs * n_queries * n_total
        if whole_scan < TRIAL_SECONDS:
            return SCAN, (
                f"the whole scan of {n_queries} queries, projected from the index's build, takes about "
                f"{whole_scan:.2g} s, less than a trial of the tables would"
            )
    return None


EARLY_TRIAL_CHUNKS = 4  # codes chunks an early trial may read for its sample of queries
EARLY_TRIAL_MIN_QUERIES = 8  # fewer queries there: no early trial (the sample would be too small to time)


@dataclass(frozen=True)
class EarlyTrial:
    """A trial started before the batch's query codes are read (``start_early_trial``): the
    worker reads its sample from storage while this process reads the batch."""

    future: object
    n_sample: int
    n_queries: int
    k: int | None
    radius: int | None

    def answers(self, n_queries: int, k: int | None, radius: int | None) -> bool:
        return (self.n_queries, self.k, self.radius) == (n_queries, k, radius)


def early_sample_rows(query_rows: np.ndarray, chunk_rows: int) -> np.ndarray | None:
    """Up to TRIAL_QUERIES of the batch's stored query rows, all from the first
    EARLY_TRIAL_CHUNKS codes chunks that hold any (the batch is a random draw of rows, so
    these are a random sample of it); None when those chunks hold too few to time."""
    query_rows = np.asarray(query_rows, np.int64)
    chunks = np.unique(query_rows // chunk_rows)[:EARLY_TRIAL_CHUNKS]
    rows = query_rows[np.isin(query_rows // chunk_rows, chunks)]
    if len(rows) < EARLY_TRIAL_MIN_QUERIES:
        return None
    return trial_queries(rows)


def _trial_of_rows(tables, rows: np.ndarray, *, k: int | None, radius: int | None) -> dict:
    return trial_seconds(tables, tables.codes.reader.take(rows), k=k, radius=radius)


def start_early_trial(tables, query_rows, *, k: int | None = None, radius: int | None = None) -> EarlyTrial | None:
    """Start the trial of a batch whose queries are the stored codes at ``query_rows`` on a
    worker now, reading its sample there (``early_sample_rows``), so that it runs while this
    process reads the batch's codes instead of after; None without a cluster or a sample."""
    from dask_hashcodes.distributed.progress import active_client

    client = active_client()
    if client is None or calibrated_choice(tables.attrs, k, len(query_rows)) is not None:
        return None
    rows = early_sample_rows(query_rows, tables.codes.reader.chunk_rows)
    if rows is None:
        return None
    future = client.submit(_trial_of_rows, tables, rows, k=k, radius=radius, pure=False)
    return EarlyTrial(future, len(rows), len(query_rows), k, radius)


def faster_exact_search(
    tables, query_codes: np.ndarray, *, k: int | None = None, radius: int | None = None, early: EarlyTrial | None = None
) -> str:
    """MIH or SCAN: the faster on the first shard of a stored multi-index for a sample of
    ``query_codes``, at top-``k`` or within ``radius`` (``trial_seconds``, run on a worker
    when there is a cluster, else here). ``early``: the result of a trial started for this
    batch before its codes were read, used when it was started for the same search."""
    from dask_hashcodes.distributed.progress import active_client

    calibrated = calibrated_choice(tables.attrs, k, len(query_codes))
    if calibrated is not None:
        choice, why = calibrated
        log.info("%s chosen without a trial: %s", choice, why)
        return choice
    if early is not None and early.answers(len(query_codes), k, radius):
        seconds, n_sample = early.future.result(), early.n_sample
    else:
        sample = trial_queries(query_codes)  # only the sample travels to the worker, not the batch
        client = active_client()
        if client is None:
            seconds = trial_seconds(tables, sample, k=k, radius=radius)
        else:
            seconds = client.submit(trial_seconds, tables, sample, k=k, radius=radius, pure=False).result()
        n_sample = len(sample)
    scale = len(query_codes) / max(1, n_sample)
    choice = MIH if seconds["mih"] * scale + seconds["tables"] < seconds["scan"] * scale else SCAN
    log.info(
        "%s chosen: on one shard of %d codes, %d queries took %.3g s by multi-index hashing%s (after %.3g s reading "
        "its tables) and %.3g s by the linear scan; the batch has %d queries",
        choice, seconds["codes"], n_sample, seconds["mih"],
        f" (projected from {EARLY_QUERIES})" if seconds["early"] else "", seconds["tables"], seconds["scan"],
        len(query_codes),
    )  # fmt: skip
    return choice
