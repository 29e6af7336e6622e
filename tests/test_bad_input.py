"""Bad input through the real command line: one line ``error: <problem; fix>``, exit 2.

Each case runs ``dask_hashcodes.cli.main.main`` in-process on real files, zarr stores and a real S3 API
(moto's standalone server on loopback, set to check every request's signature against
an IAM user it holds), and checks: status 2, exactly one line on stderr starting with
``error:``, no traceback, and a message that names the problem and its fix.
"""

from __future__ import annotations

import io
import json
import os
import socket
import urllib.request

import numpy as np
import pytest

from dask_hashcodes.cli.main import main


def run(*argv):
    return main([str(a) for a in argv])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _npy(path, array) -> str:
    np.save(path, array)
    return str(path)


# ------------------------------------------------------------------ S3 ----------------


def _moto_auth(endpoint: str, count: str) -> None:
    """Requests moto serves before it checks signatures ("inf": never checks, its default)."""
    request = urllib.request.Request(
        endpoint + "/moto-api/reset-auth", data=count.encode(), method="POST", headers={"Content-Type": "text/plain"}
    )
    urllib.request.urlopen(request).close()


@pytest.fixture(scope="module")
def s3_auth():
    """moto's S3 server requiring real credentials: an IAM user allowed everything, a bucket
    ``dhash-bad`` holding ``x.npy``. Yields the good storage options."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    setup = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "setup"}
    setup["aws_secret_access_key"] = "setup"
    iam = boto3.client("iam", **setup)
    iam.create_user(UserName="dhash")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="dhash", PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="dhash")["AccessKey"]
    # a user who may do everything but read feature chunks: the client opens a dataset, the
    # workers are refused
    iam.create_user(UserName="no-chunks")
    deny = {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::dhash-bad/*/features/c/*"}
    policy_no_chunks = {**policy, "Statement": [*policy["Statement"], deny]}
    iam.put_user_policy(UserName="no-chunks", PolicyName="no-chunks", PolicyDocument=json.dumps(policy_no_chunks))
    no_chunks = iam.create_access_key(UserName="no-chunks")["AccessKey"]
    s3 = boto3.client("s3", **setup)
    s3.create_bucket(Bucket="dhash-bad")
    buf = io.BytesIO()
    np.save(buf, np.arange(40, dtype=np.float32).reshape(10, 4))
    s3.put_object(Bucket="dhash-bad", Key="x.npy", Body=buf.getvalue())
    _moto_auth(endpoint, "0")  # from now on every request must be signed by a known key
    try:
        yield {
            "endpoint_url": endpoint,
            "key": key["AccessKeyId"],
            "secret": key["SecretAccessKey"],
            "no-chunks": {"key": no_chunks["AccessKeyId"], "secret": no_chunks["SecretAccessKey"]},
        }
    finally:
        _moto_auth(endpoint, "inf")  # the setting is process-wide: other moto servers must not check
        server.stop()


@pytest.fixture
def s3_options(s3_auth) -> dict:
    """Storage options of the user allowed everything."""
    return {k: v for k, v in s3_auth.items() if k != "no-chunks"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _s3_case(good, case):
    """(storage options, what the message must say) of each bad S3 setting."""
    return {
        "wrong-secret": ({**good, "secret": "not-the-secret"}, "credentials"),
        "no-credentials": ({"endpoint_url": good["endpoint_url"]}, "no credentials"),
        "endpoint-down": ({**good, "endpoint_url": f"http://127.0.0.1:{_closed_port()}"}, "endpoint_url"),
        "unknown-option": ({**good, "endpoint": good["endpoint_url"]}, "'endpoint'"),
    }[case]


# an endpoint that is down costs its connection retries' time: out of the fast tier
CASES_S3 = ["wrong-secret", "no-credentials", pytest.param("endpoint-down", marks=pytest.mark.slow), "unknown-option"]


@pytest.mark.parametrize("case", CASES_S3)
def test_s3_source_with_bad_storage_options_is_one_line(s3_options, no_aws_env, tmp_path, capsys, case):
    options, says = _s3_case(s3_options, case)
    url = "s3://dhash-bad/x.npy"
    assert run("ingest", url, "--out", tmp_path / "ds.zarr", "--storage-options", json.dumps(options), "--quiet") == 2
    line = one_error_line(capsys)
    assert url in line and says in line and "no such file" not in line, line
    assert not (tmp_path / "ds.zarr").exists()


@pytest.mark.parametrize("case", CASES_S3)
def test_s3_output_with_bad_storage_options_is_one_line(s3_options, no_aws_env, tmp_path, capsys, case):
    options, says = _s3_case(s3_options, case)
    src = _npy(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    url = "s3://dhash-bad/out/ds.zarr"
    assert run("ingest", src, "--out", url, "--storage-options", json.dumps(options), "--quiet") == 2
    line = one_error_line(capsys)
    assert url in line and says in line, line


def test_s3_missing_bucket_is_one_line(s3_options, no_aws_env, tmp_path, capsys):
    src = _npy(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    url = "s3://no-such-bucket/ds.zarr"
    assert run("ingest", src, "--out", url, "--storage-options", json.dumps(s3_options), "--quiet") == 2
    line = one_error_line(capsys)
    assert url in line and "does not exist" in line and "create the bucket" in line, line


def test_s3_good_credentials_work(s3_options, no_aws_env, tmp_path, capsys):
    """The server of the cases above does accept the right key and secret."""
    opts = json.dumps(s3_options)
    assert run("ingest", "s3://dhash-bad/x.npy", "--out", tmp_path / "ds.zarr", "--storage-options", opts) == 0


def test_s3_error_on_a_dask_worker_is_one_line(s3_options, s3_auth, no_aws_env, tmp_path, cluster, capsys):
    """The client may open the dataset; the workers reading its chunks are refused. The
    error crosses from the worker to the client (as the same type, its cause dropped)."""
    src = _npy(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(20, 4)))
    url = "s3://dhash-bad/worker/ds.zarr"
    good = json.dumps(s3_options)
    assert run("ingest", src, "--out", url, "--chunk-rows", 5, "--storage-options", good, "--quiet") == 0
    limited = json.dumps({**s3_options, **s3_auth["no-chunks"]})
    argv = ["train", "--dataset", url, "--method", "pcah", "--bits", 2, "--out", tmp_path / "model"]
    capsys.readouterr()
    assert run(*argv, "--storage-options", limited, "--scheduler", cluster.scheduler_address, "--quiet") == 2
    line = one_error_line(capsys)
    assert url in line and "refused" in line and "credentials" in line, line
    assert not (tmp_path / "model").exists()


def test_s3_error_in_a_run_step_is_one_line(s3_options, no_aws_env, tmp_path, capsys):
    src = _npy(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        f'[pipeline]\nname = "p"\nworkdir = "work"\n\n[[steps]]\ncommand = "ingest"\nsource = "{src}"\n'
        'out = "s3://no-such-bucket/ds.zarr"\n'
    )
    assert run("run", pipe, "--storage-options", json.dumps(s3_options), "--quiet") == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1, err
    assert "s3://no-such-bucket/ds.zarr" in errors[0] and "create the bucket" in errors[0], err


# ------------------------------------------------------------------ dhash run --------


def test_run_passes_its_storage_options_to_the_steps(s3_options, no_aws_env, tmp_path, capsys):
    import s3fs

    src = _npy(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        f'[pipeline]\nname = "p"\nworkdir = "work"\n\n[[steps]]\ncommand = "ingest"\nsource = "{src}"\n'
        'out = "s3://dhash-bad/run/ds.zarr"\n'
    )
    assert run("run", pipe, "--storage-options", json.dumps(s3_options), "--quiet") == 0, capsys.readouterr().err
    fs = s3fs.S3FileSystem(**s3_options, skip_instance_cache=True)
    assert fs.exists("dhash-bad/run/ds.zarr/.dhash-commit.json")


def test_run_refuses_an_unknown_set_variable(tmp_path, capsys):
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        '[pipeline]\nname = "p"\n\n[vars]\nbits = 32\nmethod = "lsh"\n\n[[steps]]\ncommand = "train"\n'
        'dataset = "ds.zarr"\nmethod = "{method}"\nbits = "{bits}"\nout = "m"\n'
    )
    assert run("run", pipe, "--set", "bit=64", "--dry-run") == 2
    line = one_error_line(capsys)
    assert "'bit'" in line and "bits" in line and "method" in line, line


# ------------------------------------------------------------------ paths, values ----


def test_non_utf8_dataset_path_is_one_line(tmp_path, capsys):
    src = _npy(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/x\xff.zarr")
    assert run("ingest", src, "--out", out, "--quiet") == 2
    line = one_error_line(capsys)
    assert "UTF-8" in line and "\\xff" in line, line


def test_values_whose_square_overflows_are_refused_at_ingest(tmp_path, capsys):
    x = np.ones((10, 4))
    x[7, 2] = 1e300  # finite, but its square is not
    src = _npy(tmp_path / "x.npy", x)
    assert run("ingest", src, "--out", tmp_path / "ds.zarr", "--quiet") == 2
    line = one_error_line(capsys)
    assert "row 7" in line and "rescale" in line, line
    assert not (tmp_path / "ds.zarr").exists()


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_bits_out_of_range_is_one_line(tmp_path, capsys, command):
    argv = [command, "--dataset", tmp_path / "ds.zarr", "--bits", "99999999999999999999", "--out", tmp_path / "o"]
    if command == "train":
        argv += ["--method", "lsh"]
    assert run(*argv) == 2
    line = one_error_line(capsys)
    assert "--bits" in line and "4096" in line, line


def test_bits_out_of_range_in_a_config_is_one_line(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("bits = 5000\n")
    argv = ["train", "--dataset", tmp_path / "ds.zarr", "--method", "lsh", "--out", tmp_path / "o", "--config", config]
    assert run(*argv) == 2
    line = one_error_line(capsys)
    assert "bits" in line and "4096" in line, line


def test_string_switch_in_config_suggests_the_boolean_it_spells(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text('overwrite = "false"\n')
    src = _npy(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    assert run("ingest", src, "--out", tmp_path / "ds.zarr", "--config", config) == 2
    line = one_error_line(capsys)
    assert "overwrite = false" in line and "= true" not in line, line


# ------------------------------------------------------------------ manifests --------


@pytest.fixture
def dataset(tmp_path):
    """A committed 4-chunk dataset (20 x 4 float64, 5 rows a chunk)."""
    src = _npy(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(20, 4)))
    assert run("ingest", src, "--out", tmp_path / "ds.zarr", "--chunk-rows", 5, "--quiet") == 0
    return tmp_path / "ds.zarr"


def _edit_manifest(ds, edit) -> None:
    record_file = ds / ".dhash-commit.json"
    record = json.loads(record_file.read_text())
    edit(record["manifest"]["arrays"]["features"])
    record_file.write_text(json.dumps(record))


def _train(ds, tmp_path, cluster):
    out = tmp_path / "model"
    return run(
        "train", "--dataset", ds, "--method", "pcah", "--bits", 2, "--out", out, "--scheduler", cluster, "--quiet"
    )


def test_manifest_one_checksum_short_is_one_line(dataset, tmp_path, cluster, capsys):
    _edit_manifest(dataset, lambda features: features["checksums"].pop())
    capsys.readouterr()
    assert _train(dataset, tmp_path, cluster.scheduler_address) == 2
    line = one_error_line(capsys)
    assert "features" in line and "3 chunk checksums" in line and "4 chunks" in line and "re-" in line, line


@pytest.mark.parametrize(
    "field, value",
    [("dtype", "<f4"), ("chunk_rows", 4), ("shape", [20, 5])],
)
def test_manifest_mismatch_names_the_field(dataset, tmp_path, cluster, capsys, field, value):
    _edit_manifest(dataset, lambda features: features.__setitem__(field, value))
    capsys.readouterr()
    assert _train(dataset, tmp_path, cluster.scheduler_address) == 2
    line = one_error_line(capsys)
    assert f"{field} " in line and "differs from its manifest" in line, line
    shown = " x ".join(map(str, value)) if field == "shape" else str(value)  # a shape in words, not a list
    assert shown in line and "[" not in line, line


def test_an_index_given_as_the_dataset_is_named_and_a_dataset_asked_for(dataset, tmp_path, cluster, capsys):
    """An inverted-file index where a dataset goes: the message says what it is and to pass a
    dataset (re-creating the index would not help); passing the dataset works."""
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    model, codes, index = tmp_path / "lsh", tmp_path / "c.zarr", tmp_path / "ivf.zarr"
    assert run("train", "--dataset", dataset, "--method", "lsh", "--bits", 8, "--out", model, *sched) == 0
    assert run("encode", "--dataset", dataset, "--model", model, "--out", codes, *sched) == 0
    assert (
        run("index", "--codes", codes, "--kind", "ivf", "--lists", 2, "--dataset", dataset, "--out", index, *sched) == 0
    )
    capsys.readouterr()
    assert run("split", "--dataset", index, "--queries", 5, *sched) == 2
    line = one_error_line(capsys)
    assert f"{index} is a dhash ivf-index (written by `dhash index`), not a dataset; pass a dataset there" in line
    assert "re-create" not in line, line
    assert run("split", "--dataset", dataset, "--queries", 5, *sched) == 0  # the remedy


def test_a_storage_error_names_the_storage_urls_not_the_scheduler():
    """A command line holds the scheduler's tcp:// address beside its s3:// URLs: a storage
    error names only the latter."""
    import botocore.exceptions

    from dask_hashcodes.storage.location import storage_error

    error = storage_error(botocore.exceptions.NoCredentialsError(), urls=["tcp://127.0.0.1:8786", "s3://b/x.npy"])
    assert str(error).startswith("s3://b/x.npy: no credentials") and "tcp://" not in str(error), error
