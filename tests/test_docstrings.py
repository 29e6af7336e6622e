"""Docstrings and comments say what and why; measured numbers and dates belong in
benchmarks/results (they go stale in code, and the results files say which machine and
which split produced them). Scanned with ``ast`` and ``tokenize`` over the installed
package's source (pipeline/)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_boundaries import commentary

REPO = Path(__file__).resolve().parents[1]

MEASURED = re.compile(
    r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20\d\d\b"  # a date
    r"|\b20\d\d-\d\d-\d\d\b"
    r"|\b\d+(?:\.\d+)?\s?(?:x|×) (?:faster|slower|longer|shorter|less time|more time)"  # a speed-up
    r"|\b\d+(?:\.\d+)?\s?(?:GFLOP/s|MB/s|GB/s|ms|µs)\b"  # a timing
    r"|\b\d+(?:\.\d+)?% (?:faster|slower)"
    r"|\b0\.\d{3,}\b"  # a quality number (map 0.736); parameter values have fewer digits
)


def test_no_measured_numbers_or_dates_in_docstrings_and_comments():
    found = [
        f"{path.relative_to(REPO)}:{line}: {match.group(0)!r}"
        for path in sorted((REPO / "pipeline").rglob("*.py"))
        for line, text in commentary(path.read_text())
        for match in MEASURED.finditer(text)
    ]
    assert found == [], "move these to benchmarks/results and say what and why instead:\n" + "\n".join(found)
