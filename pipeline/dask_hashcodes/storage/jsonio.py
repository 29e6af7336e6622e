"""JSON helpers: numpy scalars/arrays and paths serialise; metadata is always JSON, never pickle."""

from __future__ import annotations

import json
import os

import numpy as np


def dumps(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=_json_default)


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, os.PathLike):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")
