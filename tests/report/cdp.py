"""A tiny Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no dependencies).

Chromium reads commands from fd 3 and writes replies and events to fd 4, each message a
JSON object followed by a NUL byte. We open one page, collect its console errors,
uncaught exceptions and log errors, and evaluate scripts in it.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1300,1000", "--remote-debugging-pipe")


class CDPError(RuntimeError):
    pass


class Browser:
    """One headless Chromium; ``open(url)`` returns a :class:`Page`. Use as a context manager."""

    def __init__(self, executable: str, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.user_dir = tempfile.mkdtemp(prefix="kvsim-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # in the child: commands on fd 3, replies on fd 4
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.user_dir}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=wire_fds)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []

    # -- the wire ---------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise CDPError("timed out waiting for Chromium")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise CDPError("Chromium closed the pipe (did it crash?)")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: str) -> dict:
        deadline = time.monotonic() + self.timeout_s
        seen = len(self.events)
        for ev in self.events[:seen]:
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev
        while True:
            ev = self._read_message(deadline)
            self.events.append(ev)
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev

    # -- pages ------------------------------------------------------------------------------

    def open(self, url: str) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        return Page(self, session)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.user_dir, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def eval(self, expression: str):
        """Evaluate ``expression`` (awaiting a promise) and return its JSON value."""
        res = self.browser.send("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True}, self.session)
        if "exceptionDetails" in res:
            raise CDPError(f"script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        self.eval("0")  # drain events queued before now
        found = []
        for ev in self.browser.events:
            if ev.get("sessionId") != self.session:
                continue
            method, p = ev.get("method"), ev.get("params", {})
            if method == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                found.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                found.append(f"log: {p['entry'].get('text')}")
        return found
