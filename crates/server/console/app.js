/*
 * The cardinal console: one page over the public HTTP API of `cardinal serve`.
 *
 * Nothing here is private to the page. Every number it shows comes from a
 * route documented in docs/http.md, so this file doubles as that API's
 * example: `GET /v1/summaries` says what can be asked (each summary's bucket,
 * dimensions and the columns each aggregate prints), `POST /v1/sql?format=json`
 * answers every chart and the SQL box, `GET /v1/overlap` the overlap explorer,
 * and `GET /metrics`, `GET /v1/rejects` and `GET /healthz` the health view.
 *
 * Structure. `api()` is the one way out: it adds the bearer token, asks for
 * one when an answer is 401 (a small form; the token is kept in
 * sessionStorage for the tab), and turns a network failure into the
 * "server not answering" banner, whose retry loop (backoff to
 * RETRY_MAX_S) polls /healthz and reloads the page's data once the server
 * is back. Each view (chart, summaries, overlap, sql, health) has a
 * `load*` function that queries and a part that draws; the nav only shows
 * and hides sections.
 *
 * Charts. A summary's aggregate prints one or more measure columns; a
 * measure `m` is approximate when the summary also prints `m_lower` and
 * `m_upper` (hll, theta, quantile ranks, exact_distinct), and is then drawn
 * as a line with its 95% interval as a shaded uPlot band. Exact measures
 * (count, sum, min, max, avg) are plain lines. Time ranges end at the
 * summary's newest bucket in event time (never the wall clock): "last 7 d"
 * is the buckets starting in [newest + 1 bucket - 7 days, newest + 1 bucket),
 * the start moved back to the newest bucket's when buckets are coarser
 * (a month). A split
 * first asks for the top N values of the dimension over the range,
 *   SELECT dim, m FROM s WHERE <range and filter> GROUP BY 1 ORDER BY 2 DESC LIMIT N
 * then for their series,
 *   SELECT bucket, dim, m, m_lower, m_upper FROM s WHERE ... AND dim IN (...)
 *   GROUP BY 1, 2 ORDER BY 1, 2
 * and without a split one query, GROUP BY 1 ORDER BY 1.
 *
 * Data contract (what the headless test reads; keep it stable):
 *   window.cardinalConsole = {
 *     summaries: the last GET /v1/summaries JSON, as returned,
 *     chart: { summary, aggregate (the measure column, e.g. "revenue_p99"),
 *              split (dimension name or null), top (N), where (text),
 *              from, to (RFC 3339 SQL literals, null for "all"),
 *              sql: [the SQL strings run, in order],
 *              missing: the Cardinal-Missing-Node of a partial answer, or null,
 *              series: [{ label, approximate, x: [epoch seconds],
 *                         value: [...], lower: [...] | null, upper: [...] | null }] },
 *     plot: the uPlot instance of the chart (plot.data[0] is x, then per
 *           series value, and for an approximate one lower and upper),
 *     overlap: the last GET /v1/overlap JSON,
 *     sqlResult: { sql, status, rows (parsed JSON) | null, error (text) | null },
 *     health: { status, rejects, metrics (parsed samples) },
 *     tokenAsked: how many times the token form was shown,
 *     ready: a counter incremented each time a view finished rendering,
 *   }
 * Every series of one chart shares the x axis (the union of the buckets
 * any series has, ascending); a series without a row in a bucket has null
 * there, in `series` and in `plot.data` alike. Values are the JSON numbers
 * of /v1/sql unchanged.
 */
'use strict';

/** Longest wait between retries while the server does not answer, seconds. */
const RETRY_MAX_S = 8;
/** How often the page checks /healthz while it is visible, ms: how soon a dead server shows. */
const HEARTBEAT_MS = 4000;
/** How often an empty summary's chart looks again for its first events, ms. */
const EMPTY_RETRY_MS = 5000;
/** Rows the SQL box draws as a table; the rest are counted, not drawn. */
const SQL_TABLE_ROWS_MAX = 1000;
/** Seconds between the two /metrics samples that give a first rate. */
const RATE_SAMPLE_S = 1.5;
/** The oldest a previous sample may be to give a rate: older, a rate is an average over too long. */
const RATE_WINDOW_MAX_S = 60;
/** How often the summaries view samples /metrics again for its rates, ms. */
const RATES_EVERY_MS = 5000;
const TOKEN_KEY = 'cardinal-token';
const PALETTE = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#65a30d', '#4b5563', '#ea580c'];
const UNIT_S = { second: 1, minute: 60, hour: 3600, day: 86400, week: 604800, month: 2678400, quarter: 7948800, year: 31622400 };

const $ = (id) => document.getElementById(id);
const cc = window.cardinalConsole = {
  summaries: null, chart: null, plot: null, overlap: null, sqlResult: null,
  health: null, tokenAsked: 0, ready: 0,
};
let view = 'chart';
let down = false;
let lastHeaders = null; // the Cardinal-* headers of the newest /v1/sql answer
let sqlPlot = null;

// ---------------------------------------------------------------- requests

class HttpError extends Error {
  constructor(status, text) {
    super(text);
    this.status = status;
  }
}

let tokenWaiter = null;
function askToken(why) {
  if (!tokenWaiter) {
    cc.tokenAsked++;
    $('token-why').textContent = why;
    $('token-modal').hidden = false;
    $('token-input').value = '';
    $('token-input').focus();
    tokenWaiter = new Promise((resolve) => {
      $('token-form').onsubmit = (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, $('token-input').value.trim());
        $('token-modal').hidden = true;
        tokenWaiter = null;
        resolve();
      };
    });
  }
  return tokenWaiter;
}

/** Fetches `path`; answers the Response when it is 2xx, throws HttpError otherwise. */
async function api(path, init = {}) {
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = Object.assign({}, init.headers, token ? { Authorization: 'Bearer ' + token } : {});
    let res;
    try {
      res = await fetch(path, Object.assign({}, init, { headers, cache: 'no-store' }));
    } catch (e) {
      serverDown();
      throw new HttpError(0, 'server not answering at ' + location.origin);
    }
    if (res.status === 401) {
      await askToken(token ? 'The server refused that token; try again.' : 'The server asks for a token (--token-file).');
      continue;
    }
    if (!res.ok) throw new HttpError(res.status, await errorText(res));
    return res;
  }
}

async function errorText(res) {
  const text = await res.text();
  try {
    const j = JSON.parse(text);
    if (j && typeof j.error === 'string') return j.error;
  } catch (_) { /* not JSON: the text itself */ }
  return text || res.status + ' ' + res.statusText;
}

async function sql(text, partial) {
  const res = await api('/v1/sql?format=json' + (partial ? '&partial=true' : ''), { method: 'POST', body: text, headers: { 'Content-Type': 'text/plain' } });
  lastHeaders = cardinalHeaders(res.headers);
  return res.json();
}

function cardinalHeaders(h) {
  const out = {};
  h.forEach((v, k) => { if (k.startsWith('cardinal-')) out[k] = v; });
  return out;
}

// ------------------------------------------------------- server down banner

function serverDown() {
  if (down) return;
  down = true;
  setStatus('down', 'down');
  retryLoop(1);
}

function retryLoop(delay) {
  let left = delay;
  const tick = async () => {
    if (left > 0) {
      showBanner(`server not answering at ${location.origin}, retrying in ${left} s`);
      left--;
      setTimeout(tick, 1000);
      return;
    }
    showBanner(`server not answering at ${location.origin}, retrying now`);
    try {
      await fetch('/healthz', { cache: 'no-store' });
    } catch (_) {
      retryLoop(Math.min(delay * 2, RETRY_MAX_S));
      return;
    }
    down = false;
    $('banner').hidden = true;
    reloadAll();
  };
  tick();
}

function showBanner(text) {
  $('banner').textContent = text;
  $('banner').hidden = false;
}

function setStatus(cls, text) {
  const s = $('status');
  s.className = 'status ' + cls;
  s.textContent = text;
}

async function heartbeat() {
  if (down || document.visibilityState !== 'visible') return;
  try {
    const res = await fetch('/healthz', { cache: 'no-store' });
    setStatus(res.ok ? 'ok' : 'bad', res.ok ? 'healthy' : 'unhealthy ' + res.status);
  } catch (_) {
    serverDown();
  }
}

async function reloadAll() {
  await heartbeat();
  try {
    await loadSummaries();
    await showView(view, true);
  } catch (e) {
    console.warn('reload failed:', e.message);
  }
}

// ---------------------------------------------------------------- helpers

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else if (k.startsWith('data-')) e.setAttribute(k, v); else e[k] = v;
  }
  for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
  return e;
}

function fmt(v) {
  if (v == null) return '–';
  if (typeof v !== 'number') return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e15)) return v.toExponential(3);
  if (a < 10) return String(+v.toPrecision(4));
  return Math.round(v).toLocaleString('en-US');
}

function bytes(n) {
  if (n == null) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}

function duration(s) {
  if (s == null || !isFinite(s)) return '–';
  const sign = s < 0 ? '-' : '';
  s = Math.abs(s);
  if (s < 1) return sign + (s * 1000).toFixed(1) + ' ms';
  if (s < 120) return sign + s.toFixed(1) + ' s';
  if (s < 7200) return sign + (s / 60).toFixed(1) + ' min';
  if (s < 172800) return sign + (s / 3600).toFixed(1) + ' h';
  return sign + (s / 86400).toFixed(1) + ' d';
}

const iso = (sec) => new Date(sec * 1000).toISOString().replace('.000Z', 'Z');
const quote = (s) => "'" + String(s).replace(/'/g, "''") + "'";
const RESERVED = new Set(['all', 'and', 'as', 'between', 'by', 'from', 'group', 'having', 'in', 'is', 'limit', 'not', 'null', 'offset', 'or', 'order', 'select', 'user', 'where']);
/** A name as SQL reads it: quoted unless plain (names may hold `-`, docs/sql.md). */
const ident = (n) => (/^[a-z_][a-z0-9_]*$/.test(n) && !RESERVED.has(n) ? n : '"' + n.replace(/"/g, '""') + '"');

function literal(value, type) {
  if (value === null) return 'NULL';
  if (type === 'bigint' || type === 'double precision') return String(value);
  if (type === 'boolean') return value ? 'TRUE' : 'FALSE';
  return quote(value);
}

function table(node, columns, rows) {
  node.replaceChildren(
    el('thead', null, el('tr', null, ...columns.map((c) => el('th', null, c)))),
    el('tbody', null, ...rows.map((r) => el('tr', null, ...r.map((c) => el('td', null, c))))),
  );
}

/** A summary's chartable measures: numeric columns that are not another's interval. */
function measures(s) {
  const out = [];
  for (const a of s.aggregates) {
    const names = new Set(a.columns.map((c) => c.name));
    for (const c of a.columns) {
      if (c.type !== 'bigint' && c.type !== 'double precision') continue;
      if (/_(lower|upper)$/.test(c.name) && names.has(c.name.replace(/_(lower|upper)$/, ''))) continue;
      if (c.name === a.name + '_rank_error') continue;
      const approximate = names.has(c.name + '_lower') && names.has(c.name + '_upper');
      out.push({ name: c.name, aggregate: a.name, kind: a.kind, approximate });
    }
  }
  return out;
}

const summaryByName = (name) => cc.summaries.summaries.find((s) => s.name === name);

// ------------------------------------------------------------- /metrics

function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[2]) for (const p of m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[p[1]] = p[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

const metric = (ms, name, labels = {}) => {
  const m = ms.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
  return m ? m.value : null;
};

let samples = []; // [{t, metrics}], the two newest /metrics samples
async function sampleMetrics() {
  const text = await (await api('/metrics')).text();
  samples = [samples[samples.length - 1], { t: performance.now() / 1000, metrics: parseMetrics(text) }].filter(Boolean);
  return samples[samples.length - 1].metrics;
}

/** A fresh sample and one RATE_SAMPLE_S before it, unless the one before is recent enough. */
async function sampleTwice() {
  const metrics = await sampleMetrics();
  if (samples.length > 1 && samples[1].t - samples[0].t < RATE_WINDOW_MAX_S) return metrics;
  await new Promise((r) => setTimeout(r, RATE_SAMPLE_S * 1000));
  return sampleMetrics();
}

/** Per stream: accepted total, rate (events/s over the last two samples), rejected, watermark, lag. */
function streamStats() {
  const now = samples[samples.length - 1];
  const prev = samples.length > 1 ? samples[0] : null;
  const names = now.metrics.filter((m) => m.name === 'cardinal_events_accepted_total').map((m) => m.labels.stream);
  return names.map((stream) => {
    const acc = metric(now.metrics, 'cardinal_events_accepted_total', { stream });
    const before = prev && metric(prev.metrics, 'cardinal_events_accepted_total', { stream });
    const rate = prev && before != null ? (acc - before) / (now.t - prev.t) : null;
    const rejected = now.metrics.filter((m) => m.name === 'cardinal_events_rejected_total' && m.labels.stream === stream)
      .reduce((a, m) => a + m.value, 0);
    const wm = metric(now.metrics, 'cardinal_stream_watermark_seconds', { stream });
    return { stream, accepted: acc, rate, rejected, watermark: wm, lag: wm ? Date.now() / 1000 - wm : null };
  });
}

function streamRows() {
  return streamStats().map((s) => [s.stream, fmt(s.accepted), s.rate == null ? '…' : fmt(s.rate) + ' /s', fmt(s.rejected),
    s.watermark ? iso(s.watermark) : '–', lagText(s.lag)]);
}

/** Event time behind the wall clock; events stamped in the future are "ahead". */
function lagText(lag) {
  if (lag == null || !isFinite(lag)) return '–';
  return lag < 0 ? duration(-lag) + ' ahead of the clock' : duration(lag);
}
const STREAM_COLUMNS = ['stream', 'accepted since start', 'ingest rate', 'rejected', 'watermark (event time)', 'lag behind the clock'];

// ------------------------------------------------------------- summaries

async function loadSummaries() {
  cc.summaries = await (await api('/v1/summaries')).json();
  fillChartControls();
  fillOverlapControls();
}

async function renderSummaries() {
  const rows = cc.summaries.summaries.map((s) => {
    const tr = el('tr', { 'data-summary': s.name },
      el('td', { class: 'name' }, s.name), el('td', null, s.stream),
      el('td', null, s.bucket ? `${s.bucket.column}, per ${s.bucket.unit}` : '–'),
      el('td', null, s.dimensions.map((d) => d.name).join(', ') || '–'),
      el('td', null, ...s.aggregates.map((a) => el('div', null, el('b', null, a.name), ' ', el('span', { class: 'kind' }, a.kind)))),
      el('td', { class: 'num', 'data-groups': String(s.groups) }, fmt(s.groups)),
      el('td', { class: 'num nowrap' }, bytes(s.bytes)),
      el('td', { class: 'nowrap' }, s.bucket ? s.newest_bucket : '–'));
    tr.onclick = () => { if (s.bucket) { $('c-summary').value = s.name; onSummaryChange(); showView('chart'); } };
    return tr;
  });
  $('summaries-table').replaceChildren(
    el('thead', null, el('tr', null, ...['summary', 'stream', 'bucket', 'dimensions', 'aggregates', 'groups', 'bytes', 'newest bucket'].map((c) => el('th', null, c)))),
    el('tbody', null, ...rows));
  await sampleTwice();
  table($('streams-table'), STREAM_COLUMNS, streamRows());
}

// ------------------------------------------------------------------ chart

function chartable() {
  return cc.summaries.summaries.filter((s) => s.bucket && measures(s).length);
}

function fillChartControls() {
  const sel = $('c-summary');
  const keep = sel.value;
  const list = chartable();
  sel.replaceChildren(...list.map((s) => el('option', { value: s.name }, s.name)));
  if (list.some((s) => s.name === keep)) sel.value = keep;
  else {
    // The first view: the first summary with a bucket and an approximate measure.
    const first = list.find((s) => measures(s).some((m) => m.approximate)) || list[0];
    if (first) sel.value = first.name;
  }
  if (sel.value !== keep) onSummaryChange(true);
}

function onSummaryChange(quiet) {
  const s = summaryByName($('c-summary').value);
  if (!s) return;
  const ms = measures(s);
  $('c-measure').replaceChildren(...ms.map((m) => el('option', { value: m.name }, m.name + (m.approximate ? ' ±' : ''))));
  const firstApprox = ms.find((m) => m.approximate);
  if (firstApprox) $('c-measure').value = firstApprox.name;
  $('c-split').replaceChildren(el('option', { value: '' }, '(none)'), ...s.dimensions.map((d) => el('option', { value: d.name }, d.name)));
  $('c-top').disabled = true;
  const d = s.dimensions[0];
  $('c-where').placeholder = d ? `${d.name} ${d.type === 'text' ? "IN ('a', 'b')" : '> 0'}` : 'no dimensions to filter on';
  if (!quiet) loadChart();
}

/** The range's bounds as SQL time literals (RFC 3339, or as typed), null for every bucket. */
function chartRange(s) {
  const r = $('c-range').value;
  if (r === 'all' || (r !== 'custom' && !s.newest_bucket)) return null; // no bucket yet: everything
  if (r === 'custom') return { from: $('c-from').value.trim() || null, to: $('c-to').value.trim() || null };
  const m = String(s.bucket.unit).match(/^(\d+)?\s*([a-z]+?)s?$/i);
  const step = m ? (Number(m[1] || 1) * (UNIT_S[m[2].toLowerCase()] || 86400)) : 86400;
  const newest = Date.parse(s.newest_bucket) / 1000;
  // At least the newest bucket, however coarse the buckets are.
  return { from: iso(Math.min(newest + step - Number(r) * 86400, newest)), to: iso(newest + step) };
}

let chartSeq = 0;
async function loadChart() {
  const s = summaryByName($('c-summary').value);
  if (!s) return;
  const seq = ++chartSeq;
  const m = measures(s).find((x) => x.name === $('c-measure').value) || measures(s)[0];
  const split = $('c-split').value || null;
  const top = Math.max(1, Math.min(20, Number($('c-top').value) || 5));
  const where = $('c-where').value.trim();
  const range = chartRange(s);
  const b = s.bucket.column;
  const [qb, qs, qm, qd] = [ident(b), ident(s.name), ident(m.name), split && ident(split)];
  const conds = [];
  if (range && range.from) conds.push(`${qb} >= ${quote(range.from)}`);
  if (range && range.to) conds.push(`${qb} < ${quote(range.to)}`);
  if (where) conds.push(`(${where})`);
  const cols = m.approximate ? [m.name, m.name + '_lower', m.name + '_upper'].map(ident).join(', ') : qm;
  const run = [];
  // In a cluster, "those that answer" asks with partial=true: an answer
  // from the nodes that answered, saying which did not.
  const partial = $('c-partial').value === '1';
  const ask = async (q) => { run.push(q); return sql(q, partial); };
  const whereSql = (extra) => { const c = conds.concat(extra || []); return c.length ? ' WHERE ' + c.join(' AND ') : ''; };
  $('chart-error').hidden = true;
  try {
    let rows, labels = null;
    if (split) {
      const dim = s.dimensions.find((d) => d.name === split);
      const topRows = await ask(`SELECT ${qd}, ${qm} FROM ${qs}${whereSql()} GROUP BY 1 ORDER BY 2 DESC LIMIT ${top}`);
      labels = topRows.map((r) => r[split]);
      if (labels.length) {
        const vals = labels.filter((v) => v !== null).map((v) => literal(v, dim.type));
        const parts = [];
        if (vals.length) parts.push(`${qd} IN (${vals.join(', ')})`);
        if (labels.includes(null)) parts.push(`${qd} IS NULL`);
        rows = await ask(`SELECT ${qb}, ${qd}, ${cols} FROM ${qs}${whereSql(parts.length > 1 ? `(${parts.join(' OR ')})` : parts)} GROUP BY 1, 2 ORDER BY 1, 2`);
      } else rows = [];
    } else {
      rows = await ask(`SELECT ${qb}, ${cols} FROM ${qs}${whereSql()} GROUP BY 1 ORDER BY 1`);
    }
    if (seq !== chartSeq) return;
    const xs = [...new Set(rows.map((r) => Date.parse(r[b]) / 1000))].sort((p, q) => p - q);
    const at = new Map(xs.map((x, i) => [x, i]));
    const keys = split ? labels : [null];
    const series = keys.map((k) => ({
      label: split ? (k === null ? '(null)' : String(k)) : m.name,
      approximate: m.approximate,
      x: xs,
      value: xs.map(() => null),
      lower: m.approximate ? xs.map(() => null) : null,
      upper: m.approximate ? xs.map(() => null) : null,
    }));
    for (const r of rows) {
      const si = split ? keys.indexOf(r[split]) : 0;
      if (si < 0) continue;
      const i = at.get(Date.parse(r[b]) / 1000);
      series[si].value[i] = r[m.name];
      if (m.approximate) { series[si].lower[i] = r[m.name + '_lower']; series[si].upper[i] = r[m.name + '_upper']; }
    }
    cc.chart = { summary: s.name, aggregate: m.name, split, top, where, from: range ? range.from : null, to: range ? range.to : null, sql: run, series };
    const day = (t) => (t ? t.replace(/T00:00:00Z$/, '') : '…');
    const missing = partial && lastHeaders && lastHeaders['cardinal-missing-node'];
    cc.chart.missing = missing || null;
    $('chart-title').textContent = `${m.name} of ${s.name}${split ? ', top ' + top + ' by ' + split : ''}` +
      (range ? `, from ${day(range.from)} to ${day(range.to)} (excluded)` : ', all buckets') +
      (missing ? `; partial: without ${missing}` : '');
    $('chart-sql').textContent = run.join(';\n\n') + ';';
    drawChart(cc.chart, xs);
    showEmpty(s, rows.length === 0, where);
    cc.ready++;
  } catch (e) {
    if (seq !== chartSeq) return;
    $('chart-error').textContent = e.message;
    $('chart-error').hidden = false;
  }
}

/**
 * What an empty chart says: a summary with no events yet names its stream
 * and how to feed it, and the page looks again every EMPTY_RETRY_MS (the
 * range needs the newest bucket, so the summaries are read again too);
 * an empty range or filter says so.
 */
let emptyTimer = null;
function showEmpty(s, empty, where) {
  clearTimeout(emptyTimer);
  $('chart-empty').hidden = !empty;
  if (!empty) return;
  const fed = s.newest_bucket && !s.newest_bucket.startsWith('1970-');
  $('chart-empty').textContent = fed
    ? `No rows of ${s.name} in this range${where ? ' under this filter' : ''}: pick a wider range or another filter.`
    : `${s.name} holds no events yet. Send some to stream ${s.stream} (POST /v1/streams/${s.stream}, ` +
      `or cardinal send FILE --to HOST:PORT --stream ${s.stream}); this page looks again every ${EMPTY_RETRY_MS / 1000} s.`;
  if (fed) return;
  const again = () => {
    if (view === 'chart' && document.visibilityState === 'visible' && !down) reloadAll();
    else emptyTimer = setTimeout(again, EMPTY_RETRY_MS);
  };
  emptyTimer = setTimeout(again, EMPTY_RETRY_MS);
}

function plotOpts(width, height, series, bands) {
  return {
    width, height, series, bands,
    legend: { show: false },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true } },
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
    axes: [{ stroke: '#475569', grid: { stroke: '#e2e8f0' }, values: timeTicks },
      { stroke: '#475569', grid: { stroke: '#e2e8f0' }, size: 70, values: (u, vs) => vs.map(fmt) }],
  };
}

/** Tick labels in UTC: dates for ticks a day or more apart, else dates and times. */
function timeTicks(u, splits, axis, space, incr) {
  return splits.map((v) => {
    const t = new Date(v * 1000).toISOString();
    return incr >= 28 * 86400 ? t.slice(0, 7) : incr >= 86400 ? t.slice(5, 10) : t.slice(5, 10) + ' ' + t.slice(11, 16);
  });
}

function drawChart(chart, xs) {
  const data = [xs];
  const useries = [{ label: 'time' }];
  const bands = [];
  chart.series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    const points = { show: xs.length <= 62, size: 5 };
    data.push(s.value);
    useries.push({ label: s.label, stroke: color, width: 2, points });
    if (s.approximate) {
      data.push(s.lower, s.upper);
      const lo = useries.push({ label: s.label + ' lower', stroke: color + '66', width: 1, points: { show: false } }) - 1;
      const hi = useries.push({ label: s.label + ' upper', stroke: color + '66', width: 1, points: { show: false } }) - 1;
      bands.push({ series: [hi, lo], fill: color + '24' });
    }
  });
  if (cc.plot) cc.plot.destroy();
  const wrap = $('plot');
  const opts = plotOpts(Math.max(300, wrap.parentNode.clientWidth - 2), 420, useries, bands);
  opts.hooks = { setCursor: [(u) => legend(chart, u.cursor.idx)] };
  cc.plot = new uPlot(opts, data, wrap);
  legend(chart, null);
}

/** The legend under the chart: each series' value and interval at the cursor, else at its newest point. */
function legend(chart, idx) {
  const xs = chart.series.length ? chart.series[0].x : [];
  const at = idx != null ? xs[idx] : xs[xs.length - 1];
  const items = [el('span', { class: 'when' }, at == null ? '' : (idx == null ? 'newest, ' : '') + iso(at).replace('T00:00:00Z', ''))];
  chart.series.forEach((s, i) => {
    let j = idx;
    if (j == null) for (j = s.value.length - 1; j > 0 && s.value[j] == null; j--);
    const v = j == null || j < 0 ? null : s.value[j];
    const interval = s.approximate && v != null ? ` [${fmt(s.lower[j])}, ${fmt(s.upper[j])}]` : '';
    items.push(el('span', { class: 'item' }, el('i', { style: `background:${PALETTE[i % PALETTE.length]}` }),
      el('b', null, s.label), ' ', fmt(v), el('span', { class: 'kind' }, interval)));
  });
  if (!chart.series.length) items.push(el('span', { class: 'note' }, 'no rows in this range'));
  $('legend').replaceChildren(...items);
}

let refreshTimer = null;
function setRefresh() {
  clearInterval(refreshTimer);
  const s = Number($('c-refresh').value);
  if (s) refreshTimer = setInterval(() => {
    if (document.visibilityState === 'visible' && view === 'chart' && !down) loadChart();
  }, s * 1000);
}

// ---------------------------------------------------------------- overlap

const hllAggregates = (s) => s.aggregates.filter((a) => /^hll/.test(a.kind));

function fillOverlapControls() {
  const sel = $('o-summary');
  const keep = sel.value;
  const list = cc.summaries.summaries.filter((s) => hllAggregates(s).length && s.dimensions.length);
  sel.replaceChildren(...list.map((s) => el('option', { value: s.name }, s.name)));
  if (list.some((s) => s.name === keep)) sel.value = keep;
  else if (list.length) { sel.value = (list.find((s) => !s.bucket) || list[0]).name; onOverlapSummary(); }
}

async function onOverlapSummary() {
  const s = summaryByName($('o-summary').value);
  if (!s) return;
  $('o-aggregate').replaceChildren(...hllAggregates(s).map((a) => el('option', { value: a.name }, a.name)));
  // Prefill A and B with the two largest values of the first dimension,
  // unless they were edited meanwhile.
  const d = s.dimensions[0];
  const agg = hllAggregates(s)[0].name;
  const before = [$('o-a').value, $('o-b').value];
  try {
    const top = await sql(`SELECT ${ident(d.name)}, ${ident(agg)} FROM ${ident(s.name)} GROUP BY 1 ORDER BY 2 DESC LIMIT 2`);
    if (top.length === 2 && $('o-a').value === before[0] && $('o-b').value === before[1]) {
      $('o-a').value = `${ident(d.name)} = ${literal(top[0][d.name], d.type)}`;
      $('o-b').value = `${ident(d.name)} = ${literal(top[1][d.name], d.type)}`;
    }
  } catch (e) { /* leave the conditions empty */ }
}

async function loadOverlap() {
  const p = new URLSearchParams({ summary: $('o-summary').value, aggregate: $('o-aggregate').value, a: $('o-a').value, b: $('o-b').value });
  if ($('o-from').value.trim()) p.set('from', $('o-from').value.trim());
  if ($('o-to').value.trim()) p.set('to', $('o-to').value.trim());
  $('overlap-error').hidden = true;
  try {
    cc.overlap = await (await api('/v1/overlap?' + p)).json();
    renderOverlap(cc.overlap);
    cc.ready++;
  } catch (e) {
    $('overlap-error').textContent = e.message;
    $('overlap-error').hidden = false;
    $('overlap-result').replaceChildren();
  }
}

/** The area of the lens two circles of radii r1, r2 at distance d share. */
function lens(r1, r2, d) {
  if (d >= r1 + r2) return 0;
  if (d <= Math.abs(r1 - r2)) return Math.PI * Math.min(r1, r2) ** 2;
  const a = r1 * r1 * Math.acos((d * d + r1 * r1 - r2 * r2) / (2 * d * r1));
  const b = r2 * r2 * Math.acos((d * d + r2 * r2 - r1 * r1) / (2 * d * r2));
  return a + b - 0.5 * Math.sqrt((-d + r1 + r2) * (d + r1 - r2) * (d - r1 + r2) * (d + r1 + r2));
}

function venn(a, b, shared) {
  const W = 420, H = 240, R = 100;
  const big = Math.max(a, b, 1);
  const r1 = R * Math.sqrt(Math.max(a, 0) / big), r2 = R * Math.sqrt(Math.max(b, 0) / big);
  const scale = (R * R * Math.PI) / big; // area per unit of audience
  const want = Math.min(Math.max(shared, 0) * scale, Math.PI * Math.min(r1, r2) ** 2);
  let lo = Math.abs(r1 - r2), hi = r1 + r2; // lens area falls as d grows: bisect
  for (let i = 0; i < 50; i++) { const mid = (lo + hi) / 2; if (lens(r1, r2, mid) > want) lo = mid; else hi = mid; }
  const d = want > 0 ? (lo + hi) / 2 : r1 + r2 + 8;
  const cx = W / 2 - (d + r2 - r1) / 2;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'venn');
  const circle = (x, r, color) => {
    const c = document.createElementNS(ns, 'circle');
    for (const [k, v] of Object.entries({ cx: x, cy: H / 2, r, fill: color, 'fill-opacity': 0.35, stroke: color, 'stroke-width': 2 })) c.setAttribute(k, v);
    svg.append(c);
  };
  circle(cx, r1, PALETTE[0]);
  circle(cx + d, r2, PALETTE[1]);
  const text = (x, s, anchor) => {
    const t = document.createElementNS(ns, 'text');
    for (const [k, v] of Object.entries({ x, y: H / 2 + 5, 'text-anchor': anchor, 'font-size': 15, 'font-weight': 600 })) t.setAttribute(k, v);
    t.textContent = s;
    svg.append(t);
  };
  text(Math.max(cx - r1 + 4, 10), 'A', 'start');
  text(Math.min(cx + d + r2 - 4, W - 10), 'B', 'end');
  return svg;
}

function renderOverlap(o) {
  const iv = (e) => `${fmt(e.value)}  [${fmt(e.lower)}, ${fmt(e.upper)}]`;
  const shared = o.below_detection_limit
    ? el('div', { class: 'shared below', 'data-below': 'true' }, 'below detection ', el('span', { class: 'kind' }, `(upper bound ${fmt(o.intersection.upper)})`))
    : el('div', { class: 'shared', 'data-intersection': String(o.intersection.value) }, iv(o.intersection));
  const rows = [['A', iv(o.a), o.groups_a], ['B', iv(o.b), o.groups_b], ['A only', iv(o.a_only), ''], ['B only', iv(o.b_only), ''], ['A ∪ B', iv(o.union), '']];
  const t = el('table', { class: 'grid' });
  table(t, ['set', `${o.aggregate}: estimate [95% interval]`, 'groups'], rows);
  $('overlap-result').replaceChildren(
    el('div', { class: 'overlap-head' }, el('div', { class: 'label' }, 'shared audience A ∩ B'), shared),
    el('div', { class: 'overlap-body' }, venn(o.a.value, o.b.value, o.below_detection_limit ? 0 : o.intersection.value), t));
}

// -------------------------------------------------------------------- sql

async function runSql() {
  const text = $('sql-text').value.trim();
  if (!text) return;
  $('sql-error').hidden = true;
  $('sql-plot-wrap').hidden = true;
  try {
    const rows = await sql(text);
    cc.sqlResult = { sql: text, status: 200, rows, error: null };
    renderSqlRows(rows);
  } catch (e) {
    cc.sqlResult = { sql: text, status: e.status, rows: null, error: e.message };
    $('sql-error').textContent = e.message;
    $('sql-error').hidden = false;
    $('sql-table').replaceChildren();
  }
  cc.ready++;
}

function renderSqlRows(rows) {
  const cols = rows.length ? Object.keys(rows[0]) : [];
  const shown = rows.slice(0, SQL_TABLE_ROWS_MAX).map((r) => cols.map((c) => fmtCell(r[c])));
  table($('sql-table'), cols, shown);
  const cap = el('caption', null, `${rows.length} row${rows.length === 1 ? '' : 's'}` + (rows.length > shown.length ? `, first ${shown.length} shown` : ''));
  $('sql-table').prepend(cap);
  // A chart when some column holds timestamps and others numbers.
  const isTime = (v) => typeof v === 'string' && /^\d{4}-\d\d-\d\dT[\d:.]+Z$/.test(v);
  const tcol = cols.find((c) => rows.every((r) => r[c] === null || isTime(r[c])) && rows.some((r) => isTime(r[c])));
  const ncols = cols.filter((c) => rows.every((r) => r[c] === null || typeof r[c] === 'number'));
  if (sqlPlot) { sqlPlot.destroy(); sqlPlot = null; }
  if (!tcol || !ncols.length) return;
  const keyCols = cols.filter((c) => c !== tcol && !ncols.includes(c));
  const xs = [...new Set(rows.map((r) => Date.parse(r[tcol]) / 1000))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const lines = new Map(); // label -> values
  for (const r of rows) {
    const key = keyCols.map((c) => r[c]).join(' / ');
    for (const c of (keyCols.length ? ncols.slice(0, 1) : ncols)) {
      const label = key ? `${key} ${c}` : c;
      if (!lines.has(label)) lines.set(label, xs.map(() => null));
      lines.get(label)[at.get(Date.parse(r[tcol]) / 1000)] = r[c];
    }
  }
  const labels = [...lines.keys()].slice(0, PALETTE.length);
  const series = [{ label: tcol }, ...labels.map((l, i) => ({ label: l, stroke: PALETTE[i], width: 2 }))];
  $('sql-plot-wrap').hidden = false;
  const opts = plotOpts(Math.max(300, $('sql-plot-wrap').clientWidth - 2), 300, series, []);
  opts.legend = { show: true };
  sqlPlot = new uPlot(opts, [xs, ...labels.map((l) => lines.get(l))], $('sql-plot'));
}

const fmtCell = (v) => (v === null ? 'NULL' : String(v));

// ----------------------------------------------------------------- health

async function loadHealth() {
  let status;
  try {
    const res = await fetch('/healthz', { cache: 'no-store' });
    status = { code: res.status, text: (await res.text()).trim() };
  } catch (_) {
    serverDown();
    return;
  }
  const [ms, rejects, nodes] = await Promise.all([sampleTwice(), api('/v1/rejects').then((r) => r.json()),
    api('/v1/nodes').then((r) => r.json())]);
  // The Cardinal-* headers of a cluster answer say which nodes it merged;
  // partial=true answers with the nodes that did, naming the others.
  const s = cc.summaries.summaries.find((x) => measures(x).length);
  if (s) {
    try { await sql(`SELECT ${ident(measures(s)[0].name)} FROM ${ident(s.name)} LIMIT 1`, true); } catch (_) { /* headers stay as they were */ }
  }
  cc.health = { status, rejects, metrics: ms, nodes };
  const m = (n, l) => metric(ms, n, l);
  const fsyncs = m('cardinal_wal_fsync_seconds_count');
  const card = (label, value, attrs) => el('div', Object.assign({ class: 'card' }, attrs || {}), el('div', { class: 'label' }, label), el('div', { class: 'value' }, value));
  const version = ms.find((x) => x.name === 'cardinal_build_info');
  $('health-cards').replaceChildren(
    card('/healthz', `${status.code} ${status.text}`, { class: 'card ' + (status.code === 200 ? 'ok' : 'bad') }),
    card('up', duration(m('cardinal_up_seconds')) + (version ? ` (v${version.labels.version})` : '')),
    card('WAL records', fmt(m('cardinal_wal_records_total'))),
    card('WAL bytes', bytes(m('cardinal_wal_bytes_total'))),
    card('WAL segments', fmt(m('cardinal_wal_segments'))),
    card('WAL syncs', fmt(m('cardinal_wal_syncs_total'))),
    card('mean fsync', fsyncs ? (1000 * m('cardinal_wal_fsync_seconds_sum') / fsyncs).toFixed(2) + ' ms' : '–'),
    card('snapshots', `${fmt(m('cardinal_snapshots_total'))} (${fmt(m('cardinal_snapshot_failures_total'))} failed)`),
    card('last snapshot', `${bytes(m('cardinal_snapshot_bytes'))} in ${duration(m('cardinal_snapshot_duration_seconds'))}`),
    card('recovery', `${duration(m('cardinal_recovery_seconds'))}, ${fmt(m('cardinal_recovery_replayed_records'))} records replayed`),
  );
  table($('health-streams'), STREAM_COLUMNS, streamRows());
  const peers = ms.filter((x) => x.name === 'cardinal_peer_failures_total');
  const h = lastHeaders || {};
  const cluster = [];
  const missing = h['cardinal-missing-node'] || '';
  if (h['cardinal-nodes']) cluster.push(el('p', null, 'Nodes merged in a query just now: ', el('b', { 'data-nodes': h['cardinal-nodes'] }, h['cardinal-nodes'])));
  cluster.push(nodesTable(nodes.nodes, peers, missing));
  for (const [k, v] of Object.entries(h)) if (k !== 'cardinal-nodes') cluster.push(el('p', null, el('code', null, k), ': ', v));
  if (nodes.nodes.length === 1) cluster.push(el('p', { class: 'note' }, 'A single node (no --peers).'));
  $('health-cluster').replaceChildren(...cluster);
  $('health-rejects').replaceChildren('Kept ', el('b', { 'data-rejects-kept': String(rejects.kept) }, fmt(rejects.kept)),
    ' rejected lines; ', el('b', { 'data-rejects-not-kept': String(rejects.not_kept) }, fmt(rejects.not_kept)), ' older ones counted, not kept.');
  $('health-reject-lines').textContent = rejects.lines.length ? rejects.lines.join('\n') : 'no rejected lines';
  cc.ready++;
}

/**
 * Every node of the cluster as GET /v1/nodes gives it (this node first):
 * its health, and from its own /metrics its streams' event-time lag and,
 * reading Kafka, the records it is behind.
 */
function nodesTable(nodes, peers, missing) {
  const rows = nodes.map((n) => {
    const ms = n.metrics ? parseMetrics(n.metrics) : [];
    const m = (name, labels) => metric(ms, name, labels);
    const health = n.error ? 'no answer: ' + n.error : `${n.health_status} ${n.health}`;
    const streams = ms.filter((x) => x.name === 'cardinal_events_accepted_total').map((x) => {
      const wm = m('cardinal_stream_watermark_seconds', { stream: x.labels.stream });
      return `${x.labels.stream}: ${fmt(x.value)} accepted, ${wm ? lagText(Date.now() / 1000 - wm) : 'no events'}`;
    });
    const kafka = ms.filter((x) => x.name === 'cardinal_kafka_lag_records');
    const failures = peers.find((p) => p.labels.peer === n.url);
    const inAnswer = n.this || !missing.includes(n.url);
    return [n.url + (n.this && !n.url.includes('this node') ? ' (this node)' : ''), health,
      n.metrics ? duration(m('cardinal_up_seconds')) : '–', streams.join('; ') || '–',
      kafka.length ? fmt(kafka.reduce((a, x) => a + x.value, 0)) + ` over ${kafka.length} partitions` : '–',
      n.this ? '–' : (inAnswer ? 'yes' : 'no') + (failures ? `, ${fmt(failures.value)} failed queries` : '')];
  });
  const t = el('table', { class: 'grid', 'data-nodes-listed': String(nodes.length) });
  table(t, ['node', 'health', 'up', 'streams: accepted, event-time lag', 'Kafka records behind', 'in answers'], rows);
  return t;
}

// ------------------------------------------------------------------ views

async function showView(name, reload) {
  const changed = name !== view;
  view = name;
  for (const b of document.querySelectorAll('#nav button')) b.classList.toggle('active', b.dataset.view === name);
  for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + name;
  if (!cc.summaries) return;
  if (name === 'chart' && (reload || !cc.plot)) await loadChart();
  else if (name === 'chart' && changed) cc.plot.setSize({ width: Math.max(300, $('plot').parentNode.clientWidth - 2), height: 420 });
  if (name === 'summaries') { await renderSummaries(); cc.ready++; }
  if (name === 'health') await loadHealth();
  if (name === 'overlap' && reload && cc.overlap) await loadOverlap();
}

function wire() {
  $('origin').textContent = location.origin;
  for (const b of document.querySelectorAll('#nav button')) b.onclick = () => showView(b.dataset.view).catch(report);
  $('c-summary').onchange = () => onSummaryChange();
  for (const id of ['c-measure', 'c-split', 'c-top', 'c-where', 'c-from', 'c-to', 'c-partial']) $(id).onchange = () => loadChart();
  $('c-split').addEventListener('change', () => { $('c-top').disabled = !$('c-split').value; });
  $('c-range').onchange = () => {
    const custom = $('c-range').value === 'custom';
    for (const e of document.querySelectorAll('.custom')) e.classList.toggle('shown', custom);
    // A custom range starts as the range drawn, to be edited.
    if (custom && cc.chart && !$('c-from').value && !$('c-to').value) {
      $('c-from').value = cc.chart.from || '';
      $('c-to').value = cc.chart.to || '';
    }
    loadChart();
  };
  $('c-refresh').onchange = setRefresh;
  $('o-summary').onchange = onOverlapSummary;
  $('o-form').onsubmit = (e) => { e.preventDefault(); loadOverlap(); };
  $('sql-run').onclick = runSql;
  $('sql-text').onkeydown = (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); runSql(); } };
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && Number($('c-refresh').value) && view === 'chart' && !down) loadChart();
  });
  window.addEventListener('resize', () => {
    if (cc.plot) cc.plot.setSize({ width: Math.max(300, $('plot').parentNode.clientWidth - 2), height: 420 });
  });
  setInterval(heartbeat, HEARTBEAT_MS);
  // The streams' rates stay current while their table is in view.
  setInterval(async () => {
    if (down || document.visibilityState !== 'visible' || view !== 'summaries' || !samples.length) return;
    try {
      await sampleMetrics();
      table($('streams-table'), STREAM_COLUMNS, streamRows());
    } catch (e) { report(e); }
  }, RATES_EVERY_MS);
}

function report(e) {
  if (e instanceof HttpError && e.status === 0) return; // the banner says it
  console.warn(e.message || e);
}

async function start() {
  wire();
  await heartbeat();
  try {
    await loadSummaries();
  } catch (e) {
    report(e);
    return; // the banner's retry loop calls reloadAll once the server answers
  }
  const s = summaryByName($('c-summary').value);
  if (!s) {
    $('chart-error').textContent = 'No summary has a time bucket to chart: the Summaries, Overlap and SQL views still work.';
    $('chart-error').hidden = false;
  }
  // The nodes choice only means something in a cluster.
  api('/v1/nodes').then((r) => r.json()).then((n) => { $('c-partial-field').hidden = n.nodes.length < 2; }).catch(report);
  if (s) $('sql-text').value = `SELECT ${ident(s.bucket.column)}, ${measures(s).slice(0, 2).map((m) => ident(m.name)).join(', ')} FROM ${ident(s.name)} GROUP BY 1 ORDER BY 1`;
  await showView('chart', true);
}

start();
