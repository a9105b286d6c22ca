#!/usr/bin/env python3
"""Headless-Chromium tests of the sample pages (examples/web), standard library only.

Serves WWW_DIR on 127.0.0.1 (a secure context, as WebGPU requires), drives Chromium through
chromedriver's W3C WebDriver HTTP API, waits for the page's window.tensormemResult (or
tensormemError, or tensormemSkipped), saves a screenshot (SCREENSHOT) and checks it is not blank,
then checks the result against the native run of the same sample (NATIVE_JSON, its --json output):

  mnist   index.html: the three bundled digits are predicted as their labels (7, 2, 1) and every
          logit is within 1e-3 of the native host backend's.
  minilm  minilm.html: the same sentences, the same token ids, and every embedding value and
          cosine within 1e-3 of the native host backend's. NATIVE_WGPU_JSON (optional) adds the
          native wgpu times to the summary. A page that reports the model as not served is a
          skip (exit 0, "skipped" in the summary), not a failure.
  generate  generate.html: every prompt's generated token ids equal the native host run's (greedy,
          the same checkpoint and prompts, served as ./llama/ and ./generate.json), every token
          was streamed to the page, and again with the device's largest buffer lowered to
          MAX_BUFFER bytes (generate.html?max_buffer=...), where the KV cache must span several
          segments none larger than it. NATIVE_WGPU_JSON (optional) adds native wgpu's decode
          speed beside the page's and the host's.

Prints one JSON summary line (sizes and times included).

usage: browser_page_test.py mnist WWW_DIR NATIVE_JSON SCREENSHOT
       browser_page_test.py minilm WWW_DIR NATIVE_JSON SCREENSHOT [NATIVE_WGPU_JSON]
       browser_page_test.py generate WWW_DIR NATIVE_JSON SCREENSHOT [NATIVE_WGPU_JSON]
Exit status: 0 pass (or MiniLM skipped), 1 a check failed or the page reported an error,
2 usage error.
"""

import base64
import functools
import http.server
import json
import shutil
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


def open_page(www, page, screenshot, limit_s):
    """Loads `page` from `www` in headless Chromium until it reports; saves the screenshot.

    Returns (result dict or None, skipped message or None, seconds, screenshot bytes, failures).
    """
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=www)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{page}"

    port = free_port()
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    failures = []
    # Chromium's profile (about 95 MB) lives only as long as the page test.
    profile = tempfile.mkdtemp(prefix="tensormem-page-")
    try:
        for _ in range(100):
            try:
                webdriver(port, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": "/usr/bin/chromium", "args": CHROMIUM_ARGS + [f"--user-data-dir={profile}"]}}}}
        session = webdriver(port, "POST", "/session", caps)["sessionId"]
        start = time.time()
        webdriver(port, "POST", f"/session/{session}/url", {"url": url})
        result = error = skipped = None
        while time.time() - start < limit_s and result is None and error is None \
                and skipped is None:
            result, error, skipped = webdriver(port, "POST", f"/session/{session}/execute/sync", {
                "script": "return [window.tensormemResult ? JSON.stringify(window.tensormemResult)"
                          " : null, window.tensormemError || null,"
                          " window.tensormemSkipped || null];", "args": []})
            time.sleep(0.2)
        page_secs = time.time() - start
        png = base64.b64decode(webdriver(port, "GET", f"/session/{session}/screenshot"))
        open(screenshot, "wb").write(png)
        webdriver(port, "DELETE", f"/session/{session}")
        if error is not None:
            failures.append(f"the page reported an error: {error}")
        elif result is None and skipped is None:
            failures.append(f"the page did not finish within {limit_s} s")
        if png_is_blank(png):
            failures.append(f"the screenshot {screenshot} is blank")
    finally:
        driver.terminate()
        driver.wait(10)
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    return (json.loads(result) if result else None), skipped, page_secs, len(png), failures


def check_mnist(r, native):
    """The MNIST page's checks; returns (failures, summary)."""
    failures = []
    native_logits = [img["logits"] for img in native["images"]]
    if r["predictions"] != LABELS:
        failures.append(f"predictions {r['predictions']} != labels {LABELS}")
    worst = max(abs(a - b) for got, want in zip(r["logits"], native_logits)
                for a, b in zip(got, want))
    if len(r["logits"]) != len(native_logits) or worst > TOLERANCE:
        failures.append(f"logits differ from the native host run by {worst:.2e} (> {TOLERANCE})")
    return failures, {"device": r["device"], "predictions": r["predictions"],
                      "max_logit_diff_vs_native_host": worst,
                      "first_run_ms": round(r["first_run_ms"], 2),
                      "per_inference_ms": round(r["per_inference_ms"], 3),
                      "activation_planned_bytes": r["memory"]["activation_planned_bytes"]}


def check_minilm(r, native, native_wgpu):
    """The MiniLM page's checks against the native host run; returns (failures, summary)."""
    failures = []
    got, want = r["sentences"], native["sentences"]
    if [s["sentence"] for s in got] != [s["sentence"] for s in want]:
        failures.append("the page embedded other sentences than the native run")
        return failures, {}
    for i, (g, w) in enumerate(zip(got, want)):
        if g["token_ids"] != w["token_ids"]:
            failures.append(f"sentence {i}: token ids {g['token_ids']} != native {w['token_ids']}")
    worst = max(abs(a - b) for g, w in zip(got, want)
                for a, b in zip(g["embedding"], w["embedding"]))
    if any(len(g["embedding"]) != len(w["embedding"]) for g, w in zip(got, want)) \
            or worst > TOLERANCE:
        failures.append(f"embeddings differ from the native host run by {worst:.2e} "
                        f"(> {TOLERANCE})")
    worst_cos = max(abs(a - b) for g, w in zip(r["cosine"], native["cosine"])
                    for a, b in zip(g, w))
    if worst_cos > TOLERANCE:
        failures.append(f"cosines differ from the native host run by {worst_cos:.2e}")

    def native_times(n):
        rep = n["report"]
        return {"device": rep["device"], "load_ms": round(n["load_ms"], 1),
                "first_run_ms": round(n["first_run_ms"], 1),
                "per_inference_ms": round(rep["time_per_inference_ms"], 2), "runs": rep["runs"]}

    summary = {"device": r["device"], "shape": f"batch {r['batch']} x seq {r['seq']}",
               "max_embedding_diff_vs_native_host": worst, "max_cosine_diff": worst_cos,
               "weight_file_bytes": r["weight_file_bytes"], "fetched_bytes": r["fetched_bytes"],
               "fetch_ms": round(r["fetch_ms"], 1), "load_ms": round(r["load_ms"], 1),
               "first_run_ms": round(r["first_run_ms"], 1),
               "per_inference_ms": round(r["per_inference_ms"], 2), "runs": r["timed_runs"],
               "activation_planned_bytes": r["memory"]["activation_planned_bytes"],
               "native_host": native_times(native)}
    if native_wgpu is not None:
        summary["native_wgpu"] = native_times(native_wgpu)
    return failures, summary


MAX_BUFFER = 512 << 10


def check_generate(r, native, native_wgpu, lowered):
    """The generation page's checks (its default run `r`, and the run with MAX_BUFFER as the
    largest buffer) against the native host run; returns (failures, summary)."""
    failures = []
    for name, run in (("page", r), (f"page at max_buffer {MAX_BUFFER}", lowered)):
        if run is None:
            failures.append(f"{name}: no result")
            continue
        got, want = run["outputs"], native["outputs"]
        if [o["prompt"] for o in got] != [o["prompt"] for o in want]:
            failures.append(f"{name}: other prompts than the native run")
            continue
        for i, (g, w) in enumerate(zip(got, want)):
            if g["prompt_ids"] != w["prompt_ids"]:
                failures.append(f"{name}: prompt {i} ids {g['prompt_ids']} != {w['prompt_ids']}")
            if g["tokens"] != w["tokens"]:
                at = next((k for k, (a, b) in enumerate(zip(g["tokens"], w["tokens"])) if a != b),
                          min(len(g["tokens"]), len(w["tokens"])))
                failures.append(f"{name}: prompt {i} tokens differ from position {at}")
        if run.get("streamed_tokens") != sum(len(o["tokens"]) for o in got):
            failures.append(f"{name}: {run.get('streamed_tokens')} tokens streamed, "
                            f"{sum(len(o['tokens']) for o in got)} generated")
    if lowered is not None:
        kv = lowered["kv"]
        if kv["segments"] < 2 or kv["largest_segment_bytes"] > MAX_BUFFER:
            failures.append(f"max_buffer {MAX_BUFFER}: the KV cache held {kv['segments']} "
                            f"segments, the largest {kv['largest_segment_bytes']} bytes")

    def decode_speed(t):
        return round(t["decode_tokens_per_s"], 1)

    summary = {"device": r["device"] if r else None,
               "prompts": len(native["outputs"]),
               "tokens": sum(len(o["tokens"]) for o in native["outputs"]),
               "page_decode_tokens_per_s": decode_speed(r["timings"]) if r else None,
               "page_prefill_tokens_per_s": round(r["timings"]["prefill_tokens_per_s"], 1)
               if r else None,
               "native_host_decode_tokens_per_s": decode_speed(native["timings"]),
               "lowered_kv_segments": lowered["kv"]["segments"] if lowered else None,
               "load_ms": round(r["load_ms"], 1) if r else None}
    if native_wgpu is not None:
        summary["native_wgpu_decode_tokens_per_s"] = decode_speed(native_wgpu["timings"])
    return failures, summary


def main():
    if len(sys.argv) not in (5, 6) or sys.argv[1] not in ("mnist", "minilm", "generate") \
            or (sys.argv[1] == "mnist" and len(sys.argv) != 5):
        print(__doc__, file=sys.stderr)
        return 2
    sample, www, native_json, screenshot = sys.argv[1:5]
    native = json.load(open(native_json))
    native_wgpu = json.load(open(sys.argv[5])) if len(sys.argv) == 6 else None
    page, limit_s = {"mnist": ("index.html", 180), "minilm": ("minilm.html", 600),
                     "generate": ("generate.html", 600)}[sample]
    result, skipped, page_secs, png_bytes, failures = open_page(www, page, screenshot, limit_s)
    summary = {}
    if sample == "generate" and result is not None:
        lowered, _, _, _, more = open_page(www, f"{page}?max_buffer={MAX_BUFFER}",
                                           screenshot.replace(".png", "-lowered.png"), limit_s)
        failures += more
        check = check_generate(result, native, native_wgpu, lowered)
        failures += check[0]
        summary = check[1]
    elif result is not None:
        check = check_mnist(result, native) if sample == "mnist" else \
            check_minilm(result, native, native_wgpu)
        failures += check[0]
        summary = check[1]
    if skipped is not None:
        summary["skipped"] = skipped
    summary["page_load_to_result_s"] = round(page_secs, 2)
    summary["screenshot_bytes"] = png_bytes
    summary["failures"] = failures
    print(f"{sample} page test: " + json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
