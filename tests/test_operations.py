"""Operations: what a user watching the dashboard sees, and Dask's
performance report of a job."""

from __future__ import annotations

import json

import pytest

from dask_hashcodes.cli.main import main


def run(*argv):
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def fresh_cluster():
    """A cluster of its own, so the scheduler's task prefixes are only this module's jobs."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as cluster:
        yield cluster


def _task_prefixes(dask_scheduler):
    return sorted(dask_scheduler.task_prefixes)


def test_jobs_show_readable_task_names_and_save_a_performance_report(fresh_cluster, tmp_path):
    from distributed import Client

    sched = ["--scheduler", fresh_cluster.scheduler_address, "--quiet"]
    ds, model, codes = tmp_path / "sift.zarr", tmp_path / "itq", tmp_path / "codes.zarr"
    report = tmp_path / "reports" / "train.html"
    # small, in several chunks: the names are those of any size (the merge of per-chunk top-k too)
    assert run("synth", "sift", "--n", 6000, "--out", ds, "--chunk-rows", 1500, *sched) == 0
    assert run("split", "--dataset", ds, "--queries", 20, *sched) == 0
    assert (
        run(
            "train",
            "--dataset",
            ds,
            "--method",
            "itq",
            "--bits",
            16,
            "--split",
            "default",
            "--out",
            model,
            "--performance-report",
            report,
            *sched,
        )
        == 0
    )
    assert (
        run(
            "train",
            "--dataset",
            ds,
            "--method",
            "dish",
            "--bits",
            16,
            "--nodes",
            3,
            "--max-iter",
            2,
            "--out",
            tmp_path / "dish",
            *sched,
        )
        == 0
    )
    assert run("encode", "--dataset", ds, "--model", model, "--out", codes, *sched) == 0
    assert (
        run(
            "search",
            "--dataset",
            ds,
            "--model",
            model,
            "--codes",
            codes,
            "--k",
            5,
            "--out",
            tmp_path / "r.parquet",
            *sched,
        )
        == 0
    )
    html = report.read_text()
    assert "Dask Performance Report" in html and "itq-gram" in html
    assert [p.name for p in report.parent.iterdir()] == ["train.html"]  # written atomically, no temporary left
    with Client(fresh_cluster) as client:
        prefixes = set(client.run_on_scheduler(_task_prefixes))
    for name in (
        "sift-synth",
        "itq-covariance",
        "itq-gram",
        "dish-mean",
        "dish-gram",
        "dish-admm",
        "itq-encode",
        "hamming-topk",  # one scan task at this size (stored chunks are merged per scan task): no merge step
    ):
        assert name in prefixes, (name, sorted(prefixes))
    # nothing anonymous: every prefix is a named step, none is a bare function name
    anonymous = {p for p in prefixes if p in {"run", "_combine_all", "finalize", "getitem"}}
    assert not anonymous, anonymous


def test_failed_job_leaves_no_performance_report(fresh_cluster, tmp_path, capsys):
    report = tmp_path / "r.html"
    assert (
        run(
            "train",
            "--dataset",
            tmp_path / "missing.zarr",
            "--method",
            "itq",
            "--out",
            tmp_path / "m",
            "--performance-report",
            report,
            "--scheduler",
            fresh_cluster.scheduler_address,
            "--quiet",
        )
        == 2
    )
    assert "not a dataset" in capsys.readouterr().err
    assert not report.exists() and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- separate processes --

REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def process_cluster(tmp_path_factory):
    """`dask scheduler` and two `dask worker` processes (CLI, TCP on 127.0.0.1), configured
    with deploy/dask-worker.yaml as the storage-and-clusters guide tells users: the shape of real hosts. The
    workers run in `/`, not in the client's directory, as on other machines."""
    import os
    import subprocess
    import sys
    import time

    from distributed import Client

    tmp = tmp_path_factory.mktemp("processes")
    scheduler_file = tmp / "scheduler.json"
    dask_cli = str(__import__("pathlib").Path(sys.executable).parent / "dask")
    env = {**os.environ, "DASK_CONFIG": str(REPO / "deploy" / "dask-worker.yaml")}
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    log = open(tmp / "cluster.log", "w")  # noqa: SIM115 - the processes write to it until teardown
    procs = [
        subprocess.Popen(
            [
                dask_cli,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            stdout=log,
            stderr=log,
            env=env,
        )
    ]
    try:
        for _ in range(300):
            if scheduler_file.exists() and scheduler_file.stat().st_size:
                break
            time.sleep(0.1)
        procs += [
            subprocess.Popen(
                [
                    dask_cli,
                    "worker",
                    "--scheduler-file",
                    str(scheduler_file),
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--memory-limit",
                    "4GiB",
                    "--name",
                    f"host-{i}",
                    "--local-directory",
                    str(tmp / f"worker-{i}"),
                ],
                stdout=log,
                stderr=log,
                env=env,
                cwd="/",
            )
            for i in range(2)
        ]
        with Client(scheduler_file=str(scheduler_file), timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
            address = client.scheduler.address
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()


def _metrics(report_dir):
    import json

    report = json.loads((report_dir / "report.json").read_text())
    return {
        (r.get("label", r["method"]), r["n_bits"]): (
            r["model_id"],
            {k: v for k, v in r["metrics"].items() if isinstance(v, float)},
        )
        for r in report["results"]
    }


def test_pipeline_on_separate_scheduler_and_worker_processes_equals_local_cluster(
    process_cluster, fresh_cluster, tmp_path
):
    """The whole evaluate job against `--scheduler tcp://...` (two `dask worker` processes)
    gives the same models (content ids) and every metric identical to the run on a
    LocalCluster of the CLI's default shape (this module's, already running)."""
    from dask_hashcodes.data.synth import write_sift_synth

    ds = write_sift_synth(tmp_path / "sift.zarr", 10000, seed=4, chunk_rows=2500).path
    job = [
        "evaluate",
        "--dataset",
        ds,
        "--methods",
        "itq,dish,sgh",
        "--bits",
        16,
        "--queries",
        50,
        "--ground-truth",
        "euclidean",
        "--top-k",
        20,
        "--nodes",
        3,
        "--max-iter",
        3,
        "--n-bases",
        64,
        "--quiet",
    ]
    assert process_cluster.startswith("tcp://127.0.0.1:")
    assert run(*job, "--scheduler", process_cluster, "--out", tmp_path / "hosts") == 0
    assert run(*job, "--scheduler", fresh_cluster.scheduler_address, "--out", tmp_path / "local") == 0
    hosts, local = _metrics(tmp_path / "hosts"), _metrics(tmp_path / "local")
    assert hosts.keys() == local.keys() and len(hosts) == 4  # dish gives DisH2 and DisH1 rows
    for key in local:
        assert hosts[key][0] == local[key][0], key  # identical learned arrays
        assert hosts[key][1] == pytest.approx(local[key][1], abs=1e-12), key


def test_relative_paths_reach_workers_started_in_another_directory(
    process_cluster, fresh_cluster, tmp_path, monkeypatch
):
    """`dhash synth --out data/s.zarr` then `dhash train --dataset data/s.zarr` against workers
    started in `/`: paths are resolved on the client before anything is sent, so the model
    is the one a local cluster learns (never one trained on zeros from unfound chunks)."""
    monkeypatch.chdir(tmp_path)
    n = 6000
    hosts = ["--scheduler", process_cluster, "--quiet"]
    assert run("synth", "sift", "--n", n, "--chunk-rows", 1500, "--out", "data/s.zarr", *hosts) == 0
    assert run("train", "--dataset", "data/s.zarr", "--method", "itq", "--bits", 32, "--out", "m", *hosts) == 0
    local = ["--scheduler", fresh_cluster.scheduler_address, "--quiet"]
    assert run("train", "--dataset", "data/s.zarr", "--method", "itq", "--bits", 32, "--out", "m-local", *local) == 0
    remote, local = (json.loads((tmp_path / name / "model.json").read_text()) for name in ("m", "m-local"))
    assert remote["model_id"] == local["model_id"]
    assert remote["training"]["quantization_loss"][-1] != n * 32  # n x r: every projection zero
    assert remote["dataset"]["path"] == str(tmp_path / "data" / "s.zarr")


# ---------------------------------------------------------------- checkpoint / resume -


@pytest.mark.parametrize("method, extra", [("dish", ["--nodes", 3, "--max-iter", 12])])  # itq: same code path
def test_train_killed_mid_run_resumes_to_the_same_model(fresh_cluster, tmp_path, capsys, method, extra):
    """`dhash train` on its own local cluster is killed (SIGKILL to the client with its
    scheduler and workers) once its checkpoint holds iteration 3 or later; the model is not
    there, a plain rerun refuses to overwrite the state, `--resume` finishes the run and gives
    the model (content id) an uninterrupted run gives. The uninterrupted run and the reruns
    use this module's running cluster of the same shape."""
    import json

    from dask_hashcodes.data.synth import write_sift_synth
    from tests.killing import kill_after_checkpoint

    ds = write_sift_synth(tmp_path / "sift.zarr", 30000, seed=5, chunk_rows=8192).path
    job = ["train", "--dataset", str(ds), "--method", method, "--bits", "16", "--quiet", *map(str, extra)]
    here = ["--scheduler", fresh_cluster.scheduler_address]
    assert run(*job, *here, "--out", tmp_path / "reference") == 0
    out = tmp_path / "model"
    state = tmp_path / "model.checkpoint" / "state.json"
    kill_after_checkpoint([*job, "--workers", "2", "--out", out], state)
    assert not out.exists()
    assert 3 <= json.loads(state.read_text())["iteration"] < (12 if method == "dish" else 30)

    assert run(*job, *here, "--out", out) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert run(*job, *here, "--out", out, "--resume") == 0
    reference = json.loads((tmp_path / "reference" / "model.json").read_text())
    resumed = json.loads((out / "model.json").read_text())
    assert resumed["model_id"] == reference["model_id"]
    assert not state.parent.exists()
    key = "objective" if method == "dish" else "quantization_loss"
    assert resumed["training"][key] == pytest.approx(reference["training"][key], rel=1e-12)


# ---------------------------------------------------------------- worker killed -------


class KillWorkerOnce:
    """Worker plugin: the first worker to finish ``after`` tasks of ``prefix`` SIGKILLs
    itself (a real crash: no cleanup, no goodbye to the scheduler). Creating the marker file
    exclusively decides which worker that is, and makes it happen once (the nanny's
    replacement worker gets the plugin again)."""

    def __init__(self, prefix, after, marker):
        self.prefix, self.after, self.marker = prefix, after, str(marker)

    def setup(self, worker):
        self.done = 0

    def transition(self, key, start, finish, **kwargs):
        import os
        import signal

        from dask.utils import key_split

        if finish != "memory" or key_split(key) != self.prefix:
            return
        self.done += 1
        if self.done == self.after:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            os.kill(os.getpid(), signal.SIGKILL)


def test_worker_killed_during_training_and_encoding_changes_no_output(process_cluster, tmp_path):
    """One `dask worker` process is SIGKILLed in the middle of DisH training, then in the
    middle of encoding. Both jobs complete; the model (content id) and every codes byte equal
    the undisturbed runs, and no partial output or temporary is left."""
    import sys

    import cloudpickle
    import numpy as np
    from distributed import Client
    from distributed.diagnostics.plugin import WorkerPlugin

    from dask_hashcodes.data.synth import write_sift_synth
    from dask_hashcodes.storage.codes import open_codes

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    plugin_type = type("KillWorkerOncePlugin", (KillWorkerOnce, WorkerPlugin), {})
    ds = write_sift_synth(tmp_path / "sift.zarr", 60000, seed=6, chunk_rows=4096).path
    sched = ["--scheduler", process_cluster, "--quiet"]
    train = ["train", "--dataset", ds, "--method", "dish", "--bits", 16, "--nodes", 3, "--max-iter", 6, *sched]
    encode = ["encode", "--dataset", ds, "--model", tmp_path / "reference", *sched]
    assert run(*train, "--out", tmp_path / "reference") == 0
    assert run(*encode, "--out", tmp_path / "reference-codes.zarr") == 0

    with Client(process_cluster, timeout="30s") as client:
        # nodes hold their rows, so a worker runs one dish-gram task per node per iteration
        # (2 nodes of 3 on one of 2 workers): its 4th falls in the second iteration
        client.register_plugin(plugin_type("dish-gram", 4, tmp_path / "killed-training"), name="kill-train")
        assert run(*train, "--out", tmp_path / "disturbed") == 0
        client.unregister_worker_plugin("kill-train")
        client.wait_for_workers(2, timeout=60)
        client.register_plugin(plugin_type("dish-encode", 3, tmp_path / "killed-encoding"), name="kill-enc")
        assert run(*encode, "--out", tmp_path / "disturbed-codes.zarr") == 0
        client.unregister_worker_plugin("kill-enc")
        client.wait_for_workers(2, timeout=60)
    assert (tmp_path / "killed-training").exists() and (tmp_path / "killed-encoding").exists()

    reference = json.loads((tmp_path / "reference" / "model.json").read_text())
    disturbed = json.loads((tmp_path / "disturbed" / "model.json").read_text())
    assert disturbed["model_id"] == reference["model_id"]
    assert disturbed["training"]["objective"] == reference["training"]["objective"]
    assert disturbed["training"]["worker_changes"] >= 1  # the kill fell inside training
    assert disturbed["training"]["redone_steps"] >= 1  # ... while a step was pending: it was redone
    a, b = (open_codes(tmp_path / name) for name in ("reference-codes.zarr", "disturbed-codes.zarr"))
    assert np.array_equal(a.reader[:], b.reader[:]) and a.attrs == b.attrs
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            "sift.zarr",
            "reference",
            "reference-codes.zarr",
            "disturbed",
            "disturbed-codes.zarr",
            "killed-training",
            "killed-encoding",
        ]
    )


# ---------------------------------------------------------------- scheduled pipelines --

CONFIGS = REPO / "jobs" / "configs"


def _last_record(workdir, name):
    return json.loads(max((workdir / "logs").glob(f"{name}-*.json"), key=lambda p: p.stat().st_mtime_ns).read_text())


def test_scheduled_pipelines_run_skip_and_never_overlap(fresh_cluster, tmp_path, capsys):
    """weekly.toml then nightly.toml (the shipped files, small sizes via --set) on an
    exported .bvecs: models, a dated report, codes and dated search results; a second
    nightly run skips every step; a run started while another holds the workdir exits 75
    and leaves the first run's outputs intact."""
    import subprocess
    import sys
    import time

    import numpy as np

    from dask_hashcodes.data.synth import write_sift_synth
    from dask_hashcodes.data.texmex import write_vecs
    from dask_hashcodes.storage.codes import open_codes
    from dask_hashcodes.storage.datasets import open_dataset

    rows = open_dataset(write_sift_synth(tmp_path / "src.zarr", 6000, seed=7, chunk_rows=2000).path).features_dask()
    work = tmp_path / "work"
    (work / "inbox").mkdir(parents=True)
    write_vecs(work / "inbox" / "base.bvecs", np.asarray(rows.compute()))
    common = [
        "--workdir",
        work,
        "--date",
        "2026-11-20",
        "--set",
        "inbox=inbox/base.bvecs",
        "--set",
        "queries=40",
        "--scheduler",
        fresh_cluster.scheduler_address,
        "--quiet",
    ]
    assert (
        run(
            "run",
            CONFIGS / "weekly.toml",
            *common,
            "--set",
            "bits=16",
            "--set",
            "nodes=3",
            "--set",
            "methods=lsh,itq,dish",
            "--set",
            "top_k=20",
        )
        == 0
    )
    assert (work / "reports" / "2026-11-20" / "report.json").exists() and (work / "models" / "current").exists()
    assert [s["status"] for s in _last_record(work, "weekly")["steps"]] == ["ok"] * 4
    report = json.loads((work / "reports" / "2026-11-20" / "report.json").read_text())
    maps = {(r.get("label", r["method"])): r["metrics"]["map"] for r in report["results"]}
    assert maps["itq"] > maps["lsh"]

    nightly = ["run", CONFIGS / "nightly.toml", *common, "--set", "k=10"]
    assert run(*nightly) == 0
    assert [s["status"] for s in _last_record(work, "nightly")["steps"]] == ["skipped", "skipped", "ok", "ok"]
    assert (work / "results" / "2026-11-20.parquet").exists()
    assert run(*nightly) == 0  # nothing changed: every step is skipped
    assert [s["status"] for s in _last_record(work, "nightly")["steps"]] == ["skipped"] * 4
    codes = open_codes(work / "index" / "codes.zarr").reader[:]

    first = subprocess.Popen(
        [sys.executable, "-m", "dask_hashcodes.cli", *map(str, nightly[:]), "--force"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = work / ".dhash-run" / "lock"
    deadline = time.time() + 60
    while time.time() < deadline and first.poll() is None:
        try:
            if json.loads(lock.read_text())["pid"] == first.pid:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    capsys.readouterr()
    assert run(*nightly, "--force") == 75
    err = capsys.readouterr().err
    assert "another dhash run holds the lock" in err and f'"pid": {first.pid}' in err and err.count("\n") == 1
    _, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    assert np.array_equal(open_codes(work / "index" / "codes.zarr").reader[:], codes)
    assert not [p for p in (work / "index").iterdir() if p.name.startswith(".")]  # no temporaries left


def test_bad_pipeline_file_is_one_line_error_and_runs_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[pipeline]\nname = "x"\n[[steps]]\ncommand = "encode"\ndataset = "d.zarr"\nbits = 3\n')
    assert run("run", bad) == 2
    err = capsys.readouterr().err
    assert "step 1" in err and "unknown key 'bits'" in err and err.count("\n") == 1
    bad.write_text('[[steps]]\ncommand = "encode"\ndataset = "{nowhere}"\n')
    assert run("run", bad) == 2
    assert "unknown variable 'nowhere'" in capsys.readouterr().err
    bad.write_text('[[steps]]\ncommand = "encode"\ndataset = "d.zarr"\n')
    assert run("run", bad) == 2
    assert "missing model, out" in capsys.readouterr().err
    bad.write_text('pipeline = "nightly"\nsteps = [1]\n')
    assert run("run", bad) == 2
    assert "pipeline must be a table" in capsys.readouterr().err
    assert run("run", tmp_path / "missing.toml") == 2
    assert "pipeline file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def _compiled_signatures() -> tuple[int, int]:
    """In a worker: how many compiled signatures the Hamming scan kernel and multi-index
    hashing's search kernel hold there."""
    from dask_hashcodes.kernels import hamming, mih

    return len(hamming._hamming_topk_tiled.signatures), len(mih._mih_topk.signatures)


@pytest.mark.parametrize("warm", [(), ("mih",)], ids=["scan", "scan-and-mih"])
def test_embedded_cluster_workers_run_a_compiled_kernel_as_they_start(warm):
    """connect()'s workers load a compiled kernel in the background as they start (the
    preload, ``dask_setup``), before any task asks for one: the second or so that costs a process
    is not paid by the job's first tasks. Multi-index hashing's kernels load too when asked
    (a search through an index), and only then."""
    import time

    from dask_hashcodes.cli.commands import kernels_to_warm
    from dask_hashcodes.distributed.cluster import connect, disconnect

    assert kernels_to_warm("search", {"index": None}) == () == kernels_to_warm("train", {})
    client = connect(None, workers=2, threads=1, quiet=True, warm=warm)
    try:
        deadline = time.monotonic() + 60
        while True:
            loaded = client.run(_compiled_signatures)
            if all(scan and (mih or not warm) for scan, mih in loaded.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(loaded) == 2 and all(scan for scan, _ in loaded.values()), loaded
        assert all(bool(mih) == bool(warm) for _, mih in loaded.values()), loaded
    finally:
        disconnect(client)
