"""Check a report page in a real browser: headless Chromium driven through the DevTools Protocol.

``check_page(path)`` opens an HTML file in headless Chromium and reports what a reader would hit:
console errors, uncaught JavaScript exceptions, failed network requests, requests that leave the
machine (a self-contained page makes none) and how many ``<img>`` elements actually loaded.

It speaks the Chrome DevTools Protocol over ``--remote-debugging-pipe`` (file descriptors 3 and
4 of the browser process, messages separated by NUL bytes), so it needs nothing beyond the
standard library: no websocket client and no TCP port.

Command line (exits non-zero on any problem, 2 when no browser is found)::

    python -m plasticlab.report.browser OUT/index.html
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BrowserError", "PageCheck", "check_page", "find_chromium", "main"]

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

INSTALL_HINT = ("install Chromium (Debian/Ubuntu: `apt-get install -y chromium`) or point "
                "$PLASTICLAB_CHROMIUM at a Chromium/Chrome executable")


class BrowserError(RuntimeError):
    """Chromium could not be started or stopped answering the DevTools Protocol."""


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable, or None when there is none.

    ``$PLASTICLAB_CHROMIUM`` wins when set (a path or a command name on ``$PATH``); otherwise the
    first of chromium, chromium-browser, google-chrome (-stable), chrome found on ``$PATH``.
    """
    env = os.environ.get("PLASTICLAB_CHROMIUM")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        return shutil.which(env)
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageCheck:
    """What headless Chromium saw when it loaded a page.

    ``ok`` is true when there were no console errors, no uncaught exceptions, no failed or
    external requests, and every ``<img>`` loaded.
    """

    url: str
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    images: int = 0
    images_loaded: int = 0
    broken_images: list[str] = field(default_factory=list)
    title: str = ""
    seconds: float = 0.0

    @property
    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions together."""
        return self.console_errors + self.exceptions

    @property
    def problems(self) -> list[str]:
        """Every problem found, one readable line each (empty when the page is fine)."""
        out = [f"console error: {m}" for m in self.console_errors]
        out += [f"uncaught exception: {m}" for m in self.exceptions]
        out += [f"failed request: {m}" for m in self.failed_requests]
        out += [f"external request: {m}" for m in self.external_requests]
        if self.images_loaded < self.images:
            out.append(f"{self.images - self.images_loaded} of {self.images} images did not load: "
                       + ", ".join(self.broken_images))
        return out

    @property
    def ok(self) -> bool:
        """True when the page loaded cleanly (no problems at all)."""
        return not self.problems

    def __str__(self) -> str:
        lines = [f"{self.url}", f"  title: {self.title!r}",
                 f"  images loaded: {self.images_loaded}/{self.images}",
                 f"  console errors: {len(self.console_errors)}, "
                 f"uncaught exceptions: {len(self.exceptions)}, "
                 f"failed requests: {len(self.failed_requests)}, external requests: "
                 f"{len(self.external_requests)}",
                 f"  checked in {self.seconds:.1f} s"]
        lines += [f"  PROBLEM {p}" for p in self.problems]
        lines.append("  OK" if self.ok else f"  FAILED ({len(self.problems)} problems)")
        return "\n".join(lines)


class _Pipe:
    """A DevTools Protocol connection over the browser's fds 3 (commands in) and 4 (replies out)."""

    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int):
        self.proc = proc
        self.wfd = to_browser
        self.rfd = from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self.wfd, data):]
        return self.next_id

    def _read_message(self, deadline: float) -> dict | None:
        """The next message, or None once ``deadline`` passes."""
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise BrowserError(f"Chromium closed the DevTools pipe (exit code {self.proc.poll()})")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 10.0) -> dict:
        """Send a command and wait for its result; events that arrive meanwhile are kept."""
        ident = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message is None:
                raise BrowserError(f"no answer to {method} within {timeout:.0f} s")
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method} failed: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def pump(self, until: float) -> dict | None:
        """Wait for the next event until ``until`` (monotonic time); it is also kept in ``events``."""
        while True:
            message = self._read_message(until)
            if message is None:
                return None
            if "method" in message:
                self.events.append(message)
                return message


def _remote_object_text(arg: dict) -> str:
    if "value" in arg:
        return str(arg["value"])
    return str(arg.get("description") or arg.get("unserializableValue") or arg.get("type", ""))


def _exception_text(details: dict) -> str:
    exc = details.get("exception") or {}
    text = (exc.get("description") or details.get("text") or "exception").strip()
    text = text.splitlines()[0] if text else "exception"
    where = details.get("url") or ""
    if where:
        text += f" ({where}:{details.get('lineNumber', 0) + 1})"
    return text


_IMAGES_JS = """(() => Array.from(document.images).map(img => ({
  src: (img.currentSrc || img.src || '').slice(0, 200),
  complete: img.complete, width: img.naturalWidth})))()"""


def check_page(path: str | os.PathLike, *, timeout: float = 30, settle: float = 0.3,
               chromium: str | None = None) -> PageCheck:
    """Open the HTML file ``path`` in headless Chromium and report what went wrong, if anything.

    Collects console errors (``console.error``/``console.assert`` and browser log entries of level
    error, e.g. a missing image), uncaught exceptions, failed requests, requests to anything but
    ``file:``/``data:``/``blob:``/``about:`` URLs, and counts the ``<img>`` elements and how many
    loaded (complete with ``naturalWidth > 0``). Waits for the load event, then until the network
    has been quiet for ``settle`` seconds. Raises ``FileNotFoundError`` for a missing file and
    :class:`BrowserError` when no browser is found or it misbehaves; ``timeout`` bounds the whole
    check.
    """
    page = Path(path).resolve()
    if not page.is_file():
        raise FileNotFoundError(f"no such file: {page}")
    exe = chromium or find_chromium()
    if exe is None:
        raise BrowserError(f"no Chromium found: {INSTALL_HINT}")
    started = time.monotonic()
    deadline = started + timeout
    url = page.as_uri()
    result = PageCheck(url=url)
    profile = tempfile.mkdtemp(prefix="plasticlab-chromium-")
    conn = _launch(exe, profile)
    try:
        left = lambda: max(0.5, deadline - time.monotonic())  # noqa: E731
        session = _open(conn, url, left)
        requests = _watch_loading(conn, result, deadline, settle, timeout)
        for where in requests.values():
            scheme = where.split(":", 1)[0].lower()
            if scheme not in ("file", "data", "blob", "about") and where not in result.external_requests:
                result.external_requests.append(where)
        _inspect(conn, session, result, left)
        try:
            conn.send("Browser.close")
        except OSError:
            pass
    finally:
        _shut_down(conn, profile)
    result.seconds = time.monotonic() - started
    return result


def _launch(exe: str, profile: str) -> _Pipe:
    """Start headless Chromium ``exe`` with the user data folder ``profile``, speaking the
    DevTools Protocol over a pipe (its fds 3 and 4); the connection to it."""
    # Our ends: we write commands to to_browser_w and read replies from from_browser_r.
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()

    def child_fds() -> None:  # runs in the child between fork and exec: put the pipe ends on 3 and 4
        a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)  # above 4, so dup2 cannot clobber them
        b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
        os.dup2(a, 3)  # dup2 leaves the new descriptors inheritable
        os.dup2(b, 4)

    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking", "--disable-extensions",
            "--disable-component-update", "--disable-sync", "--disable-default-apps",
            "--mute-audio", "--hide-scrollbars", "--window-size=1280,1024", "about:blank"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=child_fds, close_fds=False,
                            start_new_session=True)
    os.close(to_browser_r)
    os.close(from_browser_w)
    return _Pipe(proc, to_browser_w, from_browser_r)


def _open(conn: _Pipe, url: str, left) -> str:
    """Open a tab, listen to its console, log, network and page events, and navigate it to
    ``url``; the tab's session id. ``left()``: the seconds each call may wait."""
    target = conn.call("Target.createTarget", {"url": "about:blank"}, timeout=left())["targetId"]
    session = conn.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                        timeout=left())["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        conn.call(f"{domain}.enable", session=session, timeout=left())
    conn.events.clear()  # anything from about:blank
    conn.call("Page.navigate", {"url": url}, session=session, timeout=left())
    return session


def _watch_loading(conn: _Pipe, result: PageCheck, deadline: float, settle: float,
                   timeout: float) -> dict[str, str]:
    """Follow the page's events until it has loaded and the network has been quiet for
    ``settle`` seconds (or ``deadline`` passes), noting failed requests and console errors in
    ``result``; every request made (id → URL)."""
    requests: dict[str, str] = {}
    pending: set[str] = set()
    loaded = False
    quiet_since = time.monotonic()
    seen = 0
    while time.monotonic() < deadline:
        now = time.monotonic()
        if loaded and not pending and now - quiet_since >= settle:
            break
        wait_until = min(deadline, now + settle) if loaded else deadline
        conn.pump(wait_until)
        for event in conn.events[seen:]:
            method, params = event["method"], event.get("params", {})
            if method == "Page.loadEventFired":
                loaded = True
            elif method == "Network.requestWillBeSent":
                requests[params["requestId"]] = params["request"]["url"]
                pending.add(params["requestId"])
            elif method in ("Network.loadingFinished", "Network.loadingFailed"):
                pending.discard(params["requestId"])
                quiet_since = time.monotonic()
                if method == "Network.loadingFailed" and not params.get("canceled"):
                    where = requests.get(params["requestId"], "?")
                    result.failed_requests.append(f"{where} ({params.get('errorText', 'failed')})")
            else:
                _note_console(method, params, result)
        seen = len(conn.events)
    else:
        if not loaded:
            raise BrowserError(f"{result.url} did not finish loading within {timeout:.0f} s")
        result.failed_requests += [f"{requests[r]} (still pending after {timeout:.0f} s)"
                                   for r in pending]
    return requests


def _note_console(method: str, params: dict, result: PageCheck) -> None:
    """Note in ``result`` what the event ``method`` shows in a reader's console: an uncaught
    exception, a ``console.error``/``console.assert``, a browser log entry of level error."""
    if method == "Runtime.exceptionThrown":
        result.exceptions.append(_exception_text(params.get("exceptionDetails", {})))
    elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        result.console_errors.append(" ".join(_remote_object_text(a)
                                              for a in params.get("args", [])))
    elif method == "Log.entryAdded":
        entry = params.get("entry", {})
        if entry.get("level") == "error":
            text = entry.get("text", "")
            if entry.get("url"):
                text += f" ({entry['url']})"
            result.console_errors.append(text)


def _inspect(conn: _Pipe, session: str, result: PageCheck, left) -> None:
    """Note in ``result`` the loaded page's images (how many, which did not load) and its
    title. ``left()``: the seconds each call may wait."""
    evaluated = conn.call("Runtime.evaluate", {"expression": _IMAGES_JS, "returnByValue": True},
                          session=session, timeout=left())
    images = evaluated.get("result", {}).get("value") or []
    result.images = len(images)
    for img in images:
        if img.get("complete") and (img.get("width") or 0) > 0:
            result.images_loaded += 1
        else:
            result.broken_images.append(img.get("src") or "(no src)")
    title = conn.call("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                      session=session, timeout=left())
    result.title = str(title.get("result", {}).get("value", ""))


def _shut_down(conn: _Pipe, profile: str) -> None:
    """Wait briefly for the browser to exit, else kill it with its helpers; close our pipe
    ends and remove its user data folder."""
    try:
        conn.proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        try:  # the browser runs in its own session: stop it and its helper processes
            os.killpg(conn.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        conn.proc.wait(timeout=5)
    os.close(conn.wfd)
    os.close(conn.rfd)
    shutil.rmtree(profile, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Check each page given on the command line; 0 when all are fine, 1 on problems, 2 on no browser."""
    parser = argparse.ArgumentParser(
        prog="python -m plasticlab.report.browser",
        description="Open report pages in headless Chromium; report console errors, uncaught exceptions, "
                    "failed or external requests and images that did not load. Exits non-zero on any "
                    "problem.")
    parser.add_argument("pages", nargs="+", type=Path, help="HTML files, e.g. OUT/index.html")
    parser.add_argument("--timeout", type=float, default=30, help="seconds per page (default 30)")
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print(f"no Chromium found: {INSTALL_HINT}", file=sys.stderr)
        return 2
    status = 0
    for page in args.pages:
        try:
            check = check_page(page, timeout=args.timeout)
        except (OSError, BrowserError) as err:
            print(f"{page}\n  FAILED: {err}")
            status = 1
            continue
        print(check)
        if not check.ok:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
