#!/usr/bin/env bash
# Set up a fresh machine: Debian's Fashion-MNIST package (real data for the demo and
# tests), a virtualenv in .venv and this package with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  fi
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import dask_hashcodes, faiss, dask, zarr; print('dask_hashcodes', dask_hashcodes.__version__, 'ready')"
