"""A real headless Chromium for the HTML report tests, driven over the DevTools protocol.

Debian's ``chromium`` (``make browser`` installs it as root; ``.ci/run`` does so when it is
missing) is started headless with a private profile and ``--remote-debugging-port=0``; the
port is read from the profile's ``DevToolsActivePort``. :meth:`Browser.load` opens a page in a
new tab and records, until the load event and a short settle time, every console error,
uncaught exception, log error (CSP violations included) and failed request.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio",
         "--remote-debugging-port=0", "--remote-allow-origins=*"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    url: str
    errors: list[str] = field(default_factory=list)       # console errors, exceptions, log errors
    failed_requests: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    def __init__(self, executable: str, profile: Path):
        import websocket  # websocket-client (dev dependency)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and len(port_file.read_text().split()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port, path = port_file.read_text().split()[:2]
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=30,
                                              suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    # -- protocol -----------------------------------------------------------------------
    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        self.ws.settimeout(60)
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for index, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(index)
        self.ws.settimeout(timeout)
        while time.monotonic() < deadline:
            event = json.loads(self.ws.recv())
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self.events.append(event)
        raise TimeoutError(method)

    def drain(self, seconds: float) -> None:
        """Collect events for ``seconds`` more (late console errors, deferred requests)."""
        import websocket

        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.ws.settimeout(left)
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                break

    # -- pages --------------------------------------------------------------------------
    @contextlib.contextmanager
    def tab(self, width: int = 1280, height: int = 900):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable", session=session)
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                      session=session)
            yield Tab(self, session)
        finally:
            self.send("Target.closeTarget", {"targetId": target})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Tab:
    def __init__(self, browser: Browser, session: str):
        self.browser = browser
        self.session = session

    def load(self, path: Path) -> PageLoad:
        browser, session = self.browser, self.session
        url = path.resolve().as_uri()
        browser.events = [e for e in browser.events if e.get("sessionId") != session]
        browser.send("Page.navigate", {"url": url}, session=session)
        browser.wait_event("Page.loadEventFired", session)
        browser.drain(0.3)
        load = PageLoad(url)
        for event in browser.events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                load.errors.append("exception: " + json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                load.errors.append("console: " + json.dumps(params.get("args"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                load.errors.append("log: " + params["entry"].get("text", "")[:500])
            elif method == "Network.requestWillBeSent":
                load.requests.append(params["request"]["url"])
            elif method == "Network.loadingFailed":
                load.failed_requests.append(f"{params.get('errorText')} ({params.get('requestId')})")
            elif method == "Network.responseReceived" and params["response"].get("status", 0) >= 400:
                load.failed_requests.append(f"{params['response']['status']} {params['response']['url']}")
        browser.events = [e for e in browser.events if e.get("sessionId") != session]
        return load

    def evaluate(self, expression: str):
        result = self.browser.send("Runtime.evaluate", {"expression": expression,
                                                        "returnByValue": True},
                                   session=self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    def screenshot(self, target: Path, *, full_page: bool = False) -> Path:
        params: dict = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, "
                                 "Math.min(document.documentElement.scrollHeight, 4000)]")
            params.update({"captureBeyondViewport": True,
                           "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}})
        data = self.browser.send("Page.captureScreenshot", params, session=self.session)["data"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(data))
        return target
