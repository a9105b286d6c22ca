// What the sample pages (index.html, minilm.html, generate.html) share: fetching the files they
// are served, filling their report tables, and reporting a failure both on the page and to
// scripts/browser_page_test.py. Their common styles are in page.css.

/** A file the page is not served (HTTP 404); the pages whose model is optional skip on it. */
export class Missing extends Error {}

/** The bytes at `url`: `Missing` on a 404, an `Error` naming the status on any other failure. */
export async function bytes(url) {
  const r = await fetch(url);
  if (r.status === 404) throw new Missing(`${url}: HTTP 404`);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

/** The files of a model directory, in this order. */
const MODEL_FILES = ['model.safetensors', 'config.json', 'tokenizer.json'];

/**
 * `dir`'s model files (`MODEL_FILES`) as `{ files, ms, bytes }`: their bytes, the milliseconds
 * fetching them took and their total size; null when one is not served (404).
 */
export async function fetchModel(dir) {
  const start = performance.now();
  let files;
  try {
    files = await Promise.all(MODEL_FILES.map(f => bytes(`${dir}/${f}`)));
  } catch (e) {
    if (e instanceof Missing) return null;
    throw e;
  }
  return { files, ms: performance.now() - start, bytes: files.reduce((n, f) => n + f.length, 0) };
}

/** Appends a row of `cells` (each shown as text) to `table`. */
export function row(table, cells) {
  const tr = table.insertRow();
  for (const c of cells) tr.insertCell().textContent = c;
}

/** `n` bytes in KiB, one decimal. */
export function kib(n) { return `${(n / 1024).toFixed(1)} KiB`; }

/** The report rows of a model's memory plan `m` (the `memory` of run_mnist and run_minilm). */
export function planRows(m) {
  return [
    [`activations, planned (${m.plan_algorithm}, ${m.planned_buffers} buffers)`, kib(m.activation_planned_bytes)],
    ['activations, lower bound', kib(m.activation_lower_bound_bytes)],
    ['activations, greedy-by-size', kib(m.activation_greedy_bytes)],
    ['activations, no reuse', kib(m.activation_no_reuse_bytes)],
    ['device blocks allocated', m.device_blocks_allocated],
    ['staging blocks allocated', m.staging_blocks_allocated],
  ];
}

/** Shows why the page skipped its work and hands the reason to the page test. */
export function skip(reason) {
  const status = document.getElementById('status');
  status.textContent = reason;
  status.className = 'skipped';
  window.tensormemSkipped = reason;
}

/**
 * Awaits the page's `main`. A failure is shown in the `#status` element and handed to the page
 * test as `window.tensormemError` and a `RESULT ERROR` console line.
 */
export async function run(main) {
  try {
    await main();
  } catch (e) {
    const msg = e && e.message ? e.message : String(e);
    const status = document.getElementById('status');
    status.textContent = `error: ${msg}`;
    status.className = 'error';
    window.tensormemError = msg;
    console.log('RESULT ERROR ' + msg);
  }
}
