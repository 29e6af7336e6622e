"""Where artifacts live: a local path or an fsspec URL, resolved once when it is named.

Every dataset, model, codes array, result file and report is named by a ``Location``:

* a local path (``data/s.zarr``, ``/mnt/shared/s.zarr`` or ``file:///mnt/shared/s.zarr``)
  becomes an absolute path at once, on the client, so a worker started in another
  directory (or on another machine with the same shared mount) reads the same files;
* a URL (``s3://``, ``gs://``, ``abfs://``, ``memory://``...) stays a URL and is opened
  through fsspec with the storage options in force when it was resolved.

Storage options (endpoint, profile, anonymous access...) are held by a ``Storage``, an
immutable context passed explicitly: ``resolve(url, storage=...)``, the workflows'
``storage=`` keyword. It is built from an explicit dict (``--storage-options JSON``, a
``dhash run`` file's ``storage-options`` table) or, when none is given, from
``$DHASH_STORAGE_OPTIONS`` or the config's ``storage-options`` table (``Storage.from_env``).
There is no process-wide setting: two workflows in one process may use two stores. The
options travel with the Location to the workers (inside the pickled task, like any
argument) but never into a task key, a report or an artifact's metadata:
``str(location)`` is the URL alone and ``__dask_tokenize__`` hashes only the URL.

Errors of the stores and the OS (refused or missing credentials, a missing bucket, an
unreachable endpoint, an option the filesystem does not take) become one-line InputErrors
in one place, ``storage_error``, where the command line catches errors; the client sees
those raised on Dask workers as the same types.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import re
from functools import cached_property
from urllib.parse import urlsplit

from dask_hashcodes.errors import InputError

STORAGE_OPTIONS_ENV = "DHASH_STORAGE_OPTIONS"
SCHEDULER_PROTOCOLS = ("tcp", "tls", "ucx", "inproc", "ws", "wss")  # Dask addresses, never storage
# the optional extra that provides each protocol's fsspec filesystem
EXTRAS = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
    "az": ("adlfs", "azure"),
}


_OPTIONS_EXAMPLE = 'write e.g. `storage_options={"endpoint_url":"http://127.0.0.1:9000"}`'


class Storage:
    """The fsspec storage options URLs are opened with: an immutable value (the options are
    kept as canonical JSON), passed explicitly to ``resolve`` and the workflows rather than
    set for the whole process. ``Storage.of(x)`` accepts a Storage, a dict of options, or
    None (the environment's: ``Storage.from_env``). Its repr names the option keys only,
    never their values (credentials)."""

    __slots__ = ("_json",)

    def __init__(self, options: dict | None = None):
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise InputError(f"storage options must be a JSON object, got {type(options).__name__}; {_OPTIONS_EXAMPLE}")
        try:
            text = json.dumps(options, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise InputError(f"storage options must be JSON values ({exc}); {_OPTIONS_EXAMPLE}") from None
        object.__setattr__(self, "_json", text)

    def __setattr__(self, name, value):
        raise AttributeError("a Storage is immutable; make a new one with Storage(options)")

    def __reduce__(self):
        return (Storage, (self.options,))

    @property
    def options(self) -> dict:
        """A fresh copy of the options (changing it changes no Storage)."""
        return json.loads(self._json)

    def __eq__(self, other) -> bool:
        return isinstance(other, Storage) and other._json == self._json

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return f"Storage(keys={sorted(self.options)})"

    @classmethod
    def from_env(cls) -> Storage:
        """``$DHASH_STORAGE_OPTIONS`` (a JSON object) when set, else the config's
        ``storage-options`` table, else no options."""
        text = os.environ.get(STORAGE_OPTIONS_ENV, "").strip()
        if not text:
            from dask_hashcodes import config

            configured = config.get("storage-options")
            return cls(dict(configured) if configured else {})
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"${STORAGE_OPTIONS_ENV} is not JSON ({exc.msg}); set it to a JSON object or unset it"
            ) from None
        if not isinstance(value, dict):
            raise InputError(f"${STORAGE_OPTIONS_ENV} must be a JSON object; got {text[:40]!r}")
        return cls(value)

    @classmethod
    def of(cls, storage) -> Storage:
        """A Storage from a Storage (as is), a dict of options, or None (``from_env``)."""
        if storage is None:
            return cls.from_env()
        if isinstance(storage, Storage):
            return storage
        return cls(storage)

    def resolve(self, where) -> Location:
        """``resolve(where, storage=self)``."""
        return resolve(where, storage=self)


def _protocol(text: str) -> str | None:
    head, sep, _ = text.partition("://")
    return head.lower() if sep and head.replace("+", "").replace("-", "").isalnum() else None


class Location:
    """A resolved path or URL. Local: ``url`` is an absolute path. Remote: the full URL."""

    def __init__(self, url: str, options: dict | None = None):
        self.url = url
        self.protocol = _protocol(url)
        self.options = options or {}

    @property
    def is_local(self) -> bool:
        return self.protocol is None

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Location({self.url!r})"

    def __fspath__(self) -> str:
        if not self.is_local:
            raise TypeError(f"{self.url} is not a local path")
        return self.url

    def __eq__(self, other) -> bool:
        return isinstance(other, Location) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __dask_tokenize__(self):
        return ("dhash-location", self.url)  # never the credentials

    def __getstate__(self):
        return {"url": self.url, "protocol": self.protocol, "options": self.options}

    def __setstate__(self, state):
        self.__dict__.update(state)

    # ---------------------------------------------------------------- names -----------
    @property
    def name(self) -> str:
        return posixpath.basename(self.url.rstrip("/"))

    @property
    def parent(self) -> Location:
        return Location(posixpath.dirname(self.url.rstrip("/")), self.options)

    def child(self, *parts: str) -> Location:
        return Location(posixpath.join(self.url, *parts), self.options)

    def sibling(self, name: str) -> Location:
        return self.parent.child(name)

    def __truediv__(self, part: str) -> Location:
        return self.child(part)

    # ---------------------------------------------------------------- filesystem ------
    @cached_property
    def fs(self):
        """The fsspec filesystem (local: fsspec's LocalFileSystem)."""
        import fsspec

        protocol = self.protocol or "file"
        try:
            return fsspec.filesystem(protocol, **(self.options if self.protocol else {}))
        except ImportError:
            package, extra = EXTRAS.get(protocol, (f"the fsspec backend for {protocol}://", None))
            fix = f"pip install 'dask-hashcodes[{extra}]'" if extra else f"install {package}"
            raise InputError(
                f"{self.url}: no filesystem for {protocol}:// ({package} is not installed); {fix}"
            ) from None
        except (ValueError, TypeError) as exc:
            raise InputError(
                f"{self.url}: bad storage options for {protocol}:// ({exc}); fix `storage_options`"
            ) from None

    @property
    def fs_path(self) -> str:
        """The path inside ``fs`` (the URL without its protocol for remote filesystems)."""
        return self.url if self.is_local else self.fs._strip_protocol(self.url)

    def _info(self) -> dict | None:
        """fsspec's info of a remote location, None when absent. fsspec's own ``exists`` and
        ``isfile`` answer False to any error, so wrong credentials or an unreachable endpoint
        would read as "no such file"; here only "not found" is False, the rest is raised."""
        try:
            return self.fs.info(self.fs_path)
        except FileNotFoundError:
            return None

    def exists(self) -> bool:
        return os.path.lexists(self.url) if self.is_local else self._info() is not None

    def is_file(self) -> bool:
        if self.is_local:
            return os.path.isfile(self.url)
        info = self._info()
        return info is not None and info.get("type") == "file"

    def read_bytes(self) -> bytes:
        if self.is_local:
            with open(self.url, "rb") as f:
                return f.read()
        return self.fs.cat_file(self.fs_path)

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def write_bytes(self, data: bytes) -> None:
        """One object/file. On object stores a single PUT is all-or-nothing."""
        if self.is_local:
            os.makedirs(os.path.dirname(self.url), exist_ok=True)
            with open(self.url, "wb") as f:
                f.write(data)
        else:
            self.fs.pipe_file(self.fs_path, data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())

    def open(self, mode: str = "rb"):
        if self.is_local:
            if "w" in mode:
                os.makedirs(os.path.dirname(self.url), exist_ok=True)
            return open(self.url, mode)
        return self.fs.open(self.fs_path, mode)

    def list_names(self) -> list[str]:
        """Names directly under this location (empty when there is nothing)."""
        if self.is_local:
            return sorted(os.listdir(self.url)) if os.path.isdir(self.url) else []
        try:
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.fs_path, detail=False))
        except FileNotFoundError:
            return []

    def remove(self) -> None:
        """Delete this file or tree (nothing if absent)."""
        if self.is_local:
            import shutil

            if os.path.isdir(self.url) and not os.path.islink(self.url):
                shutil.rmtree(self.url, ignore_errors=True)
            elif os.path.lexists(self.url):
                os.unlink(self.url)
            return
        try:
            self.fs.rm(self.fs_path, recursive=True)
        except FileNotFoundError:
            pass
        self.fs.invalidate_cache()

    def zarr_store(self, *, read_only: bool = False):
        """A zarr store for this location (local: the absolute path; remote: fsspec)."""
        if self.is_local:
            return self.url
        from zarr.storage import FsspecStore

        return FsspecStore.from_url(self.url, storage_options=self.options, read_only=read_only)


def resolve(where, storage=None) -> Location:
    """A Location from a path, ``file://`` URL, remote URL or Location (returned as is: it
    keeps the options it was resolved with). A remote URL is opened with ``storage`` (a
    Storage, a dict of options, or None: the environment's, ``Storage.from_env``)."""
    if isinstance(where, Location):
        return where
    text = os.fspath(where) if isinstance(where, os.PathLike) else str(where)
    if not text.strip():
        raise InputError("an empty path was given; name a file, directory or URL")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # a name with bytes that are not UTF-8 reaches Python as lone surrogates; artifacts
        # record their paths in JSON and zarr metadata, which must be UTF-8
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        raise InputError(
            f"path {shown} is not valid UTF-8; rename it (or choose another path) with a UTF-8 name"
        ) from None
    protocol = _protocol(text)
    if protocol == "file":
        text, protocol = text[len("file://") :], None
    if protocol is None:
        return Location(os.path.abspath(os.path.expanduser(text)))
    return Location(text.rstrip("/"), Storage.of(storage).options)


# ------------------------------------------------------------------ errors of stores ---

# S3 error codes that mean the request's credentials were refused
_CREDENTIAL_CODES = {
    "403",
    "AccessDenied",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidToken",
    "SignatureDoesNotMatch",
    "TokenRefreshRequired",
}
_OS_ERRNOS = {"EACCES", "EPERM", "ENOSPC", "EROFS", "EDQUOT", "ENOTDIR", "EISDIR", "ENAMETOOLONG", "ENOENT", "ELOOP"}


def _chain(exc: BaseException):
    """``exc`` and the exceptions it was raised from (s3fs wraps botocore's in OSErrors)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _module(exc: BaseException) -> str:
    return type(exc).__module__.split(".")[0]


def storage_error(exc: BaseException, urls=(), storage=None) -> InputError | None:
    """The one-line InputError for an error of the OS or an object store (refused or missing
    credentials, a missing bucket, an unreachable endpoint, an unknown storage option, a
    local path that cannot be written), or None when ``exc`` is none of these (a bug, which
    keeps its traceback). ``urls``: the remote locations the command names; the message
    names the one concerned (all of them when the error does not tell which). ``storage``:
    the Storage (or options) the command used, when the caller knows it. The error may
    have been raised on a Dask worker: it reaches the client as the same type."""
    # storage URLs only: a command line also holds the scheduler's address (tcp://...)
    urls = [str(u) for u in urls if _protocol(str(u)) and _protocol(str(u)) not in SCHEDULER_PROTOCOLS]
    where = ", ".join(urls) if urls else "remote storage"
    options_fix = "fix `storage_options` (or the config's storage-options table / $" + STORAGE_OPTIONS_ENV + ")"
    for e in _chain(exc):
        name, module = type(e).__name__, _module(e)
        if module == "botocore" and name in (
            "NoCredentialsError",
            "PartialCredentialsError",
            "CredentialRetrievalError",
        ):
            return InputError(
                f"{where}: no credentials for the object store ({e}); give key and secret in `storage_options`, "
                "or set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
            )
        if module == "botocore" and name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError"):
            endpoint = urlsplit(getattr(e, "kwargs", {}).get("endpoint_url", ""))
            endpoint = f"{endpoint.scheme}://{endpoint.netloc}" if endpoint.netloc else ""
            return InputError(
                f"{where}: cannot reach the object store{' at ' + endpoint if endpoint else ''} ({name}); "
                "check endpoint_url in `storage_options` and that the store is up and reachable"
            )
        response = getattr(e, "response", None)
        if module == "botocore" and isinstance(response, dict):
            error = response.get("Error", {})
            code = str(error.get("Code", ""))
            if code == "NoSuchBucket":
                bucket = error.get("BucketName")
                named = [u for u in urls if bucket and u.split("://", 1)[1].split("/", 1)[0] == bucket]
                return InputError(
                    f"{', '.join(named) or where}: the bucket{' ' + bucket if bucket else ''} does not exist; "
                    "create the bucket, or fix the URL"
                )
            if code in _CREDENTIAL_CODES:
                return InputError(
                    f"{where}: the object store refused the request ({code}: {error.get('Message', '')}); "
                    "check the credentials in `storage_options` / the AWS environment (key, secret, token, "
                    "profile) and the bucket's permissions"
                )
        if isinstance(e, TypeError):
            # an option the filesystem does not take fails only when the client is made
            match = re.search(r"unexpected keyword argument '(\w+)'", str(e))
            if match and (match.group(1) in _given_options(storage) or _raised_in_filesystem(e)):
                return InputError(f"{where}: unknown storage option {match.group(1)!r}; {options_fix}")
        if urls and isinstance(e, TimeoutError) and module in ("builtins", "asyncio", "aiohttp"):
            return InputError(
                f"{where}: a request to the object store timed out ({e or name}); check endpoint_url in "
                "`storage_options`, the network, and that the store is up"
            )
        if module == "aiohttp" and name in ("ClientConnectorError", "ServerTimeoutError", "ServerDisconnectedError"):
            return InputError(
                f"{where}: cannot reach the storage endpoint ({e}); check endpoint_url in `storage_options`"
            )
    if urls and isinstance(exc, PermissionError) and not exc.filename:
        # s3fs's translation of a refused request, whose botocore cause was lost on the way
        # from a Dask worker
        return InputError(
            f"{where}: the object store refused the request ({exc}); check the credentials in `storage_options` / "
            "the AWS environment and the bucket's permissions"
        )
    if urls and isinstance(exc, FileNotFoundError) and "bucket does not exist" in str(exc):
        return InputError(f"{where}: the bucket does not exist; create the bucket, or fix the URL")
    if isinstance(exc, OSError) and exc.filename and errno.errorcode.get(exc.errno) in _OS_ERRNOS:
        shown = os.fsencode(str(exc.filename)).decode("utf-8", "backslashreplace")
        return InputError(f"{shown}: {exc.strerror}; check the path, its permissions and the free space")
    return None


def _given_options(storage) -> dict:
    """The storage options in use (none when they are themselves malformed)."""
    try:
        return Storage.of(storage).options
    except InputError:
        return {}


# packages whose client constructors receive the storage options as keyword arguments
_FILESYSTEM_PACKAGES = {"fsspec", "s3fs", "gcsfs", "adlfs", "botocore", "aiobotocore", "azure"}


def _raised_in_filesystem(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside a filesystem's client code: an unexpected keyword
    there is a storage option the filesystem does not take, not a bug of ours."""
    tb = exc.__traceback__
    while tb is not None:
        name = str(tb.tb_frame.f_globals.get("__name__", ""))
        if name.split(".")[0] in _FILESYSTEM_PACKAGES:
            return True
        tb = tb.tb_next
    return False
