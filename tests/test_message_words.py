"""Messages are read by people on a command line as well as in Python: an array's shape is
said in words ("5 x 128", "5 values"), never printed as a Python tuple such as ``(5,)``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dask_hashcodes
from dask_hashcodes.errors import shape_words

LIBRARY = Path(dask_hashcodes.__file__).resolve().parent
ERRORS = {"InputError", "ValueError", "TypeError"}


@pytest.mark.parametrize(
    ("shape", "words"),
    [((5,), "5 values"), ((1,), "1 value"), ((5, 128), "5 x 128"), ((2, 3, 4), "2 x 3 x 4"), ((), "a single value")],
)
def test_shape_words(shape, words):
    assert shape_words(shape) == words


def _shapes_in_messages():
    """file:line of every f-string in a raised error that formats a ``.shape`` (or a tuple of
    it) directly, which prints as a Python tuple."""
    for path in sorted(LIBRARY.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", None))
            if name not in ERRORS:
                continue
            for part in ast.walk(node.exc):
                if not isinstance(part, ast.FormattedValue):
                    continue
                value = part.value
                if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "tuple":
                    value = value.args[0] if value.args else value
                if isinstance(value, ast.Attribute) and value.attr == "shape":
                    yield f"{path.relative_to(LIBRARY)}:{part.value.lineno}"


def test_no_message_prints_a_shape_tuple():
    found = sorted(set(_shapes_in_messages()))
    assert not found, "say shapes with dask_hashcodes.errors.shape_words, not as a tuple:\n" + "\n".join(found)
