#!/bin/bash
# plasticlab's tests on other torch releases than this machine's: each release in a virtual
# environment of its own (with this machine's site packages, so plasticlab and the tests'
# other dependencies are the installed ones), torch from PyPI (its CUDA build runs on the CPU).
# It prints, per release, the torch version, the cores and pytest's summary, and what failed.
#
#   bash benchmarks/torch_versions.sh 2.4.1 2.6.0              # the whole suite on each
#   bash benchmarks/torch_versions.sh 2.4.1 -- tests/test_engine.py   # pytest's arguments after --
#
# TORCH_VERSIONS_DIR: where the environments go (default /tmp/plasticlab-torch; kept between
# calls, so a second call does not download again).
set -u
versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#versions[@]} -gt 0 ] || { echo "usage: bash benchmarks/torch_versions.sh VERSION [VERSION …] [-- PYTEST ARGS]"; exit 2; }
root=${TORCH_VERSIONS_DIR:-/tmp/plasticlab-torch}
status=0
for v in "${versions[@]}"; do
  env="$root/$v"
  [ -x "$env/bin/python" ] || python -m venv --system-site-packages "$env" || exit 1
  # PIP_CONSTRAINT emptied: a machine-wide constraints file may cap torch at its own release
  if ! PIP_CONSTRAINT= "$env/bin/pip" install -q "torch==$v" > "$env/install.log" 2>&1; then
    echo "== torch $v: the install failed ($env/install.log)"; status=1; continue
  fi
  echo "== torch $("$env/bin/python" -c 'import torch; print(torch.__version__)'), $(nproc) cores, commit $(git rev-parse --short HEAD)"
  "$env/bin/python" -m pytest -q -n auto -p no:randomly -rf "$@" > "$env/pytest.log" 2>&1 || status=1
  grep -E "^FAILED|^ERROR| passed| failed" "$env/pytest.log" | tail -n 40
done
exit $status
