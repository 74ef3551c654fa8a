"""Open a page in headless Chromium and look at it as a reader's browser does, for tests.

Talks the Chrome DevTools Protocol over --remote-debugging-pipe (fd 3 in, fd 4 out, messages
ending in NUL), so no websocket library or browser driver is needed. Collects console
messages, uncaught exceptions, log entries and every network request the page makes.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from pathlib import Path

from attnbench.report.pdf import FLAGS, find_chromium


class Page:
    def __init__(self, timeout: float = 30.0):
        exe = find_chromium()
        if exe is None:
            raise RuntimeError("no chromium")
        self.timeout = timeout
        self.profile = tempfile.TemporaryDirectory(prefix="attnbench-test-chromium-")
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()

        def fds():  # the child reads commands on fd 3 and writes replies to fd 4
            high_r, high_w = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)  # dup2 clears close-on-exec: 3 and 4 survive exec, the rest close
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self.profile.name}", "--remote-debugging-pipe", "about:blank"],
            close_fds=False,
            preexec_fn=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child_r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_child_r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def open(self, path: Path) -> None:
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session=True)
        self.wait_event("Page.loadEventFired")

    def eval(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session=True)
        if "exceptionDetails" in res:
            raise RuntimeError(res["exceptionDetails"])
        return res["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, error log entries, failed loads."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {p.get('args')}")
            elif m == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Network.loadingFailed":
                out.append(f"load failed: {p.get('errorText')}")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child_w)
        os.close(self._from_child_r)
        self.profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
