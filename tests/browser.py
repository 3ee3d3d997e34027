"""A real headless browser for the tests: Debian's chromium (installed where it is missing and apt
can), a page's HTML and text after its scripts ran, and a JavaScript value read through the
DevTools protocol (what the page's scripts built, not only its HTML), each with a screenshot."""

import os
import re
import shutil
import subprocess
import time

import pytest


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", "chromium"],
            capture_output=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("Debian's chromium is not installed and could not be installed here")
    return found


def browse(chromium: str, url: str, profile, screenshot=None) -> tuple[str, str]:
    """The page after its scripts ran, in a fresh profile: its HTML and its text (and a screenshot
    of that same state, taken by the same browser run after it wrote the HTML)."""
    args = [
        chromium,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1600,1000",
        "--virtual-time-budget=60000",
        "--dump-dom",
    ]
    if screenshot is not None:
        args.append(f"--screenshot={screenshot}")
    dom = subprocess.run([*args, url], capture_output=True, text=True, timeout=300).stdout
    return dom, re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def evaluate(
    chromium: str, url: str, profile, expression: str, screenshot=None, timeout: float = 120.0, size: str = "1600,1000"
):
    """Open `url` in headless chromium (a fresh profile) and return the JavaScript `expression`'s value
    once it is not null (None if it stays null for `timeout` s), through the DevTools protocol:
    what the page's scripts built (a chart's data), not only its HTML. A screenshot of that state."""
    import asyncio
    import base64
    import itertools

    import aiohttp

    browser = subprocess.Popen(
        [
            chromium,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            f"--window-size={size}",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert time.monotonic() < deadline and browser.poll() is None, "chromium did not open its DevTools port"
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])

        async def drive():
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                    page = next(t for t in await answer.json() if t["type"] == "page")
                async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    ids = itertools.count(1)

                    async def call(method: str, **params):
                        n = next(ids)
                        await ws.send_json({"id": n, "method": method, "params": params})
                        while (message := await ws.receive_json()).get("id") != n:
                            pass
                        return message.get("result", {})

                    await call("Page.navigate", url=url)
                    until = time.monotonic() + timeout
                    while (
                        value := (await call("Runtime.evaluate", expression=expression, returnByValue=True))
                        .get("result", {})
                        .get("value")
                    ) is None and time.monotonic() < until:
                        await asyncio.sleep(1)
                    if screenshot is not None:
                        shot = await call("Page.captureScreenshot", format="png")
                        screenshot.write_bytes(base64.b64decode(shot["data"]))
                    return value

        return asyncio.run(drive())
    finally:
        browser.terminate()
        browser.wait(timeout=60)
