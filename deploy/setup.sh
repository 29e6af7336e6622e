#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine in one of two modes. Idempotent: run it again, or
# run `test` after `run`, and it only adds what is missing.
#   run   Debian's Fashion-MNIST package (real data for the demo), a virtualenv in .venv and
#         this package with its runtime dependencies only: what `dhash demo` and `dhash run` need.
#   test  the same plus the `test` extra (pytest, faiss, torch, OpenCV, MkDocs, the deploy/
#         validators): everything the test suite imports, several GB more.
# The mode is required: the two differ by gigabytes, and older instructions said a bare
# `bash deploy/setup.sh`, so guessing either one would surprise somebody.
set -euo pipefail
usage="usage: bash deploy/setup.sh run|test  (run: runtime only, for the demo; test: adds the test extra)"
if [ $# -ne 1 ]; then
  echo "deploy/setup.sh: expected one mode, got $#; $usage" >&2
  exit 2
fi
case "$1" in
  run) extra="" ;;
  test) extra="[test]" ;;
  *)
    echo "deploy/setup.sh: unknown mode '$1'; $usage" >&2
    exit 2
    ;;
esac
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}
apt_install() {
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  {
    echo "deploy/setup.sh: python3 is $(python3 -V 2>&1 | cut -d' ' -f2); dask-hashcodes needs Python >= 3.11" >&2
    exit 1
  }
[ -d /usr/share/datasets/fashion-mnist ] || apt_install dataset-fashion-mnist
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  # Debian's python3 creates virtualenvs with pip only once its python3-venv package (ensurepip)
  # is installed; without it `venv` leaves a .venv with no pip, which a second `venv` repairs
  if ! python3 -m venv .venv >/dev/null 2>&1; then
    apt_install python3-venv
    python3 -m venv .venv
  fi
fi
pip_install() {
  # quiet, but a failed install stops the script with pip's own output
  local out
  if ! out=$(.venv/bin/python -m pip install -q "$@" 2>&1); then
    printf '%s\n' "$out" >&2
    echo "deploy/setup.sh: pip install $* failed" >&2
    exit 1
  fi
  printf '%s\n' "$out" | grep -v -e "^WARNING: Location" -e '^$' || true
}
# a fresh Debian's pip is too old for editable installs from pyproject.toml alone
pip_install --upgrade pip
pip_install -e ".$extra"
# byte-compile the package once: an editable install leaves it as source, and where
# PYTHONDONTWRITEBYTECODE is set (many CI images and containers) every process that imports
# it (each dhash command, each Dask worker) would compile it again, about half a second each
.venv/bin/python -m compileall -q pipeline/dask_hashcodes >/dev/null
if [ "$1" = test ]; then
  .venv/bin/python -c "import dask_hashcodes, faiss, pytest; print('dask_hashcodes', dask_hashcodes.__version__, 'ready to test')"
else
  # the runtime mode installs no faiss: this line checks only what the demo imports
  .venv/bin/python -c "import dask_hashcodes, dask, zarr; print('dask_hashcodes', dask_hashcodes.__version__, 'ready')"
fi
