"""Atomic outputs that never destroy what dhash did not write, on local disks and object stores.

Every artifact (dataset, split, ground truth, model, codes, index, report, checkpoint) is a
directory that becomes visible only when it is complete:

* **local disk / shared mount:** written under a temporary sibling ``.NAME.tmp-<hex>``
  and renamed into place; an older output is moved aside first, so there is never a
  moment with neither;
* **object stores** (no rename): written in place, and committed by a small marker
  ``.dhash-commit.json`` written last. Readers refuse a prefix without it
  (``require_committed``), so a killed writer's half-written prefix is never read.

The marker is the artifact's **commit record**: its kind, its manifest (per zarr array,
the shape and the checksum of every chunk, from which the content id is derived) and the
list of every file it consists of, with size and checksum (``files``). Ownership follows
from that list, never from the marker alone:

* ``overwrite`` replaces an artifact only when its directory holds exactly the files its
  record lists (plus dhash's own temporaries and committed parts, such as a dataset's
  splits); anything else is refused in one line naming the foreign entries, before any
  work starts, and checked again just before the old artifact is removed;
* a directory is a temporary only by its name (``.NAME.tmp-<8 hex>``), never because of a
  file inside it; a symlinked output is judged, and written, at its target;
* single-file outputs (search results, benchmark results, performance reports) never
  replace a directory, and replace a file only with ``overwrite``, only when the file
  says dhash wrote it as that kind (``file_kind``), and only when it still matches the
  checksum dhash recorded in it (``changed_since_written``): a file the user edited is kept;
* an artifact directory holding a file its record lists but whose content changed (checked
  by sha256 for files up to ``SMALL_FILE``, e.g. a report's report.md, a model's
  model.json) is refused as changed since dhash wrote it, naming the files.

SIGTERM is turned into an exception by the CLI, so the ``except`` below removes the
temporary on ``kill`` too; a full disk becomes a one-line error naming what was written.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import posixpath
import re
import socket
import time
import uuid

from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.location import Location, resolve

COMMIT_FILE = ".dhash-commit.json"
WRITER_FILE = ".dhash-writer.json"
COMMIT_SCHEMA = "dhash.commit/2"  # 2: the record lists every file of the artifact
READABLE_COMMIT_SCHEMAS = ("dhash.commit/1", COMMIT_SCHEMA)
# dhash's own temporaries (and old outputs being replaced) are recognised by name only
TEMPORARY_NAME = re.compile(r"^\.(?P<final>.+)\.(?:tmp|old)-[0-9a-f]{8}$")
# names that become path components (split names, ...): no separators, no leading dot
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# committed sub-artifacts an artifact may hold, added after its own commit: folder -> kind
PART_FOLDERS = {"dataset": {"splits": "split", "groundtruth": "groundtruth"}}
# what a writer of each kind puts at the top of its directory (an uncommitted object-store
# prefix is dhash's only if everything in it is one of these, or inside one of its arrays)
KIND_ENTRIES = {
    "dataset": {"zarr.json", "features", "ids", "labels", "splits", "groundtruth"},
    "split": {"zarr.json", "query"},
    "groundtruth": {"zarr.json", "ids", "distances", "relevance", "threshold_distance", "threshold_id"},
    "codes": {"zarr.json", "codes"},
    "mih-index": {"zarr.json", "order", "offsets"},
    "ivf-index": {"zarr.json", "centroids", "order", "offsets"},
    "model": {"model.json", "arrays.npz"},
    "checkpoint": {"state.json", "arrays.npz"},
    "report": {"report.json", "report.md", "precision_at_k.png", "pr_curve.png", "training.png"},
}
# what writes each kind, named when one kind is given where another was expected
WRITTEN_BY = {
    "dataset": "`dhash ingest` or `dhash synth`",
    "split": "`dhash split`",
    "groundtruth": "`dhash groundtruth`",
    "model": "`dhash train`",
    "checkpoint": "`dhash train` for its model",
    "codes": "`dhash encode`",
    "mih-index": "`dhash index`",
    "ivf-index": "`dhash index`",
    "report": "`dhash evaluate`",
}
MAX_NAMED = 3  # foreign entries named in a refusal
OVERWRITE = "`overwrite=True`"  # the setting a refusal names (the command line shows --overwrite)
SMALL_FILE = 1 << 20  # files up to this size are compared by content when checking ownership
FULL_DISK = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ------------------------------------------------------------------ names -------------


def check_name(name: str, what: str) -> str:
    """``name`` as a single safe path component, else a one-line error."""
    if not isinstance(name, str) or not SAFE_NAME.match(name) or len(name) > 200:
        raise InputError(
            f"{what} {name!r} is not a valid name; use letters, digits, '.', '_' and '-', starting with a "
            "letter or digit (it becomes a directory name)"
        )
    return name


def child_inside(parent: Location, *parts: str, what: str = "name") -> Location:
    """``parent/parts...`` with every part a safe name, checked to stay inside ``parent``
    (local: symlinks resolved) before anything is written there."""
    for part in parts:
        check_name(part, what)
    loc = parent.child(*parts)
    if parent.is_local:
        base = os.path.realpath(parent.url)
        target = os.path.realpath(loc.url)
        if os.path.commonpath([base, target]) != base:
            raise InputError(f"{what} {'/'.join(parts)!r} leads outside {parent} (to {target}); use a plain name")
    return loc


# ------------------------------------------------------------------ reading markers ---


def read_commit(loc: Location) -> dict | None:
    """The commit record of an artifact directory, None when there is none (or it is damaged)."""
    try:
        record = json.loads(loc.child(COMMIT_FILE).read_bytes())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and record.get("schema") in READABLE_COMMIT_SCHEMAS else None


def require_committed(loc: Location, kind: str, remedy: str, record: dict | None = None) -> dict:
    """The commit record of ``loc`` (read here unless given), which must be a complete
    ``kind``; else a one-line error."""
    record = read_commit(loc) if record is None else record
    if record is None:
        if not loc.exists():
            raise InputError(f"{loc} does not exist; {remedy}")
        if loc.child(COMMIT_FILE).exists():
            raise InputError(f"{loc} has a damaged commit record ({COMMIT_FILE}); {remedy}")
        raise InputError(
            f"{loc} is not a complete dhash {kind} (no {COMMIT_FILE}: its writer was killed, is still "
            f"running, or it was made by another tool or an older dhash); {remedy}"
        )
    if record.get("kind") != kind:
        # another artifact than the one asked for: re-creating it would not help; the right one goes there
        found = record.get("kind")
        made = f" (written by {WRITTEN_BY[found]})" if found in WRITTEN_BY else ""
        raise InputError(
            f"{loc} is a dhash {found}{made}, not a {kind}; pass a {kind} there"
            + (f" (one written by {WRITTEN_BY[kind]})" if kind in WRITTEN_BY else "")
        )
    return record


def read_verified(loc: Location, name: str, record: dict, remedy: str) -> bytes:
    """The bytes of file ``name`` of the committed artifact at ``loc``, checked against the
    size and checksum its commit record lists; a missing, unlisted or changed file is a
    one-line error."""
    entry = (record.get("files") or {}).get(name)
    if entry is None:
        raise InputError(f"{loc}/{name} is not listed in the artifact's commit record; {remedy}")
    try:
        data = loc.child(name).read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise InputError(f"{loc}/{name} is missing; {remedy}") from None
    if len(data) != entry.get("size") or _checksum(data) != entry.get("checksum"):
        raise InputError(f"{loc}/{name} differs from its commit record (changed since dhash wrote it); {remedy}")
    return data


def _checksum(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ ownership ---------


def _walk(loc: Location) -> dict[str, tuple[str, int]]:
    """Every entry under ``loc`` (relative path -> (type, size)); type is file, dir or other
    (symlinks and special files, never followed)."""
    found = {}
    if loc.is_local:
        for top, dirs, files in os.walk(loc.url, followlinks=False):
            rel_top = os.path.relpath(top, loc.url)
            for name in dirs + files:
                path = os.path.join(top, name)
                rel = name if rel_top == "." else f"{rel_top}/{name}"
                if os.path.islink(path):
                    found[rel] = ("other", 0)
                elif os.path.isdir(path):
                    found[rel] = ("dir", 0)
                else:
                    found[rel] = ("file" if os.path.isfile(path) else "other", os.lstat(path).st_size)
        return found
    root = loc.fs_path.rstrip("/")
    loc.fs.invalidate_cache()  # other filesystem instances (zarr's) may have written since the last listing
    for path, info in loc.fs.find(root, withdirs=True, detail=True).items():
        rel = path.rstrip("/")[len(root) + 1 :]
        if rel:
            found[rel] = ("dir" if info.get("type") == "directory" else "file", int(info.get("size") or 0))
    return found


def _record_files(loc: Location, chunk_sums: dict[str, str]) -> dict:
    """The ``files`` entry of a commit record: every file of the finished artifact with its
    size and checksum (chunks: ``chunk_sums``, the zstd checksums already in the manifest,
    so committing reads no data again; other files: sha256 of their bytes)."""
    files = {}
    for rel, (kind, size) in sorted(_walk(loc).items()):
        if kind == "dir" or rel in (WRITER_FILE, COMMIT_FILE):
            continue
        if kind != "file":
            raise RuntimeError(f"{loc}/{rel} is not a regular file; dhash writes none such")
        checksum = chunk_sums.get(rel)
        files[rel] = {"size": size, "checksum": checksum or _checksum(loc.child(rel).read_bytes())}
    return files


def foreign_entries(loc: Location, record: dict) -> list[str]:
    """Entries under the artifact at ``loc`` that its commit record does not account for
    (top-most only: a foreign directory is named, not its content): added entries and
    listed files changed since dhash wrote them. Empty: dhash owns all."""
    return [rel for rel, _ in _judge_entries(loc, record)]


def _judge_entries(loc: Location, record: dict) -> list[tuple[str, bool]]:
    """``foreign_entries`` as (entry, whether it is a listed file that was changed)."""
    files = record.get("files")
    if not isinstance(files, dict):
        return [("(no file list in its commit record: written by an older dhash)", False)]
    # top level first: a home directory holding a copied record is refused without walking it
    expected_top = {rel.split("/")[0] for rel in files} | set(PART_FOLDERS.get(record.get("kind"), {})) | {COMMIT_FILE}
    unexpected = [(name, False) for name in loc.list_names() if name not in expected_top]
    if unexpected:
        return unexpected
    owned_dirs = {posixpath.dirname(rel) for rel in files}
    owned_dirs |= {d for rel in list(owned_dirs) for d in _ancestors(rel)}
    parts = PART_FOLDERS.get(record.get("kind"), {})
    foreign, judged_parts = [], {}
    for rel, (kind, size) in sorted(_walk(loc).items()):
        if rel == COMMIT_FILE or any(rel.startswith(f + "/") for f, _ in foreign):
            continue
        top, _, rest = rel.partition("/")
        if top in parts and kind == "dir" and not rest:
            continue
        if top in parts and rest:
            name = rest.split("/")[0]
            if rest == "zarr.json" or TEMPORARY_NAME.match(name):
                continue
            key = f"{top}/{name}"
            if key not in judged_parts:
                sub = loc.child(top, name)
                sub_record = read_commit(sub)
                if sub_record is None or sub_record.get("kind") != parts[top]:
                    judged_parts[key] = [(key, False)]
                else:
                    judged_parts[key] = [(f"{key}/{r}", changed) for r, changed in _judge_entries(sub, sub_record)]
                foreign += judged_parts[key]
            continue
        if kind == "dir" and rel in owned_dirs:
            continue
        entry = files.get(rel)
        if kind == "file" and entry is not None and entry.get("size") == size:
            checksum = entry.get("checksum", "")
            if not checksum.startswith("sha256:") or size > SMALL_FILE:
                continue
            if _checksum(loc.child(rel).read_bytes()) == checksum:
                continue
        foreign.append((rel, kind == "file" and entry is not None))
    return foreign


def refusal(final: Location, kind: str, record: dict) -> str | None:
    """Why dhash may not replace the ``kind`` at ``final`` (None: dhash wrote all of it), in
    one line with a remedy that works when followed."""
    judged = _judge_entries(final, record)
    if not judged:
        return None
    changed = [rel for rel, was_changed in judged if was_changed]
    if changed and kind == "checkpoint":
        return (
            f"checkpoint {final} was changed since dhash wrote it (changed: {_name_some(changed)}); "
            f"{checkpoint_remedy(final)}"
        )
    if changed:
        return (
            f"output {final} is a dhash {kind} changed since dhash wrote it (changed: {_name_some(changed)}); "
            f"nothing was replaced. Choose another path, or copy what you want to keep elsewhere, remove {final} "
            "and run again"
        )
    return (
        f"output {final} holds entries the dhash {kind} there does not consist of "
        f"({_name_some([rel for rel, _ in judged])}); nothing was replaced. Choose another path, or move them "
        "out and run again"
    )


def checkpoint_remedy(path) -> str:
    """What to do with a checkpoint that is not as dhash wrote it: removing it always works
    (training starts over); restoring its files from a copy keeps its progress."""
    return f"remove the checkpoint directory {path} to train from the start, or restore it as dhash wrote it"


def _ancestors(rel: str) -> list[str]:
    out = []
    while rel:
        out.append(rel)
        rel = posixpath.dirname(rel)
    return out


def _could_be_ours(kind: str, rel: str) -> bool:
    """An entry of an uncommitted prefix of ``kind`` that dhash's writer could have made."""
    top, _, rest = rel.partition("/")
    if top == WRITER_FILE and not rest:
        return True
    if top not in KIND_ENTRIES.get(kind, ()):
        return False
    # inside a zarr array or group: its metadata and chunk files (c/<digits>/...)
    return not rest or rest == "zarr.json" or bool(re.fullmatch(r"c(/[0-9]+)*|c", rest))


def _name_some(entries: list[str]) -> str:
    shown = ", ".join(entries[:MAX_NAMED])
    return shown + (f" and {len(entries) - MAX_NAMED} more" if len(entries) > MAX_NAMED else "")


def _is_dir(loc: Location) -> bool:
    return os.path.isdir(loc.url) if loc.is_local else loc.fs.isdir(loc.fs_path)


def _follow_link(final: Location) -> Location:
    """A local symlinked output is judged and written at its target."""
    if final.is_local and os.path.islink(final.url):
        return Location(os.path.realpath(final.url))
    return final


def check_output(final, *, kind: str, overwrite: bool, flag: str | None = OVERWRITE) -> Location:
    """Refuse an output we may not write, before any work: an existing path unless
    ``overwrite`` and it is a ``kind`` dhash wrote whose every file its commit record lists
    (or an object-store write that never committed, holding only what such a writer makes);
    a local parent that cannot be written. ``flag``: what the refusal tells the user to pass to
    replace it, in the library's terms (``OVERWRITE``; None: the caller has no such setting)."""
    final = _follow_link(resolve(final))
    if not final.exists():
        _check_writable_parent(final)
        return final
    if not _is_dir(final):
        found = file_kind(final)
        what = f"a dhash {found} file" if found else "a file"
        raise InputError(f"output {final} exists and is {what}, not a dhash {kind}; choose another path")
    record = read_commit(final)
    if record is None:
        _check_uncommitted(final, kind, overwrite, flag)
        return final
    if record.get("kind") != kind:
        raise InputError(
            f"output {final} exists and is a dhash {record.get('kind')}; only a dhash {kind} may be replaced "
            "there. Choose another path or remove it yourself"
        )
    why = refusal(final, kind, record)  # judged first: the overwrite setting is suggested only when it works
    if why is not None:
        raise InputError(why)
    if not overwrite:
        raise InputError(f"output {final} already exists; choose another path" + (f" or pass {flag}" if flag else ""))
    return final


def _check_uncommitted(final: Location, kind: str, overwrite: bool, flag) -> None:
    """An existing directory without a commit record: an object-store write that its writer
    never committed may be replaced (its writer is known dead on this host, or with
    ``overwrite``) when it holds nothing a writer of ``kind`` would not make; anything else
    is not dhash's."""
    writer = _read_writer(final)
    # on local disks dhash never writes in place: a directory there without a record is not
    # ours (named by its top-level entries: it may be a whole home directory, never walked)
    ours = writer is not None and not final.is_local and writer.get("kind") in (None, kind)
    foreign = [rel for rel in _walk(final) if not _could_be_ours(kind, rel)] if ours else final.list_names()
    if not ours or foreign:
        found = f"entries such as {_name_some(foreign)}" if foreign else "an empty directory"
        raise InputError(
            f"output {final} exists and is not a dhash {kind} ({found}); dhash only replaces what it wrote. "
            "Choose another path or remove it yourself"
        )
    if overwrite or _writer_dead(writer):
        return
    raise InputError(
        f"output {final} is an unfinished write (started {writer.get('started')} by pid {writer.get('pid')} "
        f"on {writer.get('host')}, never committed); if that job is gone pass {flag or OVERWRITE} to replace it"
    )


def _check_writable_parent(final: Location) -> None:
    """A local output's nearest existing ancestor must be a directory we can create entries in:
    tried by creating (and removing) a temporary, so /proc, read-only mounts and full
    quotas fail here, before any work."""
    if not final.is_local:
        return
    parent = final.parent.url
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    probe = os.path.join(parent, f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as exc:
        raise InputError(
            f"cannot write {final}: {parent} is not a writable directory ({exc.strerror}); choose another output path"
        ) from None


# ------------------------------------------------------------------ single files ------

# A single file dhash wrote carries its own checksum: the token ``dhash-sha256:<hex>`` (in
# the mark of a text file, a key of a JSON object, the metadata of a parquet file), the sha256
# of the file's bytes with that hex zeroed. The writer puts ``SEAL_PLACEHOLDER`` where it
# goes; ``atomic_output`` fills it in when the file is complete. A file edited since is
# never replaced (``check_file_output``).
SEAL_PREFIX = b"dhash-sha256:"
SEAL_PLACEHOLDER = SEAL_PREFIX + b"0" * 64
_SEAL = re.compile(re.escape(SEAL_PREFIX) + rb"([0-9a-f]{64})")
SEAL_JSON_KEY = "dhash_sha256"
# a parquet file keeps the token in its file metadata, and this value under SEAL_JSON_KEY in
# its schema's metadata (which other programs copy when they rewrite the file; the token not)
SEAL_IN_FILE_METADATA = "in-file-metadata"
SEAL_SEARCH = 1 << 16  # the token is looked for in the first and last 64 KiB
FILE_MARK = "<!-- written by dhash: {kind} " + SEAL_PLACEHOLDER.decode() + " -->"
_FILE_MARK = re.compile(rb"<!-- written by dhash: ([a-z0-9-]+)(?: " + _SEAL.pattern + rb")? -->")


def file_kind(loc: Location) -> str | None:
    """The kind of a single file dhash wrote (search results, benchmark results, performance
    reports), from its content: parquet schema metadata ``dhash.KIND/V``, a JSON object with
    ``"schema": "dhash.KIND/V"``, or the mark ``FILE_MARK`` in its first or last 4 KiB."""
    try:
        with loc.open("rb") as f:
            head = f.read(4096)
            size = f.seek(0, 2)
            f.seek(max(0, size - 4096))
            tail = f.read()
    except (OSError, ValueError):
        return None
    if head[:4] == b"PAR1":
        return _parquet_kind(loc)
    for part in (head, tail):
        found = _FILE_MARK.search(part)
        if found:
            return found.group(1).decode()
    if head.lstrip()[:1] == b"{":
        try:
            schema = json.loads(loc.read_bytes()).get("schema", "")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return None
        if isinstance(schema, str) and schema.startswith("dhash."):
            return schema[len("dhash.") :].rpartition("/")[0] or None
    return None


def _parquet_schema_metadata(loc: Location) -> dict:
    """The Arrow schema metadata of a parquet file ({} when it is none, or unreadable)."""
    import pyarrow.parquet as pq

    try:
        with loc.open("rb") as f:
            if f.read(4) != b"PAR1":
                return {}
            f.seek(0)
            return dict(pq.ParquetFile(f).schema_arrow.metadata or {})
    except Exception:  # noqa: BLE001 - anything unreadable is simply not ours
        return {}


def _parquet_kind(loc: Location) -> str | None:
    schema = _parquet_schema_metadata(loc).get(b"schema", b"").decode(errors="replace")
    return schema[len("dhash.") :].rpartition("/")[0] or None if schema.startswith("dhash.") else None


def _find_seal(loc: Location) -> tuple[int, str] | None:
    """(offset, hex) of the checksum token of a single file (the last one in its last 64
    KiB, else the first in its first 64 KiB), None when it has none."""
    try:
        with loc.open("rb") as f:
            size = f.seek(0, 2)
            start = max(0, size - SEAL_SEARCH)
            f.seek(start)
            tail = f.read()
            f.seek(0)
            head = f.read(min(SEAL_SEARCH, start))
    except (OSError, ValueError):
        return None
    found = list(_SEAL.finditer(tail))
    if found:
        return start + found[-1].start(1), found[-1].group(1).decode()
    first = _SEAL.search(head)
    return (first.start(1), first.group(1).decode()) if first else None


def _sealed_digest(loc: Location, offset: int) -> str:
    """sha256 of the file's bytes with the 64 hex digits at ``offset`` read as zeros."""
    digest, position = hashlib.sha256(), 0
    with loc.open("rb") as f:
        while block := f.read(1 << 22):
            lo, hi = max(offset - position, 0), min(offset + 64 - position, len(block))
            if lo < hi:
                block = block[:lo] + b"0" * (hi - lo) + block[hi:]
            digest.update(block)
            position += len(block)
    return digest.hexdigest()


def seal_file(loc: Location) -> None:
    """Fill in the checksum of a single file whose writer left ``SEAL_PLACEHOLDER`` in it
    (a file without one is left as it is)."""
    found = _find_seal(loc)
    if found is None or found[1] != "0" * 64:
        return
    offset, _ = found
    hexdigest = _sealed_digest(loc, offset).encode()
    if loc.is_local:
        with open(loc.url, "r+b") as f:
            f.seek(offset)
            f.write(hexdigest)
    else:  # an object cannot be patched: written again whole (a single PUT)
        data = loc.read_bytes()
        loc.write_bytes(data[:offset] + hexdigest + data[offset + 64 :])


def changed_since_written(loc: Location) -> bool:
    """Whether a single file dhash wrote was changed since: its bytes no longer match the
    checksum it carries. A JSON or Markdown file without one counts as changed: anyone can
    write dhash's schema name or mark into a file, only dhash's writer seals it, so an
    unsealed one is never replaced."""
    found = _find_seal(loc)
    if found is None:
        metadata = _parquet_schema_metadata(loc)  # parquet carries its seal in the schema metadata
        return not metadata or metadata.get(SEAL_JSON_KEY.encode()) == SEAL_IN_FILE_METADATA.encode()
    return _sealed_digest(loc, found[0]) != found[1]


def with_seal_placeholder(data: bytes) -> bytes:
    """The bytes of a single file with room for its checksum: a JSON object gets the key
    ``SEAL_JSON_KEY`` first; anything else must carry ``SEAL_PLACEHOLDER`` itself (the mark
    ``FILE_MARK`` does)."""
    if _SEAL.search(data):
        return data
    start = len(data) - len(data.lstrip())
    if data[start : start + 1] == b"{" and data[start + 1 :].lstrip()[:1] not in (b"}", b""):
        entry = f'\n  "{SEAL_JSON_KEY}": "{SEAL_PLACEHOLDER.decode()}",'.encode()
        return data[: start + 1] + entry + data[start + 1 :]
    return data


def _edited_refusal(final: Location, kind: str) -> str:
    return (
        f"output {final} is a dhash {kind} file changed since dhash wrote it (its content no longer matches the "
        f"checksum dhash recorded in it); nothing was replaced. Choose another path, or move the file away "
        "(keeping your edits) and run again"
    )


def check_file_output(final, *, kind: str, overwrite: bool, flag: str | None = OVERWRITE) -> Location:
    """Refuse a single-file output we may not write, before any work: never a directory; an
    existing file only with ``overwrite``, only a file dhash wrote as ``kind``, and only
    when it was not changed since (its checksum matches)."""
    final = _follow_link(resolve(final))
    if not final.exists():
        _check_writable_parent(final)
        return final
    if _is_dir(final):
        raise InputError(f"output {final} is a directory; a {kind} is written to a file: name a file path")
    found = file_kind(final)  # judged first: the overwrite setting is suggested only when it works
    if found != kind:
        what = f"a dhash {found}" if found else "not a file dhash wrote"
        raise InputError(
            f"output {final} is {what}; only a dhash {kind} file may be replaced. Choose another path or remove it yourself"
        )
    if changed_since_written(final):
        raise InputError(_edited_refusal(final, kind))
    if not overwrite:
        raise InputError(f"output {final} already exists; choose another path" + (f" or pass {flag}" if flag else ""))
    return final


# ------------------------------------------------------------------ writers -----------


def _read_writer(loc: Location) -> dict | None:
    try:
        writer = json.loads(loc.child(WRITER_FILE).read_bytes())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError, UnicodeDecodeError):
        return None
    return writer if isinstance(writer, dict) else None


def _writer_dead(writer: dict) -> bool:
    """True when the writer ran on this host and its process is gone (elsewhere: unknown)."""
    try:
        pid = int(writer.get("pid", -1))
    except (TypeError, ValueError):
        return False
    return writer.get("host") == socket.gethostname() and not _pid_alive(pid)


def writer_alive(writer: dict) -> bool:
    """True when the writer runs on this host and its process is alive (not this process)."""
    try:
        pid = int(writer.get("pid", -1))
    except (TypeError, ValueError):
        return False
    return writer.get("host") == socket.gethostname() and pid != os.getpid() and _pid_alive(pid)


def writer_record(kind: str | None = None) -> dict:
    record = {"host": socket.gethostname(), "pid": os.getpid(), "started": _now()}
    return record if kind is None else {**record, "kind": kind}


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


EMPTY_TEMPORARY_SECONDS = 60  # an empty temporary this old is no writer's work in progress
UNKNOWN_TEMPORARY_SECONDS = 3600  # a temporary without a writer record (a file output) this old is stale


# local temporaries removed when their job stopped: a task still running may write into one
# again and be ended (its local cluster closed) before it removes what it wrote, so
# dask_hashcodes.distributed.cluster.disconnect removes them once more after closing the cluster
_STOPPED_TEMPORARIES: list[Location] = []


def remove_stopped_temporaries() -> None:
    """Remove again the temporaries of outputs whose job stopped (see _STOPPED_TEMPORARIES):
    call once no task of the job can run any more."""
    while _STOPPED_TEMPORARIES:
        tmp = _STOPPED_TEMPORARIES.pop()
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.remove()  # uniquely named: this job's alone


def remove_stale_temporaries(final: Location) -> list[str]:
    """Remove ``.NAME.tmp-*`` / ``.NAME.old-*`` siblings of ``final`` (by name only) whose
    writer on this host is dead, that are empty for a minute, or that have no writer record
    for an hour; returns their names."""
    if not final.is_local:
        return []
    removed = []
    for name in final.parent.list_names():
        match = TEMPORARY_NAME.match(name)
        if not match or match.group("final") != final.name:
            continue
        tmp = final.sibling(name)
        try:
            age = time.time() - os.lstat(tmp.url).st_mtime
            empty = os.path.getsize(tmp.url) == 0 if os.path.isfile(tmp.url) else not os.listdir(tmp.url)
        except OSError:
            continue
        writer = _read_writer(tmp)
        if writer is not None:
            stale = _writer_dead(writer)
        else:
            stale = age > (EMPTY_TEMPORARY_SECONDS if empty else UNKNOWN_TEMPORARY_SECONDS)
        if stale:
            tmp.remove()
            removed.append(name)
    return removed


def _remove_owned(final: Location, record: dict | None, kind: str) -> None:
    """Object stores: delete exactly what a replaced output consists of, never a whole
    prefix. Checked again here (the prefix may have changed since ``check_output``): a
    committed artifact loses only the entries found under it that its record lists (a record
    naming paths outside it deletes nothing there), its commit record first so the prefix is
    unreadable at once; an uncommitted write loses only what its writer makes."""
    entries = _walk(final)
    if record is None:
        foreign = [rel for rel in entries if not _could_be_ours(kind, rel)]
        listed = [rel for rel, (k, _) in entries.items() if k == "file"]
    else:
        foreign = foreign_entries(final, record)
        files = record.get("files") or {}
        listed = [rel for rel, (k, _) in entries.items() if k == "file" and rel in files]
    if foreign:
        raise InputError(
            f"output {final} changed since it was checked (now holding {_name_some(foreign)}); nothing was "
            "replaced. Move those entries out and run again"
        )
    if record is not None:
        final.child(COMMIT_FILE).remove()
        for folder in PART_FOLDERS.get(kind, {}):
            for name in final.child(folder).list_names():
                sub = final.child(folder, name)
                sub_record = read_commit(sub)
                if sub_record is not None:
                    _remove_owned(sub, sub_record, sub_record.get("kind"))
            if f"{folder}/zarr.json" in entries:
                listed.append(f"{folder}/zarr.json")
    if listed:
        with contextlib.suppress(FileNotFoundError):
            final.fs.rm([final.child(rel).fs_path for rel in listed])
    final.fs.invalidate_cache()


def _remove_written(final: Location, kind: str) -> None:
    """Object stores, after a failed write in place: delete what a writer of ``kind`` makes
    (its files and record), never anything else that may lie under the prefix."""
    with contextlib.suppress(FileNotFoundError, OSError):
        ours = [rel for rel, (k, _) in _walk(final).items() if k == "file" and _could_be_ours(kind, rel)]
        if ours:
            final.fs.rm([final.child(rel).fs_path for rel in ours])
        final.fs.invalidate_cache()


def remove_artifact(loc, *, kind: str) -> None:
    """Delete the ``kind`` at ``loc`` (a checkpoint dhash no longer needs) when dhash wrote
    all of it, by ``check_output``'s rule, checked again at removal; anything else is a
    one-line refusal and nothing is removed. A symlink is judged and removed at its target."""
    loc = _follow_link(resolve(loc))
    if not loc.exists():
        return
    check_output(loc, kind=kind, overwrite=True, flag=None)
    if loc.is_local:
        _move_aside_owned(loc, kind).remove()
    else:
        _remove_owned(loc, read_commit(loc), kind)


@contextlib.contextmanager
def atomic_output(final, *, kind: str, overwrite: bool = False, manifest=None, file: bool = False):
    """Yield a Location to write ``kind`` into; it appears at ``final`` only on success.

    ``manifest(location) -> dict`` is called on the finished temporary before the commit
    and stored in the record; its ``chunk_files(manifest)``, when it has one, gives the
    checksums of the chunk files (see chunkread.arrays_manifest). ``file=True``: a single file (no record; a rename on local
    disk, a single PUT on object stores: both all-or-nothing), replacing only a file dhash
    wrote as ``kind`` (``kind="file"``: dhash's own bookkeeping files, replaced freely).
    """
    if file:
        final = _check_single_file(final, kind, overwrite)
    else:
        final = check_output(final, kind=kind, overwrite=overwrite)
    if final.is_local:
        remove_stale_temporaries(final)
        tmp = final.sibling(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    else:
        tmp = final
    try:
        if final.is_local:
            os.makedirs(final.parent.url, exist_ok=True)
        elif final.exists() and not file:  # an older output, or a killed writer's prefix
            _remove_owned(final, read_commit(final), kind)
        if not file:
            tmp.child(WRITER_FILE).write_text(json.dumps(writer_record(kind)))
        yield tmp
        if file and kind != "file":
            seal_file(tmp)
        if not file:
            built = manifest(tmp) if manifest is not None else {}
            record = {
                "schema": COMMIT_SCHEMA,
                "kind": kind,
                "committed": _now(),
                "manifest": built,
                "files": _record_files(tmp, getattr(manifest, "chunk_files", lambda _: {})(built)),
            }
            tmp.child(WRITER_FILE).remove()
            tmp.child(COMMIT_FILE).write_text(json.dumps(record, indent=1) + "\n")
        if final.is_local:
            _rename_into_place(tmp, final, kind, file)
    except BaseException as exc:
        if final.is_local and not file:
            # the writer record first: tasks still running see the job stopped and undo their
            # own writes (chunkread.write_rows); whatever they wrote before is removed here
            with contextlib.suppress(OSError):
                tmp.child(WRITER_FILE).remove()
        if final.is_local:
            tmp.remove()  # a uniquely named temporary: all of it is this job's
            if not file:
                _STOPPED_TEMPORARIES.append(tmp)
        elif not file:  # written in place: only what this writer makes (a single PUT is all-or-nothing)
            _remove_written(final, kind)
        full = FULL_DISK.get(getattr(exc, "errno", None)) if isinstance(exc, OSError) else None
        if full:
            raise DiskFull(
                f"{full} while writing the {kind} {final} (at {getattr(exc, 'filename', None) or final})"
            ) from None
        raise


class DiskFull(InputError):
    """A write that failed for lack of space; its own temporary is removed. ``what``: which
    write failed, where; ``kept``: what an earlier write of the same job left that a re-run
    can use (a caller that knows, such as training with its checkpoint, names it)."""

    def __init__(self, what: str, kept: str | None = None):
        self.what = what
        if kept is None:
            message = f"{what}; nothing was left behind: free space there or choose another output path"
        else:
            message = f"{what}; that write left nothing behind, and {kept}"
        super().__init__(message)

    def keeping(self, kept: str) -> DiskFull:
        """The same failure, naming what was kept and how a re-run continues from it."""
        return DiskFull(self.what, kept)


def _check_single_file(final, kind: str, overwrite: bool) -> Location:
    if kind != "file":
        return check_file_output(final, kind=kind, overwrite=overwrite)
    final = _follow_link(resolve(final))  # bookkeeping: a file of ours, never a directory
    if final.exists() and _is_dir(final):
        raise InputError(f"{final} is a directory where dhash keeps a file; move it away")
    return final


def _rename_into_place(tmp: Location, final: Location, kind: str, file: bool) -> None:
    if file:
        # checked once more: a file that appeared since the first check is replaced only if it is ours
        if kind != "file" and os.path.lexists(final.url) and file_kind(final) != kind:
            raise InputError(
                f"output {final} appeared while dhash was writing and is not a dhash {kind}; nothing was replaced"
            )
        if kind != "file" and os.path.lexists(final.url) and changed_since_written(final):
            raise InputError(_edited_refusal(final, kind))
        os.replace(tmp.url, final.url)  # one atomic replace
        return
    if not os.path.lexists(final.url):
        os.replace(tmp.url, final.url)
        return
    old = _move_aside_owned(final, kind)  # never a moment with neither
    os.replace(tmp.url, final.url)
    old.remove()


def _move_aside_owned(final: Location, kind: str) -> Location:
    """Move a local ``kind`` out of the way (``.NAME.old-*``) after checking once more that
    dhash owns all of it (a user may have added files since the first check); when it does
    not, it is moved back and a one-line error raised."""
    old = final.sibling(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
    os.replace(final.url, old.url)
    record = read_commit(old)
    foreign = foreign_entries(old, record) if record is not None and record.get("kind") == kind else ["?"]
    if foreign:
        os.replace(old.url, final.url)
        raise InputError(
            f"output {final} changed while dhash was writing (now holding {_name_some(foreign)}); nothing was "
            "replaced. Move those entries out and run again"
        )
    return old


def write_text_atomic(path, text: str) -> None:
    """dhash's own small bookkeeping file (run state, logs), local or remote, replaced atomically."""
    with atomic_output(path, kind="file", overwrite=True, file=True) as tmp:
        tmp.write_text(text)


def with_suffix(path, suffix: str) -> Location:
    """``path`` with its last suffix replaced by ``suffix`` (added when it has none), as
    pathlib's ``with_suffix`` does, for local paths and URLs alike."""
    loc = resolve(path)
    stem, dot, _ = loc.name[1:].rpartition(".")
    return loc.sibling((loc.name[0] + stem if dot else loc.name) + suffix)


def write_file_output(path, data: bytes, *, kind: str, overwrite: bool = False) -> Location:
    """A user-facing single-file output (``check_file_output`` rules), written atomically
    with its checksum (a JSON object gets it as its first key, ``with_seal_placeholder``)."""
    with atomic_output(path, kind=kind, overwrite=overwrite, file=True) as tmp:
        tmp.write_bytes(with_seal_placeholder(data))
    return resolve(path)
