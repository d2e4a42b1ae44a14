"""Headless Chromium driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`: the
browser reads commands on its fd 3 and answers on fd 4, each message JSON ended by a NUL), so a test
can open a page, read its DOM as it changes, and take a screenshot, with no extra package."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--enable-logging=stderr", "--v=0"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one tab."""

    def __init__(self, executable: str, width: int = 1200, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="autodiscovery-chromium-")
        to_browser, self._in = os.pipe()  # we write commands on _in; the browser reads them on fd 3
        self._out, from_browser = os.pipe()  # the browser writes on fd 4; we read on _out

        def fds() -> None:  # in the child, before exec: the pipe ends at fds 3 and 4
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, pass_fds=(3, 4), preexec_fn=fds)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        self.call("Log.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method: str, session: bool = False, timeout: float = 60, **params) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._in, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                self.log.seek(0)
                raise RuntimeError(f"Chromium exited: {self.log.read().decode(errors='replace')[-2000:]}")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(text)

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate and wait for the page's load event."""
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline))

    def js(self, expression: str):
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60, every: float = 0.25):
        """Wait until a JavaScript expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := self.js(expression):
                return value
            time.sleep(every)
        raise TimeoutError(f"still false after {timeout} s: {expression}")

    def errors(self, origin: str = "") -> list[str]:
        """What the page reported as errors (exceptions, console errors, blocked by the CSP); with
        `origin`, not those of other origins' requests (an earlier page's, cut off as it went)."""
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(e["params"]["exceptionDetails"].get("text", "exception"))
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                out.append(" ".join(str(a.get("value")) for a in e["params"]["args"]))
            elif e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error" \
                    and e["params"]["entry"].get("url", origin).startswith(origin):
                out.append(e["params"]["entry"]["text"])
        return out

    def screenshot(self, path: Path, full: bool = True) -> Path:
        params = {"format": "png", "captureBeyondViewport": full}
        if full:
            w, h = self.js("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": min(h, 12000), "scale": 1}
        data = self.call("Page.captureScreenshot", session=True, **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._in, self._out):
            os.close(fd)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
