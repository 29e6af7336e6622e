"""The dhash jobs end to end through the CLI, against a running scheduler (--scheduler),
and their bad-input behaviour: exit status 2, one line naming problem and fix, no output."""

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from dask_hashcodes.cli.main import main
from dask_hashcodes.data.texmex import write_vecs
from dask_hashcodes.indexes.residual import ResidualIVF
from dask_hashcodes.storage.codes import open_codes
from dask_hashcodes.storage.datasets import open_dataset
from tests import reference as ref
from tests.schemas import validate


def run(*argv):
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def pipeline_run(cluster, tmp_path_factory):
    """synth -> split -> groundtruth -> train -> encode -> search on a 60k sift-synth set."""
    tmp = tmp_path_factory.mktemp("cli")
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    ds, model, codes, res = tmp / "sift.zarr", tmp / "itq", tmp / "codes.zarr", tmp / "res.parquet"
    assert run("synth", "sift", "--n", 60000, "--seed", 3, "--out", ds, "--chunk-rows", 16384, *sched) == 0
    assert run("split", "--dataset", ds, "--queries", 50, "--seed", 1, *sched) == 0
    assert run("groundtruth", "--dataset", ds, "--top-k", 20, *sched) == 0
    assert (
        run("train", "--dataset", ds, "--method", "itq", "--bits", 32, "--split", "default", "--out", model, *sched)
        == 0
    )
    assert run("encode", "--dataset", ds, "--model", model, "--out", codes, *sched) == 0
    assert run("search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 10, "--out", res, *sched) == 0
    return tmp, ds, model, codes, res


def test_cli_pipeline_results_equal_bruteforce(pipeline_run):
    tmp, ds_path, model, codes_path, res = pipeline_run
    ds = open_dataset(ds_path)
    split = ds.get_split("default")
    codes = open_codes(codes_path).reader.read_all()
    db_rows = np.setdiff1d(np.arange(ds.n), split.query)
    want_d, want_i = ref.topk_bruteforce(ref.popcount_distances(codes[split.query], codes[db_rows]), db_rows, 10)
    t = pq.read_table(res)
    got_i = t.column("id").to_numpy().reshape(50, 10)
    got_d = t.column("hamming").to_numpy().reshape(50, 10)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_d, want_d)
    np.testing.assert_array_equal(t.column("query_id").to_numpy().reshape(50, 10)[:, 0], split.query)
    # ground truth stored once, exact (checked against brute force on the queries)
    gt = ds.get_groundtruth(ds.groundtruth_names()[0])
    X = ds.features[...]
    _, want_nn = ref.l2_topk_bruteforce(X[split.query[:5]], X[db_rows], db_rows, 20)
    np.testing.assert_array_equal(gt[0][:5], want_nn)
    assert json.loads((model / "model.json").read_text())["dataset"]["split"]["seed"] == 1
    assert t.num_rows == 500


def test_cli_radius_search_and_config_file(pipeline_run, cluster, tmp_path):
    _, ds, model, codes, _ = pipeline_run
    cfg = tmp_path / "search.toml"
    cfg.write_text(f'dataset = "{ds}"\nmodel = "{model}"\ncodes = "{codes}"\n[search]\nradius = 4\n')
    out = tmp_path / "radius.parquet"
    assert run("search", "--config", cfg, "--out", out, "--scheduler", cluster.scheduler_address, "--quiet") == 0
    t = pq.read_table(out)
    assert t.num_rows > 0 and max(t.column("hamming").to_numpy()) <= 4


def test_search_through_a_multi_index_gives_the_linear_scans_results(pipeline_run, cluster, tmp_path, capsys):
    _, ds, model, codes, res = pipeline_run
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    index = tmp_path / "codes.mih"
    assert run("index", "--codes", codes, "--out", index, *sched) == 0  # 4 shards of 16384 codes
    out = tmp_path / "mih.parquet"
    search = ["search", "--dataset", ds, "--model", model, "--codes", codes]
    assert run(*search, "--k", 10, "--index", index, "--out", out, *sched) == 0
    assert pq.read_table(out).equals(pq.read_table(res))  # the split's queries left out as in the scan
    linear, through_index = tmp_path / "r-linear.parquet", tmp_path / "r-mih.parquet"
    assert run(*search, "--radius", 6, "--out", linear, *sched) == 0
    assert run(*search, "--radius", 6, "--index", index, "--out", through_index, *sched) == 0
    assert pq.read_table(through_index).equals(pq.read_table(linear)) and pq.read_table(linear).num_rows > 0
    capsys.readouterr()
    # a substring count whose tables would be too large; an index of other codes; a damaged index
    too_long = tmp_path / "too-long.mih"
    assert run("index", "--codes", codes, "--substrings", 1, "--out", too_long, *sched) == 2
    assert "at least 2 substrings" in _one_line_error(capsys) and not too_long.exists()
    other_model, other_codes, bad = tmp_path / "lsh", tmp_path / "other.zarr", tmp_path / "bad.parquet"
    # any other model's codes of the same rows (LSH: no training passes)
    assert run("train", "--dataset", ds, "--method", "lsh", "--bits", 32, "--out", other_model, *sched) == 0
    assert run("encode", "--dataset", ds, "--model", other_model, "--out", other_codes, *sched) == 0
    capsys.readouterr()
    other = ["search", "--dataset", ds, "--model", other_model, "--codes", other_codes, "--index", index]
    assert run(*other, "--out", bad, *sched) == 2
    assert "was built from other codes" in _one_line_error(capsys) and not bad.exists()
    damaged = tmp_path / "damaged.mih"
    shutil.copytree(index, damaged)  # the good index, then one chunk of it damaged
    chunk = sorted(p for p in (damaged / "order" / "c").rglob("*") if p.is_file())[0]
    chunk.write_bytes(chunk.read_bytes()[:-8] + bytes(8))
    # a radius search reads the tables (a top-10 here runs the scan without reading them: the
    # index's calibration rules them out)
    assert run(*search, "--radius", 6, "--index", damaged, "--out", bad, *sched) == 2
    assert "damaged" in _one_line_error(capsys) and not bad.exists()


def test_search_through_a_residual_index_answers_the_euclidean_top_k(pipeline_run, cluster, tmp_path, capsys):
    _, ds_path, model, codes, _ = pipeline_run
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    index, out = tmp_path / "sift.residual", tmp_path / "residual.parquet"
    assert run("index", "--kind", "residual", "--dataset", ds_path, "--out", index, *sched) == 0
    capsys.readouterr()
    assert run("search", "--dataset", ds_path, "--index", index, "--k", 10, "--recall", "--out", out, *sched) == 0
    printed = capsys.readouterr().out
    table = pq.read_table(out)
    for row in table.slice(0, 3).to_pylist():
        validate(row, "search-results.schema.json")
    ds = open_dataset(ds_path)
    split = ds.get_split("default")
    X = ds.features[...].astype(np.float64)
    ids = table.column("id").to_numpy().reshape(50, 10)
    l2 = table.column("l2").to_numpy().reshape(50, 10)
    assert "hamming" not in table.column_names
    np.testing.assert_array_equal(table.column("query_id").to_numpy().reshape(50, 10)[:, 0], split.query)
    assert not np.isin(ids, split.query).any()  # the split's queries are not in the index
    # uint8 rows are re-ranked exactly: each distance is the true one, in ascending order
    np.testing.assert_array_equal(l2, ((X[ids] - X[split.query][:, None]) ** 2).sum(-1))
    assert (np.diff(l2, axis=1) >= 0).all()
    db_rows = np.setdiff1d(np.arange(ds.n), split.query)
    # the command adds nothing to the library's index of the same rows (the dataset's row ids)
    library = ResidualIVF.build(ds.features[...][db_rows], seed=0, ids=db_rows)
    np.testing.assert_array_equal(ids, library.search(X[split.query], 10)[1])
    _, truth = ref.l2_topk_bruteforce(X[split.query], X[db_rows], db_rows, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth)])
    assert f"recall@10 of the exact Euclidean top-10: {recall:.4f}" in printed and recall >= 0.8, printed
    # more lists per query find more of the true neighbours
    assert run("search", "--dataset", ds_path, "--index", index, "--k", 10, "--nprobe", 96, "--recall",
               "--out", tmp_path / "deeper.parquet", *sched) == 0  # fmt: skip
    deeper_ids = pq.read_table(tmp_path / "deeper.parquet").column("id").to_numpy().reshape(50, 10)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(deeper_ids, truth)]) > recall

    # what does not apply is refused before any work, and leaves no output
    bad = tmp_path / "bad.parquet"
    through = ["search", "--dataset", ds_path, "--index", index, "--out", bad, *sched]
    assert run(*through, "--model", model, "--codes", codes) == 2
    assert "--model, --codes do not apply to a search through the residual index" in _one_line_error(capsys)
    assert run("search", "--dataset", ds_path, "--out", bad, *sched) == 2
    assert "--model and --codes are required for a Hamming search" in _one_line_error(capsys)
    assert (
        run("index", "--kind", "residual", "--dataset", ds_path, "--codes", codes, "--out", tmp_path / "r2", *sched)
        == 2
    )
    assert "--codes does not apply with --kind residual" in _one_line_error(capsys)
    assert run("index", "--out", tmp_path / "m2", *sched) == 2
    assert "add --codes" in _one_line_error(capsys)
    user_folder = tmp_path / "mine"
    user_folder.mkdir()
    (user_folder / "notes.txt").write_text("keep")
    assert run("index", "--kind", "residual", "--dataset", ds_path, "--out", user_folder, "--overwrite", *sched) == 2
    assert (user_folder / "notes.txt").read_text() == "keep"
    capsys.readouterr()
    # a search of another split than the one the index holds
    assert run("split", "--dataset", ds_path, "--name", "other", "--queries", 20, "--seed", 9, *sched) == 0
    capsys.readouterr()
    assert run(*through, "--split", "other") == 2
    assert "holds the database rows of split 'default', and a search of split 'other'" in _one_line_error(capsys)
    assert not bad.exists() and not (tmp_path / "r2").exists() and not (tmp_path / "m2").exists()


def test_residual_index_tunes_on_leave_one_out_rows_of_the_data(pipeline_run, cluster, tmp_path, capsys):
    """--tune-rows chooses nprobe and eps on indexed rows drawn with the seed, each searched
    for its 10 nearest among the others: the recall it reports is that of brute force with
    the row itself left out, and the index keeps the setting and says how it was chosen."""
    _, ds_path, _, _, _ = pipeline_run
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    index = tmp_path / "tuned.residual"
    assert run("index", "--kind", "residual", "--dataset", ds_path, "--tune-rows", 200, "--target-recall", 0.95,
               "--seed", 4, "--out", index, *sched) == 0  # fmt: skip
    printed = capsys.readouterr().out
    served = ResidualIVF.open(index)
    assert served.tuned["validation"] == "leave-one-out rows" and served.tuned["queries"] == 200
    assert served.tuned["target"] == 0.95 and served.tuned["k"] == 10
    assert f"nprobe {served.nprobe}, eps {served.eps}, recall@10 {served.tuned['recall']:.3f}" in printed, printed
    ds = open_dataset(ds_path)
    split = ds.get_split("default")
    db_rows = np.setdiff1d(np.arange(ds.n), split.query)
    X = ds.features[...]
    drawn = db_rows[np.sort(np.random.default_rng(4).choice(len(db_rows), 200, replace=False))]
    assert not np.isin(drawn, split.query).any()  # the split's test queries never choose a setting
    Q, D = X[drawn].astype(np.float64), X[db_rows].astype(np.float64)
    squared = (Q**2).sum(1)[:, None] + (D**2).sum(1)[None] - 2 * Q @ D.T  # byte data: exact in float64
    truth = np.array([db_rows[np.lexsort((db_rows, row))[:11]] for row in squared])
    _, found = served.search(X[drawn], 11)
    hits = [len(set(f[f != own][:10]) & set(t[t != own][:10])) for f, t, own in zip(found, truth, drawn)]
    assert served.tuned["recall"] == pytest.approx(np.mean(hits) / 10)
    assert served.tuned["reached"] == (served.tuned["recall"] >= 0.95)
    # the options belong to a residual index, and the target to a tuning
    assert run("index", "--codes", "c.zarr", "--tune-rows", 10, "--out", tmp_path / "m", *sched) == 2
    assert "--tune-rows applies only with --kind residual" in _one_line_error(capsys)
    assert run("index", "--kind", "residual", "--dataset", ds_path, "--target-recall", 0.9,
               "--out", tmp_path / "r", *sched) == 2  # fmt: skip
    assert "--target-recall applies only with --tune-rows" in _one_line_error(capsys)
    assert run("index", "--kind", "residual", "--dataset", ds_path, "--tune-rows", 10, "--target-recall", 1.5,
               "--out", tmp_path / "r", *sched) == 2  # fmt: skip
    assert "--target-recall 1.5" in _one_line_error(capsys)
    assert not (tmp_path / "m").exists() and not (tmp_path / "r").exists()


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ")
    return err[-1]


def test_codes_from_another_model_are_refused(pipeline_run, cluster, tmp_path, capsys):
    _, ds, _, codes, _ = pipeline_run
    other = tmp_path / "lsh"
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    assert run("train", "--dataset", ds, "--method", "lsh", "--bits", 32, "--out", other, *sched) == 0
    out = tmp_path / "r.parquet"
    assert run("search", "--dataset", ds, "--model", other, "--codes", codes, "--out", out, *sched) == 2
    assert "were made by model" in _one_line_error(capsys) and not out.exists()


def test_unknown_dataset_name(cluster, tmp_path, capsys):
    out = tmp_path / "r"
    assert run("evaluate", "--dataset", "mnist-typo", "--out", out, "--scheduler", cluster.scheduler_address) == 2
    assert "unknown dataset 'mnist-typo'" in _one_line_error(capsys) and not out.exists()


@pytest.mark.parametrize(
    "text, match",
    [
        ("queries = [1, 2\n", "not valid TOML"),
        ("queries = 10\nbogus = 3\n", "unknown key 'bogus'"),
        ("queries = 'many'\n", "queries must be an integer"),
    ],
)
def test_malformed_config(tmp_path, capsys, text, match):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    assert run("split", "--dataset", tmp_path / "nothing", "--config", cfg) == 2
    assert match in _one_line_error(capsys)


@pytest.mark.parametrize("ext, cut", [("fvecs", 3), ("bvecs", 70)])
def test_truncated_vecs_ingest(tmp_path, capsys, ext, cut):
    src = tmp_path / f"x.{ext}"
    write_vecs(
        src, np.random.default_rng(0).integers(0, 200, (100, 16)).astype(np.float32 if ext == "fvecs" else np.uint8)
    )
    data = src.read_bytes()
    src.write_bytes(data[:-cut])
    out = tmp_path / "ds.zarr"
    assert run("ingest", src, "--out", out, "--quiet") == 2
    assert "truncated" in _one_line_error(capsys)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_nan_rows_and_empty_and_non_numeric_npy(tmp_path, capsys):
    cases = {
        "nan.npy": (np.array([[1.0, 2.0], [np.nan, 0.0]], np.float32), "row 1 contains NaN"),
        "empty.npy": (np.zeros((0, 4), np.float32), "empty"),
        "str.npy": (np.array([["a", "b"]]), "numeric"),
    }
    for name, (arr, match) in cases.items():
        np.save(tmp_path / name, arr)
        out = tmp_path / f"{name}.zarr"
        assert run("ingest", tmp_path / name, "--out", out, "--quiet") == 2
        assert match in _one_line_error(capsys), name
        assert not out.exists()


def test_wrong_dimensionality_between_model_and_data(pipeline_run, cluster, tmp_path, capsys):
    _, _, model, _, _ = pipeline_run
    src = tmp_path / "x.fvecs"
    write_vecs(src, np.random.default_rng(0).standard_normal((500, 64)).astype(np.float32))
    assert run("ingest", src, "--out", tmp_path / "d.zarr", "--quiet") == 0
    out = tmp_path / "codes.zarr"
    assert (
        run(
            "encode",
            "--dataset",
            tmp_path / "d.zarr",
            "--model",
            model,
            "--out",
            out,
            "--scheduler",
            cluster.scheduler_address,
            "--quiet",
        )
        == 2
    )
    assert "X has 64 features, but ITQ is expecting 128 features" in _one_line_error(capsys)
    assert not out.exists()


def test_bad_bits_from_cli(pipeline_run, cluster, tmp_path, capsys):
    _, ds, _, _, _ = pipeline_run
    for bits, match in ((0, "expected a positive integer"), (200, "at most the number of features")):
        out = tmp_path / f"m{bits}"
        assert (
            run(
                "train",
                "--dataset",
                ds,
                "--method",
                "pcah",
                "--bits",
                bits,
                "--out",
                out,
                "--scheduler",
                cluster.scheduler_address,
                "--quiet",
            )
            == 2
        )
        assert match in _one_line_error(capsys) and not out.exists()


def test_artifacts_match_their_schemas(pipeline_run):
    _, ds_path, model, codes, res = pipeline_run
    ds = open_dataset(ds_path)
    validate(dict(ds.attrs), "dataset.schema.json")
    validate(ds.get_split("default").manifest, "split.schema.json")
    validate(ds.get_groundtruth(ds.groundtruth_names()[0])[2], "groundtruth.schema.json")
    validate(json.loads((model / "model.json").read_text()), "model.schema.json")
    validate(open_codes(codes).attrs, "codes.schema.json")
    for artifact in (ds_path, ds_path / "splits" / "default", model, codes):
        validate(json.loads((artifact / ".dhash-commit.json").read_text()), "commit.schema.json")
    row = {k: v[0] for k, v in pq.read_table(res).to_pydict().items()}
    validate(row, "search-results.schema.json")


def test_cli_train_dish_with_config_edge_list_then_search(pipeline_run, cluster, tmp_path):
    _, ds, _, _, _ = pipeline_run
    cfg = tmp_path / "dish.toml"
    cfg.write_text("[train]\nmethod = 'dish'\nnodes = 3\ntopology = [[0, 1], [1, 2]]\nmax-iter = 3\n")
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    model, codes, res = tmp_path / "dish", tmp_path / "codes.zarr", tmp_path / "res.parquet"
    assert (
        run("train", "--config", cfg, "--dataset", ds, "--bits", 16, "--split", "default", "--out", model, *sched) == 0
    )
    meta = json.loads((model / "model.json").read_text())
    assert meta["method"] == "dish" and meta["training"]["nodes"] == 3
    assert meta["training"]["edges"] == [[0, 1], [1, 2]] and len(meta["training"]["objective"]) == 3
    assert run("encode", "--dataset", ds, "--model", model, "--out", codes, *sched) == 0
    assert run("search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 5, "--out", res, *sched) == 0
    assert pq.read_table(res).num_rows == 250


def test_cli_rejects_disconnected_topology(pipeline_run, cluster, tmp_path, capsys):
    _, ds, _, _, _ = pipeline_run
    cfg = tmp_path / "dish.toml"
    cfg.write_text("method = 'dish'\nnodes = 4\ntopology = [[0, 1], [2, 3]]\n")
    out = tmp_path / "m"
    assert run("train", "--config", cfg, "--dataset", ds, "--out", out, "--scheduler", cluster.scheduler_address) == 2
    assert "disconnected" in _one_line_error(capsys) and not out.exists()


def test_cli_sgh_and_usplh_options_reach_the_models(pipeline_run, cluster, tmp_path, capsys):
    """`dhash train --method sgh` with its flags, then encode + search; `evaluate` passes
    --sgh-rho-scale to SGH only (DisH keeps its own --rho-scale) and USPLH options through."""
    _, ds, _, _, _ = pipeline_run
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    model, codes, res = tmp_path / "sgh", tmp_path / "codes.zarr", tmp_path / "res.parquet"
    assert (
        run(
            "train",
            "--dataset",
            ds,
            "--method",
            "sgh",
            "--bits",
            6,
            "--split",
            "default",
            "--n-bases",
            64,
            "--bandwidth-scale",
            0.8,
            "--sgh-rho-scale",
            0.5,
            "--kernel-cache",
            "recompute",
            "--out",
            model,
            *sched,
        )
        == 0
    )
    meta = json.loads((model / "model.json").read_text())
    validate(meta, "model.schema.json")
    assert meta["params"]["n_bases"] == 64 and meta["params"]["rho_scale"] == 0.5
    assert meta["params"]["bandwidth_scale"] == 0.8 and meta["training"]["kernel_cache"] == "recompute"
    assert meta["training"]["passes"] == 3 + 2 * 6
    assert run("encode", "--dataset", ds, "--model", model, "--out", codes, *sched) == 0
    assert run("search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 5, "--out", res, *sched) == 0
    assert pq.read_table(res).num_rows == 250
    out = tmp_path / "report"
    assert (
        run(
            "evaluate",
            "--dataset",
            ds,
            "--methods",
            "sgh,usplh,dish-allreduce",
            "--bits",
            8,
            "--queries",
            30,
            "--ground-truth",
            "euclidean",
            "--top-k",
            10,
            "--n-bases",
            32,
            "--sgh-rho-scale",
            0.25,
            "--rho-scale",
            0.7,
            "--region-size",
            100,
            "--decay",
            0.3,
            "--max-iter",
            2,
            "--recall-at",
            5,
            "--rerank-candidates",
            20,
            "--ivf-lists",
            8,
            "--ivf-nprobes",
            8,
            "--out",
            out,
            *sched,
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    validate(report, "report.schema.json")
    rows = {r["method"]: r for r in report["results"]}
    # recall of the true neighbours: every list probed re-ranks the same candidates as the scan
    assert report["protocol"]["neighbour_recall"] == {"k": 5, "candidates": [20], "ivf_lists": 8, "nprobes": [8]}
    for row in rows.values():
        hamming, reranked, ivf = (s["recall"] for s in row["metrics"]["neighbour_recall"]["searches"])
        assert ivf == reranked and 0 <= hamming <= 1
    assert "Recall@5 of the exact Euclidean top-5" in (out / "report.md").read_text()
    assert rows["sgh"]["params"]["rho_scale"] == 0.25 and rows["sgh"]["params"]["n_bases"] == 32
    assert rows["dish-allreduce"]["params"]["rho_scale"] == 0.7
    assert rows["usplh"]["params"]["region_size"] == 100 and rows["usplh"]["params"]["decay"] == 0.3
    # semi-supervised methods on a dataset without labels: one clear line
    assert (
        run(
            "evaluate",
            "--dataset",
            ds,
            "--methods",
            "splh",
            "--bits",
            8,
            "--queries",
            30,
            "--ground-truth",
            "euclidean",
            "--top-k",
            10,
            "--out",
            tmp_path / "r2",
            *sched,
        )
        == 2
    )
    assert "needs labels, and the dataset has none" in _one_line_error(capsys) and not (tmp_path / "r2").exists()
    # fewer re-ranking candidates than the recall's k: refused before any ground truth or training
    bad = ["evaluate", "--dataset", ds, "--methods", "lsh", "--queries", 30, "--recall-at", 10]
    assert run(*bad, "--rerank-candidates", 5, "--out", tmp_path / "r3", *sched) == 2
    assert "re-ranking candidates must lie in [k=10" in _one_line_error(capsys) and not (tmp_path / "r3").exists()


IVF_OPTIONS = ["--kind", "ivf", "--lists", 16, "--kmeans-rows", 300]


@pytest.fixture(scope="module")
def ivf_index(pipeline_run, cluster, tmp_path_factory):
    """`dhash index --kind ivf` of the pipeline's codes (16 lists), built once for the tests
    that search through it."""
    _, ds, _, codes, _ = pipeline_run
    index = tmp_path_factory.mktemp("ivf") / "codes.ivf"
    argv = ["index", "--codes", codes, "--dataset", ds, *IVF_OPTIONS, "--out", index]
    assert run(*argv, "--scheduler", cluster.scheduler_address, "--quiet") == 0
    return index


def test_search_through_an_inverted_file_probing_every_list_gives_the_linear_scans_results(
    pipeline_run, ivf_index, cluster, tmp_path, capsys
):
    _, ds, model, codes, res = pipeline_run
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    index = ivf_index
    ivf = ["index", "--codes", codes, "--dataset", ds, *IVF_OPTIONS]
    search = ["search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 10, "--index", index]
    every_list, one_list = tmp_path / "ivf-16.parquet", tmp_path / "ivf-1.parquet"
    assert run(*search, "--nprobe", 16, "--out", every_list, *sched) == 0
    assert pq.read_table(every_list).equals(pq.read_table(res))  # every list probed: the linear scan
    assert run(*search, "--nprobe", 1, "--out", one_list, *sched) == 0
    hits = pq.read_table(one_list).column("hamming").to_numpy()
    assert hits.min() >= 0 and len(hits) == 500
    capsys.readouterr()
    bad = tmp_path / "bad.parquet"
    assert run(*search, "--nprobe", 17, "--out", bad, *sched) == 2
    assert "--nprobe must be an int in [1, 16]" in _one_line_error(capsys) and not bad.exists()
    # a radius search through an inverted file: refused in the command line's terms, no Python advice
    radius = ["search", "--dataset", ds, "--model", model, "--codes", codes, "--radius", 3, "--index", index]
    assert run(*radius, "--out", bad, *sched) == 2
    said = _one_line_error(capsys)
    assert "--k" in said and "--radius" in said and "search(" not in said and "`" not in said and not bad.exists()
    assert run("index", "--kind", "ivf", "--codes", codes, "--out", tmp_path / "no-data.ivf", *sched) == 2
    said = _one_line_error(capsys)
    assert "give the dataset" in said and "--quantiser codes" in said and "`" not in said
    # lists from the codes alone: no dataset read; probing every list is the linear scan again
    in_codes = ["index", "--kind", "ivf", "--quantiser", "codes", "--lists", 16, "--codes", codes]
    assert run(*in_codes, "--out", tmp_path / "codes.ivf", *sched) == 0
    assert "16 lists, centroids in code space" in capsys.readouterr().out
    code_lists = tmp_path / "code-lists-16.parquet"
    assert run(*search[:-1], tmp_path / "codes.ivf", "--nprobe", 16, "--out", code_lists, *sched) == 0
    assert pq.read_table(code_lists).equals(pq.read_table(res))
    assert run(*in_codes, "--quantiser-dims", 8, "--out", tmp_path / "bad.ivf", *sched) == 2
    assert "--quantiser-dims" in _one_line_error(capsys) and not (tmp_path / "bad.ivf").exists()
    assert run(*ivf[:-1], 5, "--out", tmp_path / "few.ivf", *sched) == 2  # fewer k-means rows than lists
    assert "--kmeans-rows must lie in [16, " in _one_line_error(capsys) and not (tmp_path / "few.ivf").exists()
    plain = ["search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 10]
    assert run(*plain, "--nprobe", 2, "--out", bad, *sched) == 2
    assert "inverted file" in _one_line_error(capsys) and not bad.exists()


def test_search_reports_recall_of_the_exact_neighbours(pipeline_run, ivf_index, cluster, tmp_path, capsys):
    """--recall: recall@k of the exact Euclidean top-k, for the searcher used (here an
    inverted file re-ranked by L2), equal to the measure recomputed from the written
    results and a brute-force truth over the split's database rows."""
    _, ds, model, codes, _ = pipeline_run
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    index = ivf_index
    out = tmp_path / "reranked.parquet"
    search = ["search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 10, "--index", index]
    capsys.readouterr()
    assert run(*search, "--nprobe", 4, "--rerank", "exact", "--candidates", 40, "--recall", "--out", out, *sched) == 0
    printed = float(capsys.readouterr().out.split("recall@10 of the exact Euclidean top-10: ")[1].split()[0])
    handle = open_dataset(ds)
    split = handle.get_split("default")
    X = np.asarray(handle.features_dask().compute(), dtype=np.float64)
    database = np.setdiff1d(np.arange(len(X)), split.query)
    table = pq.read_table(out)
    query_of, found = table.column("query_id").to_numpy(), table.column("id").to_numpy()
    hits = 0
    for q in split.query:
        d2 = ((X[database] - X[q]) ** 2).sum(axis=1)
        exact = database[np.lexsort((database, d2))[:10]]
        hits += len(np.intersect1d(found[query_of == q], exact))
    assert printed == pytest.approx(hits / (10 * len(split.query)), abs=5e-5)
    assert 0.3 < printed <= 1.0


def test_resume_without_a_checkpoint_trains_from_the_start(pipeline_run, cluster, tmp_path, capsys):
    """A scheduled job passes --resume every time: with no checkpoint there (a first run, or one
    after a finished run) it trains from the start and says so, and gives the same model."""
    tmp, ds, model, _, _ = pipeline_run
    out = tmp_path / "itq-resumed"
    train = ["train", "--dataset", ds, "--method", "itq", "--bits", 32, "--split", "default"]
    assert run(*train, "--out", out, "--resume", "--scheduler", cluster.scheduler_address) == 0
    assert "no checkpoint at" in capsys.readouterr().err
    saved = json.loads((out / "model.json").read_text())
    assert saved["model_id"] == json.loads((model / "model.json").read_text())["model_id"]
