"""Storage that is correct on a real cluster: object storage through a real S3 API,
verified chunks, outputs that never destroy or hide anything.

* The whole pipeline (ingest -> split -> groundtruth -> train -> encode -> search ->
  evaluate) from and to ``s3://`` URLs, served by moto's standalone S3 server on
  127.0.0.1 (a real HTTP S3 API), on a multi-process cluster: byte-identical codes and
  identical metrics to the local-disk run.
* Deleting a chunk or flipping one byte of features, codes, ground-truth lists or
  relevance bits makes every reading command exit 2 naming the chunk, and leaves no output.
* ``--overwrite`` replaces only our own artifact of the same kind; stale temporaries of
  killed writers are removed by the next writer; SIGTERM removes the temporary (exit 143).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dask_hashcodes.cli.main import main
from dask_hashcodes.data.texmex import write_vecs
from dask_hashcodes.storage.codes import open_codes
from dask_hashcodes.storage.location import Storage, resolve

REPO = Path(__file__).resolve().parents[1]


def run(*argv):
    return main([str(a) for a in argv])


def _no_temporaries(folder: Path) -> bool:
    return not [p for p in folder.rglob(".*.tmp-*")]


# ------------------------------------------------------------------ S3 round trip ----


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server on a free loopback port; yields fsspec storage options for it."""
    pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"endpoint_url": f"http://{host}:{port}", "key": "dhash-test", "secret": "dhash-test"}
    s3fs.S3FileSystem(**options).mkdir("dhash-test")
    yield options
    server.stop()


def _pipeline(cluster, src: str, base: str, labels: str | None = None, extra=()) -> dict:
    """Every step of the pipeline from ``src`` into ``base`` (a folder path or URL prefix)."""
    sched = ["--scheduler", cluster.scheduler_address, "--quiet", *extra]
    ds, model, codes = f"{base}/ds.zarr", f"{base}/itq16", f"{base}/codes.zarr"
    steps = [
        ["ingest", src, "--out", ds, "--chunk-rows", 1000],
        ["split", "--dataset", ds, "--queries", 40, "--seed", 3],
        ["groundtruth", "--dataset", ds, "--top-k", 25],
        ["train", "--dataset", ds, "--split", "default", "--method", "itq", "--bits", 16, "--out", model],
        ["encode", "--dataset", ds, "--model", model, "--out", codes],
        ["search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 10, "--out", f"{base}/res.parquet"],
        [
            "evaluate",
            "--dataset",
            ds,
            "--methods",
            "lsh,itq",
            "--bits",
            16,
            "--queries",
            40,
            "--seed",
            3,
            "--ground-truth",
            "euclidean",
            "--top-k",
            25,
            "--out",
            f"{base}/report",
        ],
    ]
    for step in steps:
        # ingest runs without a cluster: the cluster flags are refused there
        cluster_flags = [f for f in sched if f != "--scheduler" and f != cluster.scheduler_address]
        assert run(*step, *(cluster_flags if step[0] == "ingest" else sched)) == 0, step
    return {"ds": ds, "model": model, "codes": codes, "results": f"{base}/res.parquet", "report": f"{base}/report"}


def _s3_bytes(options, url: str) -> bytes:
    import s3fs

    return s3fs.S3FileSystem(**options).cat_file(url)


def test_pipeline_from_and_to_s3_equals_local_disk(s3_server, cluster, tmp_path, monkeypatch):
    import s3fs

    X = np.random.default_rng(7).integers(0, 200, (3000, 24)).astype(np.float32)
    write_vecs(tmp_path / "base.fvecs", X)
    local = _pipeline(cluster, tmp_path / "base.fvecs", str(tmp_path / "local"))

    fs = s3fs.S3FileSystem(**s3_server)
    fs.put_file(str(tmp_path / "base.fvecs"), "dhash-test/inbox/base.fvecs")
    # storage options reach the CLI (and, inside each Location, the workers) from the environment
    monkeypatch.setenv("DHASH_STORAGE_OPTIONS", json.dumps(s3_server))
    remote = _pipeline(cluster, "s3://dhash-test/inbox/base.fvecs", "s3://dhash-test/run")

    # the options are passed explicitly: a Storage (or a dict) for this call, nothing process-wide
    storage = Storage(s3_server)
    local_codes, remote_codes = open_codes(local["codes"]), open_codes(remote["codes"], storage=storage)
    assert local_codes.reader[:].tobytes() == remote_codes.reader[:].tobytes()  # byte-identical codes
    l_attrs, r_attrs = local_codes.attrs, remote_codes.attrs
    assert l_attrs["model_id"] == r_attrs["model_id"] and l_attrs["dataset_id"] == r_attrs["dataset_id"]
    assert r_attrs["dataset"] == "s3://dhash-test/run/ds.zarr"
    assert not any('dhash-test"' in json.dumps(v) or "secret" in json.dumps(v) for v in r_attrs.values())
    assert s3_server["secret"] not in repr(storage) and storage.options == s3_server
    local_table = pq.read_table(local["results"])
    with fs.open("dhash-test/run/res.parquet", "rb") as f:
        remote_table = pq.read_table(f)
    assert local_table.equals(remote_table)
    local_report = json.loads((Path(local["report"]) / "report.json").read_text())
    remote_report = json.loads(_s3_bytes(s3_server, "dhash-test/run/report/report.json"))
    for a, b in zip(local_report["results"], remote_report["results"]):
        assert a["model_id"] == b["model_id"]
        assert {k: v for k, v in a["metrics"].items() if isinstance(v, float)} == {
            k: v for k, v in b["metrics"].items() if isinstance(v, float)
        }
    assert "secret" not in json.dumps(remote_report) and 'dhash-test"' not in json.dumps(remote_report)
    # every artifact on S3 is committed; nothing uncommitted is left behind
    names = fs.find("dhash-test/run")
    assert not [n for n in names if n.endswith(".dhash-writer.json")]
    for artifact in ("ds.zarr", "itq16", "codes.zarr", "report", "ds.zarr/splits/default"):
        assert f"dhash-test/run/{artifact}/.dhash-commit.json" in names, artifact


def test_python_api_takes_the_storage_options_explicitly(s3_server, client, monkeypatch):
    """No process-wide setting: each workflow gets its Storage, each URL it resolves keeps the
    options (to the workers too), and a URL resolved without them has none."""
    import dask_hashcodes

    monkeypatch.delenv("DHASH_STORAGE_OPTIONS", raising=False)
    storage = Storage(s3_server)
    base = "s3://dhash-test/api"
    ds = dask_hashcodes.synth("sift", f"{base}/ds.zarr", n=3000, chunk_rows=1000, storage=storage)
    split = dask_hashcodes.split(ds, queries=20)
    model = dask_hashcodes.train(ds, "lsh", f"{base}/lsh", bits=32, split=split.name, storage=storage)
    dask_hashcodes.encode(ds, model, f"{base}/codes.zarr", storage=storage)
    dask_hashcodes.index(f"{base}/codes.zarr", f"{base}/mih.zarr", storage=s3_server)  # a dict is a Storage too
    found = dask_hashcodes.search(
        f"{base}/ds.zarr", f"{base}/lsh", f"{base}/codes.zarr", f"{base}/r.parquet", k=5, storage=storage
    )
    through_index = dask_hashcodes.search(
        ds, model, f"{base}/codes.zarr", k=5, index=f"{base}/mih.zarr", storage=storage
    )
    assert found.results[1].shape == (20, 5) and (found.results[1] >= 0).all()
    for got, want in zip(through_index.results, found.results, strict=True):
        np.testing.assert_array_equal(got, want)
    codes = dask_hashcodes.open_codes(f"{base}/codes.zarr", storage=storage)
    assert codes.location.options == s3_server and codes.n == 3000
    assert resolve(f"{base}/codes.zarr").options == {}  # nothing was set for the process
    with _s3_open(s3_server, "dhash-test/api/r.parquet") as f:
        assert pq.read_table(f).num_rows == 100


def _s3_open(options, path):
    import s3fs

    return s3fs.S3FileSystem(**options).open(path, "rb")


def test_uncommitted_prefix_on_s3_is_refused(s3_server, cluster, monkeypatch, capsys):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server)
    fs.pipe_file("dhash-test/half/ds.zarr/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    monkeypatch.setenv("DHASH_STORAGE_OPTIONS", json.dumps(s3_server))
    half = "s3://dhash-test/half/ds.zarr"
    assert run("split", "--dataset", half, "--scheduler", cluster.scheduler_address, "--quiet") == 2
    err = capsys.readouterr().err
    assert "is not a complete dhash dataset" in err and err.count("\n") == 1


# ------------------------------------------------------------------ damaged chunks ---


@pytest.fixture(scope="module")
def pristine(cluster, tmp_path_factory):
    """A small pipeline on local disk: dataset with split, listed and bit ground truth, model, codes."""
    from dask_hashcodes.data.synth import write_sift_synth
    from dask_hashcodes.evaluation import truth as T
    from dask_hashcodes.storage.datasets import open_dataset

    base = tmp_path_factory.mktemp("pristine")
    write_sift_synth(base / "ds.zarr", 6000, seed=2, chunk_rows=1500)
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    # the split `dhash evaluate --queries 20 --seed 0` uses, so it reads this ground truth
    assert run("split", "--dataset", base / "ds.zarr", "--queries", 20, "--name", "q20-s0", *sched) == 0
    assert run("groundtruth", "--dataset", base / "ds.zarr", "--split", "q20-s0", "--top-k", 30, *sched) == 0
    from distributed import Client

    with Client(cluster) as client:  # the same truth as relevance bits (the form used for large K)
        ds = open_dataset(base / "ds.zarr")
        T.relevance_groundtruth(ds, ds.get_split("q20-s0"), top_k=30)
        del client
    assert (
        run("train", "--dataset", base / "ds.zarr", "--method", "itq", "--bits", 16, "--out", base / "model", *sched)
        == 0
    )
    assert (
        run("encode", "--dataset", base / "ds.zarr", "--model", base / "model", "--out", base / "codes.zarr", *sched)
        == 0
    )
    return base


def _damage(root: Path, how: str) -> Path:
    chunk = next(p for p in sorted(root.rglob("c/*")) if p.is_file() or (p / "0").is_file())
    chunk = chunk if chunk.is_file() else chunk / "0"
    raw = chunk.read_bytes()
    if how == "remove":
        chunk.unlink()
    else:
        middle = len(raw) // 2
        chunk.write_bytes(raw[:middle] + bytes([raw[middle] ^ 0x40]) + raw[middle + 1 :])
    return chunk


EVALUATE = [
    "evaluate",
    "--dataset",
    "{ds}",
    "--methods",
    "lsh",
    "--bits",
    16,
    "--queries",
    20,
    "--ground-truth",
    "euclidean",
    "--top-k",
    30,
    "--out",
    "{work}/report",
]
CASES = {  # array -> (folder inside the work copy, command that reads it)
    "features-train": (
        "ds.zarr/features",
        ["train", "--dataset", "{ds}", "--method", "itq", "--bits", 16, "--out", "{work}/m2"],
    ),
    "features-encode": (
        "ds.zarr/features",
        ["encode", "--dataset", "{ds}", "--model", "{work}/model", "--out", "{work}/c2.zarr"],
    ),
    "features-groundtruth": (
        "ds.zarr/features",
        ["groundtruth", "--dataset", "{ds}", "--split", "q20-s0", "--top-k", 7],
    ),
    "codes-search": (
        "codes.zarr/codes",
        [
            "search",
            "--dataset",
            "{ds}",
            "--model",
            "{work}/model",
            "--split",
            "q20-s0",
            "--codes",
            "{work}/codes.zarr",
            "--out",
            "{work}/r.parquet",
        ],
    ),
    "groundtruth-lists": ("ds.zarr/groundtruth/q20-s0-l2-top30/ids", EVALUATE),
    "relevance-bits": ("ds.zarr/groundtruth/q20-s0-l2-top30-bits/relevance", EVALUATE),
    "split": ("ds.zarr/splits/q20-s0/query", ["groundtruth", "--dataset", "{ds}", "--split", "q20-s0", "--top-k", 7]),
    "split-query-features": (
        "ds.zarr/splits/q20-s0/query_features",
        ["groundtruth", "--dataset", "{ds}", "--split", "q20-s0", "--top-k", 7],
    ),
}


@pytest.mark.parametrize("how", ["remove", "flip"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_chunk_makes_the_reader_exit_2_naming_it(pristine, cluster, tmp_path, capsys, monkeypatch, case, how):
    folder, command = CASES[case]
    work = tmp_path / "work"
    shutil.copytree(pristine, work)
    if case == "relevance-bits":
        from dask_hashcodes.evaluation import truth as T

        monkeypatch.setattr(T, "MAX_LISTED_NEIGHBOURS", 10)  # K = 30 is then read from the bits
        shutil.rmtree(work / "ds.zarr" / "groundtruth" / "q20-s0-l2-top30")
    chunk = _damage(work / folder, how)
    before = sorted(p.relative_to(work) for p in work.rglob("*") if p.exists())
    argv = [str(a).format(ds=work / "ds.zarr", work=work) for a in command]
    capsys.readouterr()
    assert run(*argv, "--scheduler", cluster.scheduler_address, "--quiet") == 2
    err = capsys.readouterr().err.strip()
    problem = "missing" if how == "remove" else "damaged"
    chunk_no = chunk.parent.name if chunk.name == "0" and chunk.parent.parent.name == "c" else chunk.name
    assert f"chunk {chunk_no} is {problem}" in err and str(chunk) in err and ("re-" in err or "again" in err), err
    assert err.startswith("error: ") and err.count("\n") == 0 and "Traceback" not in err
    after = sorted(p.relative_to(work) for p in work.rglob("*") if p.exists())
    assert after == [p for p in before if p != chunk.relative_to(work)] or after == before  # no output left


@pytest.mark.parametrize(
    "target, damage, command, message",
    [
        (
            "model/arrays.npz",
            "truncate",
            ["encode", "--dataset", "{ds}", "--model", "{work}/model", "--out", "{work}/c2.zarr"],
            "model/arrays.npz differs from its commit record",
        ),
        (
            "model/model.json",
            "truncate",
            ["encode", "--dataset", "{ds}", "--model", "{work}/model", "--out", "{work}/c2.zarr"],
            "model/model.json differs from its commit record",
        ),
        (
            "ds.zarr/features/zarr.json",
            "truncate",
            ["train", "--dataset", "{ds}", "--method", "lsh", "--out", "{work}/m2"],
            "damaged metadata",
        ),
        (
            "ds.zarr/.dhash-commit.json",
            "truncate",
            ["train", "--dataset", "{ds}", "--method", "lsh", "--out", "{work}/m2"],
            "damaged commit record",
        ),
        (
            "codes.zarr/.dhash-commit.json",
            "remove",
            [
                "search",
                "--dataset",
                "{ds}",
                "--model",
                "{work}/model",
                "--split",
                "q20-s0",
                "--codes",
                "{work}/codes.zarr",
                "--out",
                "{work}/r.parquet",
            ],
            "is not a complete dhash codes",
        ),
    ],
)
def test_damaged_metadata_is_a_one_line_error(pristine, cluster, tmp_path, capsys, target, damage, command, message):
    work = tmp_path / "work"
    shutil.copytree(pristine, work)
    path = work / target
    if damage == "remove":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 3)])
    argv = [str(a).format(ds=work / "ds.zarr", work=work) for a in command]
    capsys.readouterr()
    assert run(*argv, "--scheduler", cluster.scheduler_address, "--quiet") == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0, err
    assert not (work / "c2.zarr").exists() and not (work / "m2").exists() and not (work / "r.parquet").exists()


def test_codes_of_another_dataset_are_refused(pristine, cluster, tmp_path, capsys):
    from dask_hashcodes.data.synth import write_sift_synth

    other = write_sift_synth(tmp_path / "other.zarr", 6000, seed=3, chunk_rows=1500).path
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    assert run("split", "--dataset", other, "--queries", 20, *sched) == 0
    capsys.readouterr()
    assert (
        run(
            "search",
            "--dataset",
            other,
            "--model",
            pristine / "model",
            "--codes",
            pristine / "codes.zarr",
            "--split",
            "default",
            "--out",
            tmp_path / "r.parquet",
            *sched,
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "were encoded from another dataset" in err and f"encode {other} with this model" in err
    assert not (tmp_path / "r.parquet").exists()


def test_a_dataset_handle_reads_its_labels_and_ids_once_and_verified(tmp_path, monkeypatch):
    from dask_hashcodes.errors import InputError
    from dask_hashcodes.storage.chunkread import ChunkReader
    from dask_hashcodes.storage.datasets import open_dataset, write_dataset
    from dask_hashcodes.views import database_view

    rows, labels = np.arange(60, dtype=np.float32).reshape(20, 3), np.arange(20) % 4
    write_dataset(tmp_path / "d.zarr", [rows], n=20, d=3, dtype="float32", source="test", labels=labels, chunk_rows=8)
    chunk_reads = []  # (array, chunk) of every chunk read from the store
    read_chunk = ChunkReader.__call__
    monkeypatch.setattr(ChunkReader, "__call__", lambda r, i: chunk_reads.append((r.loc.name, i)) or read_chunk(r, i))

    ds = open_dataset(tmp_path / "d.zarr")
    for _ in range(3):
        np.testing.assert_array_equal(ds.labels, labels)
        np.testing.assert_array_equal(ds.ids, np.arange(20))
        database_view(ds)
    assert sorted(chunk_reads) == [("ids", 0), ("labels", 0)]  # one chunk each, read once
    with pytest.raises(ValueError, match="read-only"):
        ds.labels[0] = 7  # every caller shares the handle's array

    chunk_reads.clear()
    database_view(open_dataset(tmp_path / "d.zarr"))  # another handle reads its labels again
    assert {name for name, _ in chunk_reads} == {"labels"}

    # the one read is a verified one: a damaged labels chunk fails the first access
    chunk = tmp_path / "d.zarr" / "labels" / "c" / "0"
    damaged = bytearray(chunk.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    chunk.write_bytes(bytes(damaged))
    with pytest.raises(InputError, match="labels chunk 0 is damaged"):
        database_view(open_dataset(tmp_path / "d.zarr"))


def test_a_split_keeps_its_queries_features_which_their_readers_read_instead_of_the_dataset(tmp_path, monkeypatch):
    import dataclasses

    from dask_hashcodes.evaluation.truth import query_rows
    from dask_hashcodes.storage.chunkread import ChunkReader
    from dask_hashcodes.storage.datasets import open_dataset, write_dataset

    rows = np.arange(120, dtype=np.float32).reshape(40, 3)
    write_dataset(tmp_path / "d.zarr", [rows], n=40, d=3, dtype="float32", source="test", chunk_rows=8)
    made = open_dataset(tmp_path / "d.zarr").make_split(10, seed=1, name="s", threads=2)
    chunk_reads = []  # (array, chunk) of every chunk read from the store
    read_chunk = ChunkReader.__call__
    monkeypatch.setattr(ChunkReader, "__call__", lambda r, i: chunk_reads.append((r.loc.name, i)) or read_chunk(r, i))
    ds = open_dataset(tmp_path / "d.zarr")
    split = ds.get_split("s")
    np.testing.assert_array_equal(split.query, made.query)
    chunk_reads.clear()
    np.testing.assert_array_equal(query_rows(ds, split), rows[split.query])
    assert chunk_reads == [("query_features", 0)]  # one small read, no dataset chunk
    # a split made before splits kept their queries' features: read from the dataset, the same rows
    chunk_reads.clear()
    np.testing.assert_array_equal(query_rows(ds, dataclasses.replace(split, query_features=None)), rows[split.query])
    assert {name for name, _ in chunk_reads} == {"features"}


# ------------------------------------------------------------------ outputs ----------


def test_overwrite_replaces_only_our_own_artifact_of_the_same_kind(pristine, tmp_path, capsys):
    src = tmp_path / "good.npy"
    np.save(src, np.arange(60, dtype=np.float32).reshape(20, 3))
    foreign = tmp_path / "sac"
    (foreign / "important").mkdir(parents=True)
    capsys.readouterr()
    assert run("ingest", src, "--out", foreign, "--overwrite", "--quiet") == 2
    assert "is not a dhash dataset" in capsys.readouterr().err and (foreign / "important").is_dir()
    work = tmp_path / "work"
    shutil.copytree(pristine, work)
    assert run("ingest", src, "--out", work / "model", "--overwrite", "--quiet") == 2  # a model, not a dataset
    assert "is a dhash model" in capsys.readouterr().err and (work / "model" / "model.json").exists()
    assert run("ingest", src, "--out", tmp_path / "d.zarr", "--quiet") == 0
    assert run("ingest", src, "--out", tmp_path / "d.zarr", "--quiet") == 2  # exists, no --overwrite
    assert run("ingest", src, "--out", tmp_path / "d.zarr", "--overwrite", "--quiet") == 0
    assert _no_temporaries(tmp_path)


def test_unwritable_out_is_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    started = time.perf_counter()
    assert run("synth", "sift", "--n", 1000, "--out", blocker / "s.zarr", "--quiet") == 2
    assert "is not a writable directory" in capsys.readouterr().err
    assert time.perf_counter() - started < 5  # no cluster was started, nothing computed


def test_next_writer_removes_temporaries_of_killed_writers(tmp_path):
    from dask_hashcodes.storage.atomic import WRITER_FILE, atomic_output

    final = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / ".out.tmp-deadbeef"
    stale.mkdir()
    (stale / WRITER_FILE).write_text(json.dumps({"host": os.uname().nodename, "pid": int(dead.stdout), "started": ""}))
    (stale / "big").write_bytes(b"x" * 1000)
    alive = tmp_path / ".out.tmp-feedcafe"
    alive.mkdir()
    (alive / WRITER_FILE).write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid(), "started": ""}))
    with atomic_output(final, kind="report") as tmp:
        tmp.child("report.md").write_text("x")
    assert not stale.exists() and alive.exists() and (final / ".dhash-commit.json").exists()


def test_sigterm_removes_the_temporary_and_exits_143(tmp_path):
    """A synth killed with SIGTERM mid-write exits 143 and leaves no `.OUT.tmp-*` behind."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dask_hashcodes.cli",
            "synth",
            "sift",
            "--n",
            "3000000",
            "--chunk-rows",
            "50000",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "s.zarr"),
            "--quiet",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob(".s.zarr.tmp-*/features/c/*")):
        time.sleep(0.05)
    assert list(tmp_path.glob(".s.zarr.tmp-*")), "the writer never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "terminated by SIGTERM" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_damaged_npz_of_models_and_checkpoints_is_a_one_line_error(tmp_path, damage):
    """A checkpoint's changed arrays are refused by its commit record's checksum; bytes that
    are no .npz are a one-line error of the reader too."""
    from dask_hashcodes.errors import InputError
    from dask_hashcodes.hashing.checkpoint import Checkpoint
    from dask_hashcodes.storage.npz import npz_arrays, npz_bytes

    ckpt = Checkpoint(tmp_path / "m.checkpoint", {"method": "itq"})
    ckpt.save(3, {"rotation": np.eye(8)}, {"quantization_loss": [1.0]})
    assert ckpt.load()[0] == 3
    path = tmp_path / "m.checkpoint" / "arrays.npz"
    raw = path.read_bytes()
    assert raw == npz_bytes({"rotation": np.eye(8)})
    damaged = {"truncate": raw[: len(raw) // 2], "flip": raw[:200] + bytes([raw[200] ^ 1]) + raw[201:], "empty": b""}
    path.write_bytes(damaged[damage])
    with pytest.raises(
        InputError, match="arrays.npz differs from its commit record.*remove the checkpoint directory"
    ) as info:
        ckpt.load()
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="arrays.npz is damaged.*re-train it"):
        npz_arrays(damaged[damage], path, "re-train it")


def test_killed_writer_on_s3_does_not_block_the_next_run(s3_server, monkeypatch, capsys, tmp_path):
    """An object-store output whose writer died before its commit marker is unreadable, and
    the next writer replaces it: at once when the writer was on this host and is gone, with
    --overwrite when it may still be running elsewhere."""
    import s3fs

    from dask_hashcodes.storage.atomic import WRITER_FILE

    fs = s3fs.S3FileSystem(**s3_server)
    monkeypatch.setenv("DHASH_STORAGE_OPTIONS", json.dumps(s3_server))
    src = tmp_path / "good.npy"
    np.save(src, np.arange(60, dtype=np.float32).reshape(20, 3))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for host, pid, argv, status in (
        (os.uname().nodename, int(dead.stdout), [], 0),
        ("elsewhere", 1, [], 2),
        ("elsewhere", 1, ["--overwrite"], 0),
    ):
        fs.rm("dhash-test/killed", recursive=True) if fs.exists("dhash-test/killed") else None
        fs.pipe_file("dhash-test/killed/ds.zarr/features/c/0/0", b"half")
        fs.pipe_file(f"dhash-test/killed/ds.zarr/{WRITER_FILE}", json.dumps({"host": host, "pid": pid}).encode())
        fs.invalidate_cache()
        capsys.readouterr()
        assert run("ingest", src, "--out", "s3://dhash-test/killed/ds.zarr", "--quiet", *argv) == status, host
        err = capsys.readouterr().err
        if status:
            assert "is an unfinished write" in err and "--overwrite" in err
        else:
            assert fs.exists("dhash-test/killed/ds.zarr/.dhash-commit.json")
            assert not fs.exists(f"dhash-test/killed/ds.zarr/{WRITER_FILE}")


def test_overwrite_on_s3_removes_exactly_what_dhash_wrote(s3_server, monkeypatch, capsys, tmp_path):
    """On an object store, --overwrite is refused while the artifact's prefix holds an object
    its commit record does not list (or an uncommitted prefix holds one its writer would not
    make), and replacing deletes the listed objects only: a sibling prefix sharing the name's
    start is untouched."""
    import s3fs

    from dask_hashcodes.storage.atomic import WRITER_FILE

    fs = s3fs.S3FileSystem(**s3_server)
    monkeypatch.setenv("DHASH_STORAGE_OPTIONS", json.dumps(s3_server))
    src = tmp_path / "good.npy"
    np.save(src, np.arange(60, dtype=np.float32).reshape(20, 3))
    out = "s3://dhash-test/own/ds.zarr"
    fs.pipe_file("dhash-test/own/ds.zarr-backup/keep.txt", b"mine")
    assert run("ingest", src, "--out", out, "--quiet") == 0
    fs.pipe_file("dhash-test/own/ds.zarr/notes.txt", b"mine")
    fs.invalidate_cache()
    capsys.readouterr()
    assert run("ingest", src, "--out", out, "--overwrite", "--quiet") == 2
    assert "notes.txt" in capsys.readouterr().err and fs.cat_file("dhash-test/own/ds.zarr/notes.txt") == b"mine"
    fs.rm("dhash-test/own/ds.zarr/notes.txt")
    fs.invalidate_cache()
    assert run("ingest", src, "--out", out, "--overwrite", "--quiet") == 0
    assert fs.cat_file("dhash-test/own/ds.zarr-backup/keep.txt") == b"mine"
    # a record that names paths outside its prefix (edited, or copied) deletes nothing there
    record = json.loads(fs.cat_file("dhash-test/own/ds.zarr/.dhash-commit.json"))
    record["files"]["../ds.zarr-backup/keep.txt"] = {"size": 4, "checksum": "sha256:" + "0" * 64}
    fs.pipe_file("dhash-test/own/ds.zarr/.dhash-commit.json", json.dumps(record).encode())
    fs.invalidate_cache()
    assert run("ingest", src, "--out", out, "--overwrite", "--quiet") == 0
    assert fs.cat_file("dhash-test/own/ds.zarr-backup/keep.txt") == b"mine"
    # an uncommitted prefix (a killed writer's) holding a user's object is not dhash's to remove
    fs.pipe_file("dhash-test/own/killed.zarr/features/c/0/0", b"half")
    fs.pipe_file("dhash-test/own/killed.zarr/results.csv", b"mine")
    fs.pipe_file(f"dhash-test/own/killed.zarr/{WRITER_FILE}", json.dumps({"host": "elsewhere", "pid": 1}).encode())
    fs.invalidate_cache()
    assert run("ingest", src, "--out", "s3://dhash-test/own/killed.zarr", "--overwrite", "--quiet") == 2
    assert fs.cat_file("dhash-test/own/killed.zarr/results.csv") == b"mine"


def test_checkpoint_of_a_live_run_is_refused_and_of_a_dead_one_replaced(
    pristine, cluster, tmp_path, capsys, monkeypatch
):
    """Two `dhash train --out X` at once: the second is refused while the first runs; the
    checkpoint a killed run left is discarded by --overwrite (or continued by --resume)."""
    from dask_hashcodes.hashing.checkpoint import Checkpoint

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    train = [
        "train",
        "--dataset",
        pristine / "ds.zarr",
        "--method",
        "itq",
        "--bits",
        16,
        "--out",
        tmp_path / "m",
        "--scheduler",
        cluster.scheduler_address,
        "--quiet",
    ]
    try:
        for pid, extra, status, message in (
            (sleeper.pid, ["--overwrite"], 2, "another training run"),
            (int(dead.stdout), [], 2, "pass --resume to continue it, or --overwrite"),
            (int(dead.stdout), ["--overwrite"], 0, "removed the interrupted run"),
        ):
            # the checkpoint as that process would have written it (a hand-edited one is refused)
            writer = {"host": socket.gethostname(), "pid": pid, "started": ""}
            with monkeypatch.context() as patched:
                patched.setattr("dask_hashcodes.hashing.checkpoint.writer_record", lambda writer=writer: writer)
                Checkpoint(tmp_path / "m.checkpoint", {"method": "itq"}).save(2, {"rotation": np.eye(16)}, {})
            capsys.readouterr()
            assert run(*train, *extra) == status
            assert message in capsys.readouterr().err
    finally:
        sleeper.kill()
    assert (tmp_path / "m" / "model.json").exists() and not (tmp_path / "m.checkpoint").exists()


def test_a_successful_job_prints_no_error_lines(tmp_path):
    """`dhash synth` with progress bars: no scheduler CancelledError traceback on shutdown."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dask_hashcodes.cli",
            "synth",
            "sift",
            "--n",
            "20000",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "s.zarr"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_writer_record_survives_the_zarr_group_creation(tmp_path):
    """A killed writer is recognised by its record: creating the artifact's zarr group must
    not delete it (zarr's mode "w" clears the directory)."""
    from dask_hashcodes.storage.atomic import WRITER_FILE, atomic_output
    from dask_hashcodes.storage.chunkread import new_group

    with atomic_output(tmp_path / "c.zarr", kind="codes") as tmp:
        new_group(tmp).attrs["x"] = 1
        assert tmp.child(WRITER_FILE).exists()
    assert not (tmp_path / "c.zarr" / WRITER_FILE).exists() and (tmp_path / "c.zarr" / ".dhash-commit.json").exists()


def test_scheduled_pipeline_on_s3_skips_unchanged_steps_and_reruns_changed_ones(
    s3_server, cluster, tmp_path, monkeypatch, capsys
):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server)
    monkeypatch.setenv("DHASH_STORAGE_OPTIONS", json.dumps(s3_server))
    X = np.random.default_rng(8).integers(0, 200, (2000, 16)).astype(np.float32)
    write_vecs(tmp_path / "base.fvecs", X)
    fs.put_file(str(tmp_path / "base.fvecs"), "dhash-test/nightly/inbox/base.fvecs")
    (tmp_path / "p.toml").write_text(
        '[pipeline]\nname = "s3"\nworkdir = "work"\n\n'
        '[[steps]]\ncommand = "ingest"\nsource = "s3://dhash-test/nightly/inbox/base.fvecs"\n'
        'out = "s3://dhash-test/nightly/ds.zarr"\n\n'
        '[[steps]]\ncommand = "split"\ndataset = "s3://dhash-test/nightly/ds.zarr"\nqueries = 10\n'
    )
    job = ["run", tmp_path / "p.toml", "--scheduler", cluster.scheduler_address, "--quiet"]

    def statuses():
        log = sorted((tmp_path / "work" / "logs").glob("s3-*.json"))[-1]
        return [s["status"] for s in json.loads(log.read_text())["steps"]]

    assert run(*job) == 0 and statuses() == ["ok", "ok"]
    time.sleep(1.1)  # log names carry the second
    assert run(*job) == 0 and statuses() == ["skipped", "skipped"]
    write_vecs(tmp_path / "base.fvecs", X[:1500])
    fs.put_file(str(tmp_path / "base.fvecs"), "dhash-test/nightly/inbox/base.fvecs")
    time.sleep(1.1)
    assert run(*job) == 0 and statuses() == ["ok", "ok"]


def test_run_storage_options_reach_every_step_on_s3(s3_server, cluster, tmp_path, no_aws_env, capsys):
    """``dhash run --storage-options`` is the only source of credentials: every step reads
    and writes s3:// with them, and the next run finds every step up to date with them."""
    base = "s3://dhash-test/run-options"
    (tmp_path / "p.toml").write_text(
        '[pipeline]\nname = "opts"\nworkdir = "work"\n\n'
        f'[[steps]]\ncommand = "synth"\nkind = "sift"\nn = 1200\nchunk_rows = 400\nout = "{base}/ds.zarr"\n\n'
        f'[[steps]]\ncommand = "split"\ndataset = "{base}/ds.zarr"\nqueries = 20\n\n'
        f'[[steps]]\ncommand = "train"\ndataset = "{base}/ds.zarr"\nmethod = "itq"\nbits = 16\nn_iter = 3\nout = "{base}/itq"\n\n'
        f'[[steps]]\ncommand = "encode"\ndataset = "{base}/ds.zarr"\nmodel = "{base}/itq"\nout = "{base}/codes.zarr"\n'
    )
    job = ["run", tmp_path / "p.toml", "--scheduler", cluster.scheduler_address, "--quiet"]
    job += ["--storage-options", json.dumps(s3_server)]

    def statuses():
        log = sorted((tmp_path / "work" / "logs").glob("opts-*.json"))[-1]
        return [s["status"] for s in json.loads(log.read_text())["steps"]]

    assert run(*job) == 0, capsys.readouterr().err
    assert statuses() == ["ok"] * 4
    assert open_codes(f"{base}/codes.zarr", storage=Storage(s3_server)).reader.shape == (1200, 2)
    time.sleep(1.1)  # log names carry the second
    assert run(*job) == 0, capsys.readouterr().err
    assert statuses() == ["skipped"] * 4
