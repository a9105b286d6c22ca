#!/usr/bin/env python3
"""Headless-Chromium test of the MNIST sample page (examples/web), standard library only.

Serves WWW_DIR on 127.0.0.1 (a secure context, as WebGPU requires), drives Chromium through
chromedriver's W3C WebDriver HTTP API, waits for the page's window.tensormemResult, then checks:
the three bundled digits are predicted as their labels (7, 2, 1); every logit is within 1e-3 of
the native host backend's (NATIVE_JSON, the output of `mnist --backend host --json`); the
screenshot (saved to SCREENSHOT) is not blank. Prints one JSON summary line.

usage: browser_page_test.py WWW_DIR NATIVE_JSON SCREENSHOT
Exit status: 0 pass, 1 a check failed or the page reported an error.
"""

import base64
import functools
import http.server
import json
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib

LABELS = [7, 2, 1]
TOLERANCE = 1e-3
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--enable-unsafe-webgpu",
    "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--window-size=1200,1400",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def webdriver(port, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["value"]


def png_is_blank(png):
    """True when every pixel row of the PNG is one colour, i.e. nothing was drawn."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        chunk = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            if depth != 8:
                raise ValueError(f"bit depth {depth}")
            channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    colours = set()
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 8 == 0:
            colours.update(bytes(line[i:i + channels]) for i in range(0, stride, channels * 4))
        prev = line
    return len(colours) < 3


def main():
    www, native_json, screenshot = sys.argv[1:4]
    native = json.load(open(native_json))
    native_logits = [img["logits"] for img in native["images"]]

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=www)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/index.html"

    port = free_port()
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    failures = []
    summary = {}
    try:
        for _ in range(100):
            try:
                webdriver(port, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        profile = tempfile.mkdtemp(prefix="tensormem-page-")
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": "/usr/bin/chromium", "args": CHROMIUM_ARGS + [f"--user-data-dir={profile}"]}}}}
        session = webdriver(port, "POST", "/session", caps)["sessionId"]
        start = time.time()
        webdriver(port, "POST", f"/session/{session}/url", {"url": url})
        result = error = None
        while time.time() - start < 180 and result is None and error is None:
            result, error = webdriver(port, "POST", f"/session/{session}/execute/sync", {
                "script": "return [window.tensormemResult ? JSON.stringify(window.tensormemResult)"
                          " : null, window.tensormemError || null];", "args": []})
            time.sleep(0.2)
        page_secs = time.time() - start
        png = base64.b64decode(webdriver(port, "GET", f"/session/{session}/screenshot"))
        open(screenshot, "wb").write(png)
        webdriver(port, "DELETE", f"/session/{session}")
        if error is not None:
            failures.append(f"the page reported an error: {error}")
        elif result is None:
            failures.append("the page did not finish within 180 s")
        else:
            r = json.loads(result)
            if r["predictions"] != LABELS:
                failures.append(f"predictions {r['predictions']} != labels {LABELS}")
            worst = max(abs(a - b) for got, want in zip(r["logits"], native_logits)
                        for a, b in zip(got, want))
            if len(r["logits"]) != len(native_logits) or worst > TOLERANCE:
                failures.append(f"logits differ from the native host run by {worst:.2e} "
                                f"(> {TOLERANCE})")
            summary = {"device": r["device"], "predictions": r["predictions"],
                       "max_logit_diff_vs_native_host": worst,
                       "first_run_ms": round(r["first_run_ms"], 2),
                       "per_inference_ms": round(r["per_inference_ms"], 3),
                       "activation_planned_bytes": r["memory"]["activation_planned_bytes"],
                       "page_load_to_result_s": round(page_secs, 2)}
        if png_is_blank(png):
            failures.append(f"the screenshot {screenshot} is blank")
        summary["screenshot_bytes"] = len(png)
    finally:
        driver.terminate()
        driver.wait(10)
        server.shutdown()
    summary["failures"] = failures
    print("page test: " + json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
