// Drives the console page (crates/server/console) in headless Chromium and
// checks what it draws against the public HTTP API, queried here
// independently with SQL this script writes itself.
//
// Input, by environment:
//   CARDINAL_URL         the server's base URL, e.g. http://127.0.0.1:7480
//   CARDINAL_SHOTS       a directory for PNG screenshots (created if missing)
//   CARDINAL_TOKEN       the token, when the server was started with --token-file
//   CARDINAL_MODE        full (default) | token | down | peer-down
//   CARDINAL_PLAYWRIGHT  where playwright-core is (default: require's search)
//   CARDINAL_CHROMIUM    the browser (default /usr/bin/chromium)
//   CARDINAL_TIMEOUT_S   the whole run's bound (default 90)
//
// Output: one line per check, "ok   <check>" or "FAIL <check>: <why>"; exit
// 0 only when every check passed, 1 when one failed, 2 on a timeout or a
// crash of this script.
//
// Modes:
//   full   the server holds the demo data (`cardinal gen impressions` into
//          schema crates/cli/src/demo/schema.sql) and needs no token. Checks
//          every view; screenshots summaries, chart, console (the README
//          picture, 1280x800), overlap, sql, sql-error, health.
//   token  the server was started with --token-file holding CARDINAL_TOKEN:
//          the page must ask for it, draw the first chart once given, and
//          not ask again after a reload in the same tab (sessionStorage).
//   down   a protocol with the caller, over this script's stdout:
//            1. the script loads the page, waits for the first chart and
//               prints the line READY-FOR-KILL;
//            2. the caller stops the server; the script waits (at most
//               BANNER_WAIT_S) for the "server not answering" banner and
//               prints the line BANNER-SHOWN;
//            3. the caller starts the server again on the same address;
//               the script waits (at most RECOVER_WAIT_S) for the banner
//               to go and the chart to be drawn again.
//   empty  the server holds no events: the chart says so, naming the
//          stream; the script prints READY-FOR-EVENTS, the caller sends
//          the demo's events, and the chart must draw them by itself.
//   peer-down  the server is one node of a cluster whose other node was
//          stopped before the script started: the first chart says why
//          it cannot be drawn, and "those that answer" draws it from the
//          nodes that did, naming the node it lacks.
'use strict';

const { chromium } = require(process.env.CARDINAL_PLAYWRIGHT || 'playwright-core');
const fs = require('fs');
const path = require('path');

const BASE = (process.env.CARDINAL_URL || 'http://127.0.0.1:7480').replace(/\/$/, '');
const SHOTS = process.env.CARDINAL_SHOTS || '';
const TOKEN = process.env.CARDINAL_TOKEN || '';
const MODE = process.env.CARDINAL_MODE || 'full';
/** The whole run's bound: a hung browser or server fails the run, never hangs it. */
const TIMEOUT_S = Number(process.env.CARDINAL_TIMEOUT_S || 90);
/** One wait in the page (a chart drawn, a view rendered). */
const WAIT_MS = 15000;
/** How long the banner may take to show once the server is stopped (the page checks every 4 s). */
const BANNER_WAIT_S = 20;
/** How long the page may take to recover once the server is back (its retries back off to 8 s). */
const RECOVER_WAIT_S = 30;
/** How long the page may take to draw the first events once sent (it looks every 5 s). */
const EVENTS_WAIT_S = 20;
/** The default range the page's first chart covers, days ending after the newest bucket. */
const FIRST_RANGE_DAYS = 30;
/** How long a hidden tab is watched for a refresh it must not make: more than one 5 s period. */
const REFRESH_IDLE_MS = 6000;
const UNIT_S = { second: 1, minute: 60, hour: 3600, day: 86400, week: 604800 };

let failures = 0;
function check(name, ok, why) {
  if (ok) console.log('ok   ' + name);
  else { failures++; console.log('FAIL ' + name + ': ' + why); }
  return ok;
}

setTimeout(() => {
  console.log(`FAIL run: not finished within ${TIMEOUT_S} s (CARDINAL_TIMEOUT_S)`);
  process.exit(2);
}, TIMEOUT_S * 1000);

async function api(p, init = {}) {
  const headers = Object.assign({}, init.headers, TOKEN ? { Authorization: 'Bearer ' + TOKEN } : {});
  const res = await fetch(BASE + p, Object.assign({}, init, { headers }));
  return res;
}
async function getJson(p) {
  const res = await api(p);
  if (!res.ok) throw new Error(`GET ${p}: ${res.status} ${await res.text()}`);
  return res.json();
}
/** Whether this script's own queries ask for a partial answer (mode peer-down). */
let PARTIAL = false;
async function sql(q) {
  const res = await api('/v1/sql?format=json' + (PARTIAL ? '&partial=true' : ''), { method: 'POST', body: q });
  if (!res.ok) throw new Error(`SQL ${q}: ${res.status} ${await res.text()}`);
  return res.json();
}

const iso = (sec) => new Date(sec * 1000).toISOString().replace('.000Z', 'Z');
const quote = (v) => (typeof v === 'number' ? String(v) : "'" + String(v).replace(/'/g, "''") + "'");
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const diff = (a, b) => `page ${JSON.stringify(a).slice(0, 300)} vs API ${JSON.stringify(b).slice(0, 300)}`;

/** The approximate measures of a summary: columns m with m_lower and m_upper beside them. */
function approxMeasures(s) {
  const out = [];
  for (const a of s.aggregates) {
    const names = a.columns.map((c) => c.name);
    for (const n of names) if (names.includes(n + '_lower') && names.includes(n + '_upper')) out.push(n);
  }
  return out;
}

/**
 * The series the API gives for a chart, built from this script's own SQL:
 * each split value (or the one measure) over the union of buckets, null
 * where a series has no row.
 */
async function expectedSeries(s, m, approximate, split, top, from, to, filter) {
  const b = s.bucket.column;
  const conds = [];
  if (from) conds.push(`${b} >= '${from}'`);
  if (to) conds.push(`${b} < '${to}'`);
  if (filter) conds.push(`(${filter})`);
  const where = (extra) => { const c = conds.concat(extra || []); return c.length ? ' WHERE ' + c.join(' AND ') : ''; };
  const cols = approximate ? [m, m + '_lower', m + '_upper'] : [m];
  let rows, keys;
  if (split) {
    const tops = await sql(`SELECT ${split}, ${m} FROM ${s.name}${where()} GROUP BY ${split} ORDER BY ${m} DESC LIMIT ${top}`);
    keys = tops.map((r) => r[split]);
    rows = await sql(`SELECT ${b}, ${split}, ${cols.join(', ')} FROM ${s.name}${where(`${split} IN (${keys.map(quote).join(', ')})`)} GROUP BY ${b}, ${split}`);
  } else {
    keys = [null];
    rows = await sql(`SELECT ${b}, ${cols.join(', ')} FROM ${s.name}${where()} GROUP BY ${b}`);
  }
  const xs = [...new Set(rows.map((r) => Date.parse(r[b]) / 1000))].sort((p, q) => p - q);
  return keys.map((k) => {
    const pick = (c) => xs.map((x) => {
      const r = rows.find((r) => Date.parse(r[b]) / 1000 === x && (!split || r[split] === k));
      return r ? r[c] : null;
    });
    return { label: split ? String(k) : m, approximate, x: xs, value: pick(m), lower: approximate ? pick(m + '_lower') : null, upper: approximate ? pick(m + '_upper') : null };
  });
}

/** Compares the page's chart (its series and its uPlot data) with the API's series. */
async function checkChart(page, name, want) {
  const got = await page.evaluate(() => {
    const c = window.cardinalConsole;
    return { series: c.chart.series, data: c.plot.data.map((a) => Array.from(a)), bands: (c.plot.bands || []).length };
  });
  check(`${name}: ${want.length} series, labels ${want.map((s) => s.label).join(',')}`,
    same(got.series.map((s) => s.label), want.map((s) => s.label)), diff(got.series.map((s) => s.label), want.map((s) => s.label)));
  for (let i = 0; i < want.length; i++) {
    const g = got.series[i] || {}, w = want[i];
    for (const k of ['x', 'value', 'lower', 'upper', 'approximate']) check(`${name}: series ${w.label} ${k} equals the API`, same(g[k], w[k]), diff(g[k], w[k]));
  }
  const data = [want.length ? want[0].x : []];
  for (const w of want) { data.push(w.value); if (w.approximate) data.push(w.lower, w.upper); }
  check(`${name}: uPlot data equals the API (${data.length - 1} columns)`, same(got.data, data), diff(got.data, data));
  const bands = want.filter((w) => w.approximate).length;
  check(`${name}: ${bands} interval bands`, got.bands === bands, `page has ${got.bands}`);
}

async function waitChart(page, pred, arg) {
  await page.waitForFunction(pred, arg, { timeout: WAIT_MS });
}
const chartDrawn = () => { const c = window.cardinalConsole; return c && c.plot && c.chart && c.ready > 0; };

async function shot(page, file) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, file) });
  console.log(`     screenshot ${path.join(SHOTS, file)}`);
}

async function firstChartWant(summaries) {
  const s = summaries.summaries.find((x) => x.bucket && approxMeasures(x).length);
  if (!s) throw new Error('no summary with a bucket and an approximate aggregate: load the demo data');
  const m = approxMeasures(s)[0];
  const unit = String(s.bucket.unit).match(/^(\d+)?\s*([a-z]+?)s?$/i);
  const step = Number(unit[1] || 1) * UNIT_S[unit[2].toLowerCase()];
  const newest = Date.parse(s.newest_bucket) / 1000;
  const from = iso(Math.min(newest + step - FIRST_RANGE_DAYS * 86400, newest)), to = iso(newest + step);
  return { s, m, from, to, series: await expectedSeries(s, m, true, null, 0, from, to) };
}

async function full(page, errors) {
  const summaries = await getJson('/v1/summaries');

  // The first chart, without any click.
  await waitChart(page, chartDrawn);
  const first = await firstChartWant(summaries);
  const c = await page.evaluate(() => window.cardinalConsole.chart);
  check(`first chart: ${first.s.name} ${first.m} from ${first.from} to ${first.to}`,
    c.summary === first.s.name && c.aggregate === first.m && c.split === null && c.from === first.from && c.to === first.to,
    diff([c.summary, c.aggregate, c.split, c.from, c.to], [first.s.name, first.m, null, first.from, first.to]));
  await checkChart(page, 'first chart', first.series);
  await shot(page, 'console.png');

  // The summaries view equals /v1/summaries.
  await page.click('#nav button[data-view=summaries]');
  await page.waitForSelector('#streams-table tbody tr', { timeout: WAIT_MS });
  const listed = await page.$$eval('#summaries-table tbody tr', (trs) => trs.map((tr) => [tr.dataset.summary, Number(tr.querySelector('[data-groups]').dataset.groups)]));
  const fresh = await getJson('/v1/summaries');
  const want = fresh.summaries.map((s) => [s.name, s.groups]);
  check('summaries view lists /v1/summaries (names and groups)', same(listed, want), diff(listed, want));
  await shot(page, 'summaries.png');

  // Another summary, aggregate and split, chosen through the controls.
  const q = summaries.summaries.find((s) => s.bucket && s.dimensions.length && s.aggregates.some((a) => /quantile/.test(a.kind)));
  if (check('a summary with a quantile aggregate and a dimension', q, 'none in /v1/summaries')) {
    const ms = approxMeasures(q);
    const m = ms.find((n) => /_p99$/.test(n)) || ms[ms.length - 1];
    const split = q.dimensions[0].name;
    await page.click('#nav button[data-view=chart]');
    await page.selectOption('#c-summary', q.name);
    await page.selectOption('#c-measure', m);
    await page.selectOption('#c-split', split);
    await waitChart(page, ([n, m, d]) => { const c = window.cardinalConsole.chart; return c && c.summary === n && c.aggregate === m && c.split === d; }, [q.name, m, split]);
    const cc = await page.evaluate(() => window.cardinalConsole.chart);
    const wantSplit = await expectedSeries(q, m, true, split, 5, cc.from, cc.to);
    check(`split chart: range ends after ${q.name}'s newest bucket`, cc.to === iso(Date.parse(q.newest_bucket) / 1000 + 86400), `to ${cc.to}`);
    await checkChart(page, `split chart ${q.name} ${m} by ${split}`, wantSplit);
    await shot(page, 'chart.png');

    // A custom range, top 3 and a filter on the same chart.
    const newest = Date.parse(q.newest_bucket) / 1000;
    const from = iso(newest - 12 * 86400).slice(0, 10), to = iso(newest - 2 * 86400).slice(0, 10);
    const excluded = wantSplit[0].label;
    const filter = `${split} <> ${quote(excluded)}`;
    await page.selectOption('#c-range', 'custom');
    await page.fill('#c-from', from);
    await page.fill('#c-to', to);
    await page.fill('#c-top', '3');
    await page.fill('#c-where', filter);
    await page.press('#c-where', 'Enter');
    await page.locator('#c-where').blur();
    await waitChart(page, ([f, t, w]) => { const c = window.cardinalConsole.chart; return c.from === f && c.to === t && c.where === w && c.top === 3; }, [from, to, filter]);
    const wantCustom = await expectedSeries(q, m, true, split, 3, from, to, filter);
    check(`custom chart: ${from} to ${to}, top 3, where ${filter}`, !wantCustom.some((w) => w.label === excluded) && wantCustom.length === 3, diff(wantCustom.map((w) => w.label), 'three others'));
    await checkChart(page, 'custom chart', wantCustom);

    // Live refresh: the chart is queried again without a click.
    const before = await page.evaluate(() => window.cardinalConsole.ready);
    await page.selectOption('#c-refresh', '5');
    await page.waitForFunction((r) => window.cardinalConsole.ready > r, before, { timeout: WAIT_MS });
    check('live refresh (5 s) redraws the chart by itself', true);
    // A hidden tab does not refresh; showing it again refreshes at once.
    await page.evaluate(() => { Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' }); });
    const hiddenAt = await page.evaluate(() => window.cardinalConsole.ready);
    await page.waitForTimeout(REFRESH_IDLE_MS);
    const hiddenNow = await page.evaluate(() => window.cardinalConsole.ready);
    check('live refresh pauses while the tab is hidden', hiddenNow === hiddenAt, `${hiddenNow - hiddenAt} redraws while hidden`);
    await page.evaluate(() => { delete document.visibilityState; document.dispatchEvent(new Event('visibilitychange')); });
    await page.waitForFunction((r) => window.cardinalConsole.ready > r, hiddenNow, { timeout: 2000 });
    check('live refresh resumes when the tab is shown', true);
    await page.selectOption('#c-refresh', '0');
  }

  // The overlap explorer equals GET /v1/overlap for the same a and b.
  const o = summaries.summaries.find((s) => s.dimensions.length && s.aggregates.some((a) => /^hll/.test(a.kind)) && !s.bucket)
    || summaries.summaries.find((s) => s.dimensions.length && s.aggregates.some((a) => /^hll/.test(a.kind)));
  if (check('a summary with an hll aggregate and a dimension', o, 'none in /v1/summaries')) {
    const agg = o.aggregates.find((a) => /^hll/.test(a.kind)).name;
    const d = o.dimensions[0].name;
    const tops = await sql(`SELECT ${d}, ${agg} FROM ${o.name} GROUP BY ${d} ORDER BY ${agg} DESC LIMIT 3`);
    const a = `${d} = ${quote(tops[0][d])}`, b = `${d} = ${quote(tops[tops.length - 1][d])}`;
    await page.click('#nav button[data-view=overlap]');
    await page.selectOption('#o-summary', o.name);
    await page.selectOption('#o-aggregate', agg);
    await page.fill('#o-a', a);
    await page.fill('#o-b', b);
    await page.click('#o-run');
    await page.waitForFunction(([a, b]) => { const o = window.cardinalConsole.overlap; return o && document.querySelector('.shared') && document.getElementById('o-a').value === a && document.getElementById('o-b').value === b; }, [a, b], { timeout: WAIT_MS });
    const got = await page.evaluate(() => window.cardinalConsole.overlap);
    const wantO = await getJson('/v1/overlap?' + new URLSearchParams({ summary: o.name, aggregate: agg, a, b }));
    check(`overlap ${o.name}: ${a} and ${b} equals GET /v1/overlap`, same(got, wantO), diff(got, wantO));
    const shown = await page.$eval('.shared', (e) => e.dataset.intersection || (e.dataset.below ? 'below' : ''));
    const wantShown = wantO.below_detection_limit ? 'below' : String(wantO.intersection.value);
    check('overlap: the shared audience shown is the answer\'s', shown === wantShown, `shown ${shown}, answer ${wantShown}`);
    check('overlap: two circles drawn', (await page.$$('svg.venn circle')).length === 2, 'no picture');
    await shot(page, 'overlap.png');
  }

  // The SQL box: a table of the answer, then a refusal's caret text.
  const s = first.s;
  const good = `SELECT ${s.bucket.column}, ${first.m}, ${first.m}_lower, ${first.m}_upper FROM ${s.name} GROUP BY 1 ORDER BY 1`;
  await page.click('#nav button[data-view=sql]');
  await page.fill('#sql-text', good);
  await page.click('#sql-run');
  await page.waitForFunction((q) => { const r = window.cardinalConsole.sqlResult; return r && r.sql === q; }, good, { timeout: WAIT_MS });
  const rows = await sql(good);
  const gotRows = await page.evaluate(() => window.cardinalConsole.sqlResult.rows);
  check('sql box: the answer equals POST /v1/sql', same(gotRows, rows), diff(gotRows, rows));
  const trs = await page.$$eval('#sql-table tbody tr', (t) => t.length);
  check(`sql box: ${rows.length} table rows`, trs === Math.min(rows.length, 1000), `${trs} rows`);
  check('sql box: a chart for a timestamp and numbers', await page.isVisible('#sql-plot canvas'), 'no chart');
  await shot(page, 'sql.png');

  const bad = `SELECT no_such_column FROM ${s.name}`;
  const res = await api('/v1/sql?format=json', { method: 'POST', body: bad });
  const wantErr = (await res.json()).error;
  check('a bad query is 400 with a caret', res.status === 400 && /\^/.test(wantErr), `status ${res.status}`);
  errors.allow400 = true;
  await page.fill('#sql-text', bad);
  await page.click('#sql-run');
  await page.waitForFunction((q) => { const r = window.cardinalConsole.sqlResult; return r && r.sql === q; }, bad, { timeout: WAIT_MS });
  const shownErr = await page.$eval('#sql-error', (e) => (e.hidden ? null : e.textContent));
  check('sql box: the 400 error is shown with its caret text', shownErr === wantErr, diff(shownErr, wantErr));
  await shot(page, 'sql-error.png');
  errors.allow400 = false;

  // Health: the rejects kept count.
  await page.click('#nav button[data-view=health]');
  await page.waitForSelector('[data-rejects-kept]', { timeout: WAIT_MS });
  const kept = await page.$eval('[data-rejects-kept]', (e) => Number(e.dataset.rejectsKept));
  const rj = await getJson('/v1/rejects');
  check(`health: rejects kept ${rj.kept} as /v1/rejects`, kept === rj.kept, `page ${kept}`);
  const hz = await page.$eval('#health-cards .card .value', (e) => e.textContent);
  check('health: /healthz status shown', /^200 ok/.test(hz), hz);
  const nodes = await getJson('/v1/nodes');
  const offered = await page.$eval('#c-partial-field', (e) => !e.hidden);
  check(`chart: the nodes choice offered only in a cluster (${nodes.nodes.length} nodes)`, offered === nodes.nodes.length > 1, `offered: ${offered}`);
  const nodesListed = await page.$eval('[data-nodes-listed]', (e) => Number(e.dataset.nodesListed));
  check(`health: the nodes of /v1/nodes (${nodes.nodes.length}) listed`, nodesListed === nodes.nodes.length, `page ${nodesListed}`);
  const nodeRows = await page.$$eval('[data-nodes-listed] tbody tr', (trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  nodes.nodes.forEach((n, i) => {
    const m = /^cardinal_events_accepted_total\{stream="impressions"\} (\d+)/m.exec(n.metrics || '');
    const accepted = m ? Number(m[1]).toLocaleString('en-US') : null;
    const row = nodeRows[i] || [];
    check(`health: node ${i + 1} healthy, with its own count of events`,
      row[1] === `${n.health_status} ${n.health}` && n.health_status === 200 && accepted !== null
        && (row[3] || '').startsWith(`impressions: ${accepted} accepted`), JSON.stringify(row));
  });
  await shot(page, 'health.png');
}

/**
 * peer-down: one peer of the server's cluster was stopped before the page
 * loaded. The first chart, whose queries all nodes must answer by
 * default, says why it cannot be drawn; the nodes choice is offered (a
 * cluster); "those that answer" draws it from the nodes that did (equal
 * to this script's own partial=true answers) and names the node it lacks.
 */
async function peerDownMode(page) {
  const summaries = await getJson('/v1/summaries');
  await page.waitForSelector('#chart-error:not([hidden])', { timeout: WAIT_MS });
  const err = await page.$eval('#chart-error', (e) => e.textContent);
  check('peer down: the chart says a node did not answer, pointing at partial=true', /partial=true/.test(err), err);
  await page.waitForSelector('#c-partial-field:not([hidden])', { timeout: WAIT_MS });
  const before = await page.evaluate(() => window.cardinalConsole.ready);
  await page.selectOption('#c-partial', '1');
  await waitChart(page, (n) => { const c = window.cardinalConsole; return c.ready > n && c.chart && c.chart.missing; }, before);
  PARTIAL = true;
  const first = await firstChartWant(summaries);
  await checkChart(page, 'partial chart', first.series);
  const res = await api('/v1/sql?format=json&partial=true', { method: 'POST', body: `SELECT ${first.m} FROM ${first.s.name}` });
  const wantMissing = res.headers.get('cardinal-missing-node');
  const missing = await page.evaluate(() => window.cardinalConsole.chart.missing);
  check('peer down: the chart names the node it lacks', !!wantMissing && missing === wantMissing, diff(missing, wantMissing));
  const title = await page.$eval('#chart-title', (e) => e.textContent);
  check('peer down: the title says the answer is partial', title.includes('partial: without'), title);
  await shot(page, 'partial.png');
}

/**
 * empty: the server holds no events when the page loads. The first chart
 * says its summary has none yet, naming the stream; the script prints
 * READY-FOR-EVENTS, the caller sends the events, and the chart draws
 * them by itself (the page looks again every few seconds), equal to the
 * API's answer.
 */
async function emptyMode(page) {
  await page.waitForSelector('#chart-empty:not([hidden])', { timeout: WAIT_MS });
  const said = await page.$eval('#chart-empty', (e) => e.textContent);
  check('empty: the chart says its summary holds no events yet, naming the stream',
    /holds no events yet/.test(said) && /stream impressions/.test(said), said);
  await shot(page, 'empty.png');
  console.log('READY-FOR-EVENTS');
  await page.waitForFunction(() => {
    const c = window.cardinalConsole;
    return c.chart && c.chart.series.length > 0 && c.chart.series[0].x.length > 0;
  }, null, { timeout: EVENTS_WAIT_S * 1000 });
  const first = await firstChartWant(await getJson('/v1/summaries'));
  await checkChart(page, 'empty: the first chart once events came', first.series);
  const gone = await page.$eval('#chart-empty', (e) => e.hidden);
  check('empty: the note is gone', gone, 'still shown');
}

async function tokenMode(page) {
  if (!TOKEN) throw new Error('CARDINAL_MODE=token needs CARDINAL_TOKEN');
  await page.waitForSelector('#token-modal:not([hidden])', { timeout: WAIT_MS });
  check('token: the page asks for the token', true);
  await shot(page, 'token.png');
  await page.fill('#token-input', 'not-the-token');
  await page.click('#token-form button[type=submit]');
  await page.waitForFunction(() => window.cardinalConsole.tokenAsked === 2 && !document.getElementById('token-modal').hidden, null, { timeout: WAIT_MS });
  const why = await page.$eval('#token-why', (e) => e.textContent);
  check('token: a wrong token is refused and asked for again', /refused/.test(why), why);
  await page.fill('#token-input', TOKEN);
  await page.click('#token-form button[type=submit]');
  await waitChart(page, chartDrawn);
  const n = await page.evaluate(() => window.cardinalConsole.chart.series.length);
  check('token: the first chart is drawn once the token is given', n > 0, 'no series');
  await page.reload();
  await waitChart(page, chartDrawn);
  const asked = await page.evaluate(() => window.cardinalConsole.tokenAsked);
  check('token: a reload in the same tab does not ask again', asked === 0 && !(await page.isVisible('#token-modal')), `asked ${asked} times`);
  const first = await firstChartWant(await getJson('/v1/summaries'));
  await checkChart(page, 'token: first chart', first.series);
}

async function downMode(page) {
  await waitChart(page, chartDrawn);
  check('down: the first chart is drawn', true);
  console.log('READY-FOR-KILL');
  const bannerUp = () => { const b = document.getElementById('banner'); return !b.hidden && /server not answering at/.test(b.textContent); };
  await page.waitForFunction(bannerUp, null, { timeout: BANNER_WAIT_S * 1000, polling: 200 });
  const text = await page.$eval('#banner', (e) => e.textContent);
  check(`down: the banner shows ("${text}")`, /retrying/.test(text), text);
  await shot(page, 'down.png');
  const readyAt = await page.evaluate(() => window.cardinalConsole.ready);
  console.log('BANNER-SHOWN');
  await page.waitForFunction((r) => {
    const c = window.cardinalConsole;
    return document.getElementById('banner').hidden && c.ready > r && c.plot && c.plot.data[0].length > 0;
  }, readyAt, { timeout: RECOVER_WAIT_S * 1000, polling: 200 });
  check('down: the banner goes and the chart is drawn again', true);
}

(async () => {
  const t0 = Date.now();
  const browser = await chromium.launch({
    executablePath: process.env.CARDINAL_CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  let code = 0;
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const errors = { list: [], allow400: false };
    page.on('pageerror', (e) => errors.list.push('pageerror: ' + e.message));
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      const text = m.text();
      if (MODE !== 'full' && /Failed to load resource|ERR_CONNECTION_REFUSED|ERR_EMPTY_RESPONSE|Failed to fetch/.test(text)) return; // 401s, a stopped server
      if (errors.allow400 && /status of 400/.test(text) && /\/v1\/sql/.test(m.location().url)) return;
      errors.list.push('console: ' + text);
    });
    await page.goto(BASE + '/', { timeout: WAIT_MS });
    if (MODE === 'full') await full(page, errors);
    else if (MODE === 'token') await tokenMode(page);
    else if (MODE === 'down') await downMode(page);
    else if (MODE === 'peer-down') await peerDownMode(page);
    else if (MODE === 'empty') await emptyMode(page);
    else throw new Error(`CARDINAL_MODE=${MODE}: full, token or down`);
    check('no console errors and no page errors', errors.list.length === 0, errors.list.join(' | '));
  } catch (e) {
    console.log('FAIL ' + MODE + ': ' + (e && e.message ? e.message.split('\n')[0] : e));
    code = 2;
  } finally {
    await browser.close();
  }
  console.log(`${failures || code ? 'FAILED' : 'PASSED'} (${MODE}, ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  process.exit(code || (failures ? 1 : 0));
})();
