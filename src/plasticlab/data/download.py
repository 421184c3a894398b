"""Downloading dataset files, with checksum verification.

All network access of the package goes through :func:`_download`, so tests can replace that
one function (``monkeypatch.setattr(plasticlab.data.download, "_download", fake)``) and never
touch the network. :func:`fetch` wraps it with the directory handling and the error message a
user needs when there is no network: which file, which directory, which URL, and that the file
can be placed there by hand.
"""

from __future__ import annotations

from pathlib import Path

from .errors import DATA_DIR_HINT, DataError


def _download(url: str, md5: str, dest_dir: Path) -> Path:
    """Download ``url`` into ``dest_dir`` (file name = last URL component), verify its MD5.

    The only function of the package that touches the network. pooch writes to a temporary
    file and moves it into place only after the checksum matched, so an interrupted or
    corrupted download never leaves a file that looks complete.
    """
    import pooch  # imported lazily: only downloads need it

    fname = url.rsplit("/", 1)[-1]
    path = pooch.retrieve(
        url, known_hash=f"md5:{md5}", fname=fname, path=dest_dir, progressbar=_progressbar()
    )
    return Path(path)


def _progressbar() -> bool:
    # pooch's progress bar needs tqdm; without it, download quietly rather than fail.
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def fetch(url: str, md5: str, dest_dir: Path) -> Path:
    """Download ``url`` into ``dest_dir`` with MD5 verification, or raise :class:`DataError`.

    The error names the missing file, the directory it was expected in and the URL, and says
    that the file may be downloaded elsewhere and placed there manually. A failed download
    leaves no directory behind that this call created (those still empty when it fails).
    """
    fname = url.rsplit("/", 1)[-1]
    target = dest_dir / fname
    manual = f"Download {url} yourself (md5 {md5}) and put it at {target}. {DATA_DIR_HINT}"
    created = _missing_dirs(dest_dir)
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(
            f"{target} is missing and cannot be downloaded: the directory {dest_dir} cannot "
            f"be created ({exc}). {manual}"
        ) from exc
    path = None
    try:
        path = _download(url, md5, dest_dir)
    except DataError:
        raise
    except Exception as exc:  # network errors, HTTP errors, checksum mismatch, disk full...
        raise DataError(
            f"{fname} is missing from {dest_dir} and downloading it from {url} failed "
            f"({type(exc).__name__}: {exc}). {manual}"
        ) from exc
    finally:
        if path is None:
            # A mistyped --data-dir with no network would otherwise leave a tree of empty
            # folders behind: take back the ones made here, deepest first, while still empty.
            _remove_empty(created)
    return Path(path)


def _missing_dirs(path: Path) -> list[Path]:
    """The directories ``path.mkdir(parents=True)`` would create, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _remove_empty(dirs: list[Path]) -> None:
    """Remove each of ``dirs`` (deepest first) that is still an empty directory."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:  # not empty (something else wrote there) or already gone
            return
