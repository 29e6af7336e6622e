"""dhash's tunables in dask's configuration (the ``dhash`` namespace; defaults and their
meaning in pipeline/dask_hashcodes/dhash.yaml). Read them with ``get(name)`` when they are used, so
``dask.config.set({"dhash.fan-in": 4})`` and ``DASK_DHASH__FAN_IN=4`` take effect."""

from __future__ import annotations

import os
from pathlib import Path

import dask.config
import yaml

_DEFAULTS = Path(__file__).with_name("dhash.yaml")
dask.config.update_defaults(yaml.safe_load(_DEFAULTS.read_text()))

# environment variables of earlier versions, still honoured (they win over the config)
LEGACY_ENV = {"data-dir": "DHASH_DATA_DIR", "fashion-mnist-dir": "DHASH_FASHION_MNIST_DIR"}


def get(name: str):
    """The value of ``dhash.<name>``."""
    legacy = LEGACY_ENV.get(name)
    if legacy and os.environ.get(legacy):
        return os.environ[legacy]
    return dask.config.get(f"dhash.{name}")
