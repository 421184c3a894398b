"""The run manifest: everything needed to say how a stored result was produced.

A manifest is a plain JSON-able dict saved next to each run in the results store. It records
the fully resolved config and seed (what was asked for) and the environment (which code,
which library versions, which machine and device), so a number in a table can be traced back
to the exact conditions that produced it -- and so bit-reproducibility claims ("same seed,
same machine, same versions") can be checked rather than assumed.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.metadata
import os
import platform
import re
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from ..methods import METHODS
from ..problems import PROBLEMS

__all__ = ["build_manifest", "code_identity", "from_other_code", "git_info", "package_version",
           "plugin_origins", "plugins_changed", "resumed_code_note", "trained_by", "trained_by_text",
           "trains_as_this_code", "utc_now"]

# The directory whose git state identifies the code that ran: the installed package itself,
# not the caller's working directory (a user may run plasticlab from their own repository).
_PACKAGE_DIR = Path(__file__).resolve().parents[1]

# git must never stall a run: a hung credential helper or a slow network filesystem costs at
# most this long, after which the commit is simply recorded as unknown.
_GIT_TIMEOUT_S = 2.0


def utc_now() -> str:
    """The current time as an ISO 8601 string in UTC, e.g. ``2024-05-01T12:00:00.123456+00:00``.

    UTC with an explicit offset, so times from different machines of a cluster compare
    directly and sort as strings.
    """
    return datetime.now(timezone.utc).isoformat()


def package_version() -> str:
    """The installed version of plasticlab, or ``"unknown"`` when it is not installed.

    Read from the distribution metadata rather than ``plasticlab.__version__`` so it works
    whether or not the package defines that attribute (and from a bare source checkout).
    """
    try:
        return importlib.metadata.version("plasticlab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _git(*args: str) -> str | None:
    """Run one git command in the package directory; its stripped stdout, or None on failure."""
    env = dict(os.environ)
    # `git status` may otherwise take the index lock to refresh stat info, which would race
    # with a developer committing while a sweep runs (and with other workers doing the same).
    env["GIT_OPTIONAL_LOCKS"] = "0"
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=_PACKAGE_DIR,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        # git missing, not executable, or too slow: the commit is unknown, not an error.
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip()


def git_info() -> tuple[str | None, bool | None]:
    """The git commit of the plasticlab source tree and whether it has uncommitted changes.

    Returns ``(commit, dirty)``: the 40-hex ``HEAD`` commit and a bool, or ``(None, None)``
    when the package is not a git checkout, git is missing, or git does not answer within
    2 s. ``dirty`` covers changes (including untracked, non-ignored files) under the package
    directory only: edits to docs or tests do not change results.
    """
    # An installed copy in site-packages can sit inside some unrelated repository (a
    # project's .venv); its HEAD would be a lie. Only trust git if it tracks our own files.
    if not _git("ls-files", "--", "__init__.py"):
        return None, None
    commit = _git("rev-parse", "HEAD")
    if commit is None or len(commit) != 40:
        return None, None
    status = _git("status", "--porcelain", "--", ".")
    dirty = None if status is None else bool(status)
    return commit, dirty


@functools.lru_cache(maxsize=1)
def code_identity() -> str:
    """What identifies the code that trains, for telling results of other code apart:
    ``git:<commit>`` (``+dirty`` with uncommitted changes to the package) in a git checkout,
    else ``plasticlab <version>``. Looked up once per process."""
    commit, dirty = git_info()
    if commit is not None:
        return f"git:{commit}" + ("+dirty" if dirty else "")
    return f"plasticlab {package_version()}"


_CLEAN_COMMIT = re.compile(r"git:[0-9a-f]{40}")


@functools.lru_cache(maxsize=256)
def trains_as_this_code(recorded: str | None) -> bool:
    """Whether a run whose manifest records ``recorded`` (its :func:`code_identity`) was trained
    by the code that runs now: the same identity, or two clean commits whose package
    directories are identical — a commit that changes only docs, tests or benchmarks trains
    exactly as the one before it. Anything that cannot be checked (no record, a dirty tree, a
    commit this checkout does not have, no git) counts as other code."""
    current = code_identity()
    if recorded == current:
        return True
    if recorded is None or not _CLEAN_COMMIT.fullmatch(recorded) or not _CLEAN_COMMIT.fullmatch(current):
        return False
    # exit 0: no difference under the package directory; 1 (a difference) or 128 (an unknown
    # commit) make _git return None
    return _git("diff", "--quiet", recorded.removeprefix("git:"), current.removeprefix("git:"),
                "--", ".") is not None


def trained_by(run: dict, tasks: int | None = None) -> list[str | None]:
    """The code of each sitting that trained ``run`` (a dict as the store and an export give
    it) — of its first ``tasks`` tasks only, if given — oldest first, once each: from its
    manifest's ``sittings`` (None for one that left no record), or, for a run recorded before
    sittings were, its ``"code"`` alone."""
    sittings = (run.get("manifest") or {}).get("sittings")
    if not sittings:
        return [run.get("code")]
    return list(dict.fromkeys(s.get("code") for s in sittings
                              if tasks is None or s.get("from_task", 0) < tasks))


def trained_by_text(run: dict, tasks: int | None = None) -> str:
    """:func:`trained_by` as status and verify print it: ``git:a… then git:b…``, with
    ``unrecorded code`` for a sitting that left no record."""
    return " then ".join(code or "unrecorded code" for code in trained_by(run, tasks))


def from_other_code(runs: list[dict]) -> list[dict]:
    """The runs (dicts with a ``"code"`` key and their manifest, as the store and an export give
    them) that :func:`trains_as_this_code` does not vouch for: a run resumed across code
    versions counts if any of its sittings' code does."""
    return [run for run in runs if not all(map(trains_as_this_code, trained_by(run)))]


def plugins_changed(runs: list[dict]) -> str | None:
    """A note on the runs (dicts with their config and manifest, as the store and an export give
    them) whose method or problem a plugin added at another version than the one installed now,
    or that no installed package adds any more: which distribution and version trained how many
    (the code a plasticlab commit does not name, so :func:`from_other_code` cannot see it); None
    when there are none."""
    changed: dict[tuple[str, str], int] = {}
    for run in runs:
        for kind, recorded in ((run.get("manifest") or {}).get("plugins") or {}).items():
            registry = METHODS if kind == "method" else PROBLEMS
            name = run["config"][kind]
            now = registry.origin(name) if name in registry else None
            if now != recorded:
                installed = (f"{now['distribution']} {now['version']} is installed" if now
                             else f"no installed package adds {kind} {name!r}")
                key = (f"{recorded['distribution']} {recorded['version']}", installed)
                changed[key] = changed.get(key, 0) + 1
    if not changed:
        return None
    return "; ".join(f"{count} run(s) of a plugin's method or problem were trained with {was} ({now})"
                     for (was, now), count in changed.items())


def resumed_code_note(header: dict) -> str | None:
    """What resuming a checkpoint mixes, from its header (:func:`plasticlab.checkpoint.read_header`):
    None when every sitting it lists was trained by code that :func:`trains_as_this_code`
    vouches for, or when it lists none (a checkpoint written before headers did); else a note
    that names the code other than this that trained some of its tasks so far (``unrecorded
    code`` for a sitting that left no record), for a sweep, ``run`` or ``status`` to print
    before the resumed runs mix codes."""
    sittings = header.get("sittings")
    if not sittings:
        return None
    others = [code for code in trained_by({"manifest": {"sittings": sittings}})
              if not trains_as_this_code(code)]
    if not others:
        return None
    return (f"of its first {header.get('next_task')} task(s), some were trained by other code than "
            f"this ({code_identity()}): {', '.join(code or 'unrecorded code' for code in others)}; "
            "the runs it finishes will list each sitting's code and count as other code (to train "
            "a long study with one code, see docs/results.md#resume)")


def _library_version(module_name: str) -> str:
    """The version of an importable library as a string, or ``"not installed"``."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return "not installed"
    # str(): torch's version is a TorchVersion (a str subclass); store plain text.
    return str(getattr(module, "__version__", "unknown"))


def build_manifest(config: dict, seed: int, device: str, threads: int) -> dict:
    """The run manifest: fully resolved config, seed, code and library versions, machine.

    Keys:

    - ``config``: a deep copy of the fully resolved config (so later mutation by the caller
      cannot change what was recorded);
    - ``seed``: the run's seed, as an int;
    - ``versions``: ``{"plasticlab", "torch", "numpy", "python"}``, each a string;
    - ``git_commit``: the 40-hex commit of the plasticlab source tree, or None when it is
      not a git checkout or git is unavailable (2 s timeout);
    - ``git_dirty``: whether that tree has uncommitted changes, or None when unknown;
    - ``host``, ``platform``: host name and ``platform.platform()``;
    - ``device``, ``threads``: the torch device and the thread count the run used;
    - ``start_time``: ISO 8601 in UTC.

    - ``code``: :func:`code_identity`;
    - ``plugins``, only for a run of a method or problem another package adds
      (:mod:`plasticlab.registry`): ``{"method": …, "problem": …}``, each its entry point,
      distribution and version — the code that plasticlab's commit does not name.

    ``end_time`` is added by :meth:`ResultStore.finish_run` (or ``fail_run``); the runner adds
    ``ensemble`` (the ensemble the run trained in) and, at the end, the data files' MD5s.
    """
    commit, dirty = git_info()
    manifest = {
        "config": copy.deepcopy(config),
        "seed": int(seed),
        "versions": {
            "plasticlab": package_version(),
            "torch": _library_version("torch"),
            "numpy": _library_version("numpy"),
            "python": platform.python_version(),
        },
        "git_commit": commit,
        "git_dirty": dirty,
        "code": code_identity(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "device": str(device),
        "threads": int(threads),
        "start_time": utc_now(),
    }
    plugins = plugin_origins(config)
    if plugins:
        manifest["plugins"] = plugins
    return manifest


def plugin_origins(config: dict) -> dict[str, dict]:
    """Where the run's method and problem came from, for those another package adds:
    ``{"method": {"entry_point", "distribution", "version"}, …}``; empty for plasticlab's own."""
    origins = {"method": METHODS.origin(config.get("method", "")),
               "problem": PROBLEMS.origin(config.get("problem", ""))}
    return {kind: origin for kind, origin in origins.items() if origin is not None}
