"""dhash's tunables live in dask's config (namespace ``dhash``) and take effect when set."""

import os
import subprocess
import sys

import dask
import numpy as np
import pytest

from dask_hashcodes import config
from dask_hashcodes.distributed.cluster import default_shape
from dask_hashcodes.distributed.graph import tree_reduce
from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.stats import add
from dask_hashcodes.storage.datasets import default_chunk_rows


def test_defaults_come_from_the_packaged_yaml():
    assert config.get("fan-in") == 8 and config.get("target-chunk-bytes") == 16 * 2**20
    assert config.get("scheduler") is None and config.get("storage-options") is None


def test_settings_take_effect_when_set():
    parts = [dask.delayed(np.float64)(i) for i in range(64)]
    levels = {8: 2, 2: 6}
    for fan_in, depth in levels.items():
        with dask.config.set({"dhash.fan-in": fan_in}):
            total = tree_reduce("sum", parts, add)
            assert total.compute() == sum(range(64))
            assert total.key.rsplit("-", 2)[-2] == str(depth - 1)  # the top task's level
    with dask.config.set({"dhash.target-chunk-bytes": 2**20}):
        assert default_chunk_rows(128, 1) == 8192


def test_fan_in_is_part_of_the_task_keys_and_must_reduce():
    parts = [dask.delayed(np.float64)(i) for i in range(16)]
    keys = set()
    for fan_in in (2, 4):
        with dask.config.set({"dhash.fan-in": fan_in}):
            keys.add(tree_reduce("sum", parts, add).key)
    assert len(keys) == 2  # other groupings never share task keys
    with dask.config.set({"dhash.fan-in": 1}), pytest.raises(InputError, match="at least 2"):
        tree_reduce("sum", parts, add)


def test_environment_variables_reach_the_namespace():
    env = {**os.environ, "DASK_DHASH__FAN_IN": "3"}
    out = subprocess.run(
        [sys.executable, "-c", "from dask_hashcodes import config; print(config.get('fan-in'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "3"


def test_local_cluster_is_sized_from_the_cores():
    assert default_shape(1) == (1, 1) and default_shape(2) == (2, 1)
    assert default_shape(16) == (8, 2) and default_shape(64) == (8, 8)


FIT_BLAS_THREADS = """
import json
import numpy as np
import threadpoolctl
from dask_hashcodes import PCAH

def blas_threads():
    return sorted({pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"})

seen, eigh = [], np.linalg.eigh
np.linalg.eigh = lambda a: (seen.append(blas_threads()), eigh(a))[1]  # PCAH's client-side step
PCAH(n_bits=2).fit(np.random.default_rng(0).standard_normal((200, 8)))
print(json.dumps({"after": blas_threads(), "in fit": seen}))
"""


def test_a_fit_runs_its_client_side_steps_on_one_blas_thread():
    """Inside ``fit`` the client's BLAS has one thread, and the process's own setting is back
    afterwards. Run in a process without the test session's one-thread settings."""
    import json

    env = {
        k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    env["OPENBLAS_NUM_THREADS"] = "2"  # a client whose BLAS would use 2 threads
    out = subprocess.run([sys.executable, "-c", FIT_BLAS_THREADS], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["in fit"] and all(threads == [1] for threads in got["in fit"]), got
    from dask_hashcodes.distributed.cluster import available_cores

    assert got["after"] == [min(2, available_cores())], got  # the process's own setting again
