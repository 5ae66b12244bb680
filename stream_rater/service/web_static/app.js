"use strict";
// The stream_rater dashboard: polls the worker's JSON API (/api/*) and draws with uPlot.
// Routes (location.hash): #/ladder/<ladder> and #/ladder/<ladder>/player/<player>.

const OPS_EVERY_MS = 2000;
const WINDOW_S = 600;  // the operations charts show at most the last 10 minutes
const VIEW_EVERY_MS = 5000;
const BLUE = "#2f6fde", GREEN = "#1a8a4a", RED = "#c8392b", ORANGE = "#d9822b", GREY = "#6b7385";

const state = { ladders: [], route: { ladder: null, player: null }, charts: {} };

// ---- helpers --------------------------------------------------------------------------

async function api(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (response.status === 401) location.reload();  // the session ended: the page signs in again
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

function num(x) {
  if (x == null || !Number.isFinite(x)) return "–";
  const digits = Math.abs(x) >= 1000 ? 0 : Math.abs(x) >= 100 ? 1 : 2;
  return x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

const count = (x) => (x == null ? "–" : Math.round(x).toLocaleString("en-US"));
const signed = (x) => (x > 0 ? "+" : "") + num(x);
const day = (iso) => (iso ? iso.slice(0, 10) : "–");
const clock = (iso) => (iso ? iso.slice(11, 19) : "");  // times are shown in UTC, as the events carry them
const epochDay = (seconds) => (seconds == null ? "–" : new Date(seconds * 1000).toISOString().slice(0, 10));

function duration(seconds) {
  const s = Math.floor(seconds);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const ladderHref = (ladder) => `#/ladder/${encodeURIComponent(ladder)}`;
const playerHref = (ladder, player) => `${ladderHref(ladder)}/player/${encodeURIComponent(player)}`;

function tile(label, value, alert = false) {
  return el("div", { class: alert ? "tile alert" : "tile" },
    el("div", { class: "value", text: value }), el("div", { class: "label", text: label }));
}

// ---- charts ---------------------------------------------------------------------------

// Draws `data` in the element `id` (fixed height, the element's width); the chart is
// rebuilt when `key` (its shape) changes.
function chart(id, key, options, data) {
  const box = document.getElementById(id);
  let entry = state.charts[id];
  if (entry && entry.key !== key) {
    entry.observer.disconnect();
    entry.plot.destroy();
    entry = null;
  }
  if (entry) {
    entry.plot.setData(data);
    return;
  }
  const height = box.classList.contains("tall") ? 300 : 170;
  const plot = new uPlot({ width: box.clientWidth, height, ...options }, data, box);
  const observer = new ResizeObserver(() => plot.setSize({ width: box.clientWidth, height }));
  observer.observe(box);
  state.charts[id] = { key, plot, observer };
}

const line = (label, stroke, extra = {}) => ({ label, stroke, width: 2, spanGaps: false, ...extra });
const fromZero = { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.1 : 1] };  // counts and rates start at 0
// The time axis spans the samples there are (at least a minute, at most WINDOW_S).
function timeRange(u, lo, hi) {
  const end = hi ?? Date.now() / 1000;
  return [Math.max(end - WINDOW_S, Math.min(lo ?? end, end - 60)), end];
}

const utcClock = (seconds) => new Date(seconds * 1000).toISOString().slice(11, 19);

const timeChart = (series) => ({
  series: [{}, ...series],
  scales: { x: { range: timeRange }, y: fromZero },
  axes: [{ values: (u, ticks) => ticks.map(utcClock) }, { size: 60 }],
  legend: { live: false },
});

// ---- operations -----------------------------------------------------------------------

async function refreshOps() {
  const status = document.getElementById("status");
  try {
    const [overview, ready] = await Promise.all([api("/api/overview"), fetch("/readyz").then((r) => r.json())]);
    status.textContent = ready.ready ? "ready" : `not ready: ${ready.reason}`;
    status.className = ready.ready ? "pill ok" : "pill bad";
    drawOps(overview);
  } catch (error) {
    status.textContent = "worker unreachable";
    status.className = "pill bad";
  }
}

function drawOps({ worker, totals, lag, series }) {
  document.getElementById("worker").textContent =
    `group ${worker.consumer_group} · topic ${worker.topic} · partitions ` +
    `${worker.partitions.length ? worker.partitions.join(", ") : "none"} · up ${duration(worker.uptime)}`;

  const recent = series.consumed.slice(-10);
  const rate = recent.length ? recent.reduce((a, b) => a + b, 0) / recent.length : 0;
  const totalLag = lag.reduce((a, row) => a + row.lag, 0);
  document.getElementById("tiles").replaceChildren(
    tile("matches/s now", num(rate)),
    tile("consumed", count(totals.consumed)),
    tile("applied", count(totals.applied)),
    tile("duplicates", count(totals.duplicates)),
    tile("dead letters", count(totals.dead_letters), totals.dead_letters > 0),
    tile("conflicts", count(totals.conflicts)),
    tile("retries", count(totals.retries), totals.retries > 0),
    tile("lag", count(totalLag), totalLag > 0),
  );

  chart("chart-throughput", "throughput",
    timeChart([line("consumed", BLUE), line("applied", GREEN)]),
    [series.t, series.consumed, series.applied]);
  chart("chart-latency", "latency",
    timeChart([line("mean batch latency (s)", ORANGE, { points: { show: true, size: 4 } })]),
    [series.t, series.latency]);
  chart("chart-errors", "errors",
    timeChart([line("dead letters", RED), line("commit conflicts", GREY)]),
    [series.t, series.dead_letters, series.conflicts]);

  const measured = new Map(lag.map((row) => [row.partition, row.lag]));
  const most = Math.max(1, ...measured.values());
  const rows = worker.partitions.map((partition) => el("div", { class: "lagrow" },
    el("span", { text: `p${partition}` }),
    el("div", { class: "lagbar" }, el("span", { style: `width:${(100 * (measured.get(partition) ?? 0)) / most}%` })),
    el("span", { class: "n", text: count(measured.get(partition)) })));
  document.getElementById("lag").replaceChildren(
    ...(rows.length ? rows : [el("p", { class: "muted", text: "No partition is assigned to this worker." })]));
}

// The change players see (the display rating's), or μ's for an event stored before events carried it.
function shown(e) {
  return e.rating_delta ?? e.delta;
}

async function refreshFeed() {
  try {
    const { events } = await api("/api/feed?limit=60");
    document.getElementById("feed").replaceChildren(...events.map((e) => el("li", {},
      el("span", { class: "time", text: clock(e.processed_at) }),
      el("span", { class: "who" },
        el("a", { href: playerHref(e.ladder, e.player_id), text: e.player_id }),
        el("small", { text: ` ${e.ladder}` })),
      el("span", { class: shown(e) >= 0 ? "up" : "down", text: signed(shown(e)), title: `μ ${signed(e.delta)}` }))));
  } catch (error) {
    // the status pill already says the worker is unreachable
  }
}

// ---- ladder view ----------------------------------------------------------------------

function drawTabs() {
  document.getElementById("ladders").replaceChildren(...state.ladders.map((ladder) => el("a", {
    href: ladderHref(ladder.name),
    class: ladder.name === state.route.ladder ? "active" : "",
    text: ladder.name,
  })));
}

async function refreshLadder(ladder) {
  const [board, distribution] = await Promise.all([
    api(`/api/ladders/${encodeURIComponent(ladder)}/leaderboard?top=25`),
    api(`/api/ladders/${encodeURIComponent(ladder)}/distribution`),
    refreshQuality(ladder).catch((error) => console.warn(error)),
  ]);
  const corrected = board.generation ? ` · generation ${board.generation} (re-rated)` : "";
  const rerating = board.rerate ? ` · re-rate running (${board.rerate})` : "";
  document.getElementById("ladder-model").textContent = `${board.model}, top ${board.rows.length}${corrected}${rerating}`;
  document.getElementById("leaderboard-empty").hidden = board.rows.length > 0;
  document.querySelector("#leaderboard tbody").replaceChildren(...board.rows.map((row) => el("tr", {},
    el("td", { text: row.rank }),
    el("td", { class: "player" }, el("a", { href: playerHref(ladder, row.player_id), text: row.player_id })),
    el("td", { class: "num", text: num(row.rating) }),
    el("td", { class: "num", text: num(row.mu) }),
    el("td", { class: "num", text: row.sigma == null ? "–" : num(row.sigma) }),
    el("td", { class: "num", text: count(row.games) }),
    el("td", { text: epochDay(row.last_played) }))));

  refreshInflation(ladder).catch((error) => console.warn(error));
  const { edges, counts } = distribution;
  document.getElementById("distribution-note").textContent =
    `${count(distribution.players)} ${distribution.truncated ? "top-rated " : ""}players by leaderboard rating`;
  const centers = counts.map((_, i) => (edges[i] + edges[i + 1]) / 2);
  chart("chart-distribution", "distribution", {
    series: [{}, { label: "players", fill: "rgba(47,111,222,0.55)", stroke: BLUE, width: 1,
      paths: uPlot.paths.bars({ size: [0.92, Infinity] }), points: { show: false } }],
    scales: { x: { time: false, range: () => [edges[0] ?? 0, edges[edges.length - 1] ?? 1] }, y: fromZero },
    axes: [{}, { size: 50 }],
    legend: { show: false },
  }, [centers, counts]);
}

// The mean display ratings seen on each ladder's panel (sampled at each refresh), and the
// marks: a season start or a re-rate switch noticed between two samples.
const inflationSeries = {};

async function refreshInflation(ladder) {
  const now = await api(`/api/ladders/${encodeURIComponent(ladder)}/inflation`);
  const seen = inflationSeries[ladder] ??= { t: [], ranked: [], active: [], marks: [], last: null };
  const t = Date.now() / 1000;
  if (seen.last && now.season !== seen.last.season) seen.marks.push(`${utcClock(t)} season ${now.season} started`);
  if (seen.last && now.generation !== seen.last.generation) {
    seen.marks.push(`${utcClock(t)} re-rated: generation ${now.generation} live`);
  }
  seen.last = now;
  seen.t.push(t);
  seen.ranked.push(now.ranked.mean);
  seen.active.push(now.active.mean);
  document.getElementById("inflation-note").textContent =
    `season ${now.season} · generation ${now.generation} · totals of ${epochDay(now.computed_at)} ${now.computed_at ? utcClock(now.computed_at) : ""}`;
  document.getElementById("inflation-tiles").replaceChildren(
    tile("ranked players", count(now.ranked.players)),
    tile("ranked mean", num(now.ranked.mean)),
    tile("ranked total", num(now.ranked.sum)),
    tile("active players", count(now.active.players)),
    tile("active mean", num(now.active.mean)),
    tile("active total", num(now.active.sum)),
    tile("points created", signed(now.points_created - now.points_removed)),
  );
  chart("chart-inflation", "inflation", {
    ...timeChart([line("ranked mean", BLUE), line("active mean", GREEN)]),
    scales: { x: { range: timeRange }, y: {} },
  }, [seen.t, seen.ranked, seen.active]);
  document.getElementById("inflation-marks").replaceChildren(...seen.marks.slice(-5).map((m) => el("li", { text: m })));
}

// ---- prediction quality ---------------------------------------------------------------

const pct = (x) => (x == null ? "–" : `${(100 * x).toFixed(1)} %`);

async function refreshQuality(ladder) {
  const q = await api(`/api/ladders/${encodeURIComponent(ladder)}/quality?last=500`);
  const all = q.cumulative, last = q.last;
  document.getElementById("quality-tiles").replaceChildren(
    tile("matches scored", count(all.matches)),
    tile("wrong order", pct(all.wrong_order)),
    tile("wrong order, last 500", pct(last.wrong_order)),
    tile("log-loss", num(all.log_loss)),
    tile("Brier", num(all.brier)));
  const stretches = last.over_time;
  chart("chart-quality", "quality", {
    series: [{}, line("wrong order, % (last 500 matches, oldest first)", RED), line("log-loss", ORANGE)],
    scales: { x: { time: false }, y: fromZero },
    axes: [{ label: "stretch" }, { size: 50 }],
  }, [stretches.map((_, i) => i + 1), stretches.map((s) => (s.wrong_order == null ? null : 100 * s.wrong_order)),
    stretches.map((s) => s.log_loss)]);
  const filled = all.calibration.filter((b) => b.count > 0);
  chart("chart-calibration", "calibration", {
    series: [{}, line("perfect", GREY, { dash: [4, 4], width: 1 }),
      line("observed", BLUE, { points: { show: true, size: 6 } })],
    scales: { x: { time: false, range: () => [0, 1] }, y: { range: () => [0, 1] } },
    axes: [{ label: "predicted" }, { size: 40 }],
  }, [filled.map((b) => b.mean_predicted), filled.map((b) => b.mean_predicted), filled.map((b) => b.observed)]);
}

// ---- player view ----------------------------------------------------------------------

async function refreshPlayer(ladder, player) {
  const data = await api(`/api/ladders/${encodeURIComponent(ladder)}/players/${encodeURIComponent(player)}`);
  const s = data.state;
  document.getElementById("back").href = ladderHref(ladder);
  document.getElementById("player-title").textContent = `${player} · ${ladder} (${data.model})`;
  document.getElementById("player-tiles").replaceChildren(
    tile("rating", num(s && s.rating)),
    tile("μ", num(s && s.mu)),
    tile("σ", s && s.sigma != null ? num(s.sigma) : "–"),
    tile("games", count(s && s.games)),
    tile("last played", epochDay(s && s.last_played)));

  // uPlot needs ascending x; partitions interleave, so commit order is not time order.
  const events = [...data.history].sort((a, b) => Date.parse(a.finished_at) - Date.parse(b.finished_at));
  const x = events.map((e) => Date.parse(e.finished_at) / 1000);
  const mu = events.map((e) => e.after.mu);
  const hasSigma = events.length > 0 && events[0].after.sigma != null;
  if (hasSigma) {
    const sigma = events.map((e) => e.after.sigma);
    chart("chart-history", "trueskill", {
      series: [{},
        line("μ + σ", "rgba(47,111,222,0.35)", { width: 1 }),
        line("μ", BLUE),
        line("μ − σ", "rgba(47,111,222,0.35)", { width: 1 }),
        line("rating", GREEN, { dash: [6, 4] })],
      bands: [{ series: [1, 3], fill: "rgba(47,111,222,0.15)" }],
      axes: [{}, { size: 55 }],
    }, [x, mu.map((m, i) => m + sigma[i]), mu, mu.map((m, i) => m - sigma[i]), events.map((e) => e.rating)]);
  } else {
    chart("chart-history", "elo", { series: [{}, line("rating", BLUE)], axes: [{}, { size: 55 }] }, [x, mu]);
  }

  document.querySelector("#matches tbody").replaceChildren(...data.history.slice(0, 25).map((e) => {
    const row = el("tr", { class: e.kind && e.kind !== "match" ? "" : "clickable", "data-match": e.match_id },
      el("td", { text: day(e.finished_at) }),
      el("td", { text: e.kind && e.kind !== "match" ? `${e.kind} ${e.match_id}` : e.match_id }),
      el("td", { class: "num", text: num(e.before.mu) }),
      el("td", { class: "num", text: num(e.after.mu) }),
      el("td", { class: e.delta >= 0 ? "up" : "down", text: signed(e.delta) }),
      el("td", { class: "num", text: num(e.rating) }),
      el("td", { class: shown(e) >= 0 ? "up" : "down", text: signed(shown(e)) }),
      el("td", { class: "num", text: count(e.games) }),
      el("td", { class: "expected", text: expectation(e.expected) }));
    if (!e.kind || e.kind === "match") row.addEventListener("click", () => explain(ladder, e.match_id));
    return row;
  }));
}

// What the read API expected of the team: {win, draw} for two teams, {ahead, rank} for more.
function expectation(expected) {
  if (!expected) return "–";
  if ("win" in expected) return `win ${pct(expected.win)}, draw ${pct(expected.draw)}`;
  return `ahead ${pct(expected.ahead)}, rank ${num(expected.rank)}`;
}

function besides(p) {
  const notes = [];
  if (p.idle) notes.push(`idle ${num(p.idle.seconds / 86400)} d: σ ${num(p.idle.sigma_stored)} → ${num(p.idle.sigma_as_of_match)}`);
  if (p.season_reset) notes.push(`season reset (${p.season_reset})`);
  for (const c of p.corrections || []) notes.push(`${c.voided_this_match ? "voided" : "re-rated"} by ${c.id}: ${c.reason}`);
  return notes.length ? notes.join("; ") : "–";
}

async function explain(ladder, matchId) {
  const answer = await api(`/api/ladders/${encodeURIComponent(ladder)}/matches/${encodeURIComponent(matchId)}`);
  document.getElementById("explanation-title").textContent = `match ${matchId}`;
  document.querySelector("#explanation tbody").replaceChildren(...answer.players.map((p) => el("tr", {},
    el("td", { text: p.player_id }),
    el("td", { text: p.actual.result ?? `rank ${p.actual.rank}` }),
    el("td", { text: p.found ? expectation(p.expected) : "event no longer kept" }),
    el("td", { class: "num", text: p.found ? num(p.before.mu) : "–" }),
    el("td", { class: "num", text: p.found ? num(p.after.mu) : "–" }),
    el("td", { class: p.found && p.delta >= 0 ? "up" : "down", text: p.found ? signed(p.delta) : "–" }),
    el("td", { text: p.found ? besides(p) : "–" }))));
  const card = document.getElementById("explanation-card");
  card.hidden = false;
  card.scrollIntoView();
}

// ---- routing --------------------------------------------------------------------------

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  return {
    ladder: parts[0] === "ladder" ? parts[1] : null,
    player: parts[0] === "ladder" && parts[2] === "player" ? parts[3] : null,
  };
}

async function firstLadderWithPlayers() {
  for (const ladder of state.ladders) {
    const board = await api(`/api/ladders/${encodeURIComponent(ladder.name)}/leaderboard?top=1`);
    if (board.rows.length) return ladder.name;
  }
  return state.ladders.length ? state.ladders[0].name : null;
}

async function refreshView() {
  const { ladder, player } = state.route;
  document.getElementById("ladder-view").hidden = Boolean(player);
  document.getElementById("player-view").hidden = !player;
  if (!ladder) return;
  try {
    if (player) await refreshPlayer(ladder, player);
    else await refreshLadder(ladder);
  } catch (error) {
    console.warn(error);
  }
}

async function onRoute() {
  state.route = parseRoute();
  if (!state.route.ladder) state.route.ladder = await firstLadderWithPlayers();
  drawTabs();
  await refreshView();
  if (state.route.player) document.getElementById("player-view").scrollIntoView();
}

async function main() {
  state.ladders = (await api("/api/ladders")).ladders;
  window.addEventListener("hashchange", onRoute);
  await Promise.all([refreshOps(), refreshFeed(), onRoute()]);
  setInterval(refreshOps, OPS_EVERY_MS);
  setInterval(refreshFeed, OPS_EVERY_MS);
  setInterval(refreshView, VIEW_EVERY_MS);
  document.body.dataset.loaded = "true";
}

main();
