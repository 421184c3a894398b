#!/bin/bash
# plasticlab's tests on other Pythons than this machine's: each in a virtual environment of its
# own, installed by the README's own command (`pip install -c constraints.txt -e ".[test]"`:
# the CPU torch of constraints.txt and the tests' dependencies, as that Python resolves them),
# then the suite. It prints, per Python, its version, torch's, the cores and pytest's summary,
# and what failed.
#
#   bash benchmarks/python_versions.sh 3.10 3.12 3.13            # the whole suite on each
#   bash benchmarks/python_versions.sh 3.12 -- tests/test_engine.py   # pytest's arguments after --
#
# A Python is found as pythonX.Y on PATH, else under pyenv's versions (~/.pyenv/versions/X.Y.*);
# a path to an interpreter is taken as it is. PYTHON_VERSIONS_DIR: where the environments go
# (default /tmp/plasticlab-python; kept between calls, so a second call installs nothing new).
set -u
cd "$(dirname "$0")/.."
versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#versions[@]} -gt 0 ] || { echo "usage: bash benchmarks/python_versions.sh X.Y [X.Y …] [-- PYTEST ARGS]"; exit 2; }
root=${PYTHON_VERSIONS_DIR:-/tmp/plasticlab-python}
status=0
for v in "${versions[@]}"; do
  python=""
  # the first that runs: a pyenv shim on PATH exists for every version but runs only the selected
  for candidate in "$v" "$(command -v "python$v")" $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python 2>/dev/null | sort -rV); do
    if [ -x "$candidate" ] && "$candidate" -c "" 2>/dev/null; then python=$candidate; break; fi
  done
  [ -n "$python" ] || { echo "== Python $v: no interpreter found (pythonX.Y on PATH, or pyenv's)"; status=1; continue; }
  env="$root/$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [ -x "$env/bin/python" ] || "$python" -m venv "$env" || { status=1; continue; }
  if ! "$env/bin/pip" install -q -c constraints.txt -e ".[test]" > "$env/install.log" 2>&1; then
    echo "== Python $v: the install failed ($env/install.log)"; tail -n 5 "$env/install.log"; status=1; continue
  fi
  echo "== Python $("$env/bin/python" -c 'import platform; print(platform.python_version())'), torch $("$env/bin/python" -c 'import torch; print(torch.__version__)'), $(nproc) cores, commit $(git rev-parse --short HEAD)"
  # its bin first on PATH: the tests that run `plasticlab` or `python` by name run this one
  PATH="$env/bin:$PATH" "$env/bin/python" -m pytest -q -n auto -p no:randomly -rf "$@" > "$env/pytest.log" 2>&1 || status=1
  grep -E "^FAILED|^ERROR| passed| failed|error" "$env/pytest.log" | tail -n 40
done
exit $status
