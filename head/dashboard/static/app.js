// MegaFlow dashboard: reads the head's JSON API and re-renders when
// /api/events reports a new applied index (or every 2 s without it).
// No framework, no build step. Wire messages come as protojson: enum
// names, 64-bit integers as strings, zero fields omitted.
"use strict";

const STATES = ["succeeded", "failed", "timed_out", "cancelled", "running", "assigned", "queued", "pending"];
const $ = (sel) => document.querySelector(sel);
const num = (v) => (v === undefined || v === null || v === "" ? 0 : Number(v));
const lower = (s, prefix) => (s || "").replace(prefix, "").toLowerCase();

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "width") e.style.width = v; // CSSOM: allowed by the page's CSP, unlike style=""
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// put replaces node's children, skipping null ones.
function put(node, ...children) {
  node.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
}

function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: cols, class: "muted", text: empty }))]));
}

function fmtDur(s) {
  if (!isFinite(s) || s < 0) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}
function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}
const nanosToSec = (n) => num(n) / 1e9;
const ago = (n) => (num(n) ? fmtDur(Date.now() / 1000 - nanosToSec(n)) + " ago" : "–");

// codeTag labels a reason with its code (wire ReasonCode, e.g.
// "REASON_CODE_OOM" shown as "oom"); null for none: protojson omits
// UNSPECIFIED, which rows recorded before the codes carry.
function codeTag(code) {
  if (!code || code === "REASON_CODE_UNSPECIFIED") return null;
  return el("span", { class: "code", "data-code": code, title: code, text: lower(code, "REASON_CODE_") });
}

// causes counts the codes of the tasks that did not succeed: "oom 2 · exit_code 1".
function causes(tasks) {
  const n = {};
  for (const t of tasks) {
    const st = lower(t.state, "TASK_STATE_");
    if ((st === "failed" || st === "timed_out" || st === "cancelled") && t.reason_code) {
      const c = lower(t.reason_code, "REASON_CODE_");
      n[c] = (n[c] || 0) + 1;
    }
  }
  return Object.entries(n).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).map(([c, k]) => c + " " + k).join(" · ");
}

function badge(state) {
  return el("span", { class: "badge s-" + state, text: state.replace("_", " ") });
}

function bar(used, cap, label) {
  const pct = cap > 0 ? Math.min(100, (100 * used) / cap) : 0;
  return el("div", { class: "meter", title: label },
    el("div", { class: "fill" + (pct > 90 ? " hot" : ""), width: pct.toFixed(1) + "%" }),
    el("span", { text: label }));
}

// With ACLs on, the API needs an admin token: the page asks for it once
// (#token-form) and keeps it in this tab's session storage.
const tokenKey = "megaflow-token";

async function getJSON(path) {
  const headers = { Accept: "application/json" };
  const tok = sessionStorage.getItem(tokenKey);
  if (tok) headers.Authorization = "Bearer " + tok;
  const r = await fetch(path, { headers });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (r.status === 401) {
    $("#token-why").textContent = body.error || "this cluster needs an admin token";
    $("#token-form").classList.remove("hidden");
  }
  if (!r.ok) throw new Error(path + ": " + (body.error || r.status));
  $("#token-form").classList.add("hidden");
  return body;
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const v = $("#token-input").value.trim();
  if (v) sessionStorage.setItem(tokenKey, v);
  else sessionStorage.removeItem(tokenKey);
  $("#token-input").value = "";
  refresh();
});

function showMeta(meta, cluster) {
  const served = $("#served");
  const leader = meta.from_leader;
  served.replaceChildren(
    "served by ", el("b", { id: "served-head", text: meta.head_id || "?" }), " ",
    el("span", { class: "badge " + (leader ? "s-succeeded" : "s-pending"), text: leader ? "leader" : "follower" }),
    " · index ", el("b", { text: num(meta.index) }));
  const stale = $("#stale");
  if (!leader) {
    const lc = num(meta.last_contact_millis);
    const who = meta.leader_id ? "the leader is " + meta.leader_id : "no leader is known";
    const contact = lc < 0 ? "has never heard from a leader" : "last heard from the leader " + fmtDur(lc / 1000) + " ago";
    stale.replaceChildren("This head is a follower: it shows its own replica (applied index " + num(meta.index) + "), which " +
      contact + "; " + who + ". Writes and exact figures: ask the leader" +
      (meta.leader_http ? " (" : "."),
      ...(meta.leader_http ? [el("a", { id: "leader-link", href: meta.leader_http + location.pathname + location.hash, text: "its dashboard" }), ")."] : []));
    stale.classList.remove("hidden");
  } else stale.classList.add("hidden");
}

function renderCluster(c) {
  $("#acl-off").classList.toggle("hidden", !!c.acl_enabled);
  const kv = $("#raft");
  kv.replaceChildren(
    el("div", {}, el("span", { text: "leader" }), el("b", { id: "leader-id", text: c.leader_id || "none" })),
    el("div", {}, el("span", { text: "term" }), el("b", { text: num(c.term) })),
    el("div", {}, el("span", { text: "commit" }), el("b", { text: num(c.commit_index) })),
    el("div", {}, el("span", { text: "applied" }), el("b", { text: num(c.applied_index) })),
    el("div", {}, el("span", { text: "snapshot" }), el("b", { text: num(c.last_snapshot_index) })));
  const rows = (c.heads || []).map((h) =>
    el("tr", { "data-head": h.id, class: h.leader ? "leader" : "" },
      el("td", {}, el("b", { text: h.id }), h.leader ? el("span", { class: "star", title: "leader", text: " ★" }) : null),
      el("td", {}, badge(h.leader ? "leader" : h.suffrage || "voter")),
      el("td", {}, badge(h.status === "alive" ? "alive" : h.status || "unknown")),
      el("td", { class: "mono", text: h.raft_addr || "" }),
      el("td", { class: "mono", text: h.grpc_addr || "" })));
  fill($("#heads tbody"), rows, "no heads", 5);
}

function renderQueues(q) {
  const rows = (q.queues || []).map((r) =>
    el("tr", { "data-queue": r.name },
      el("td", {}, el("b", { text: r.name })),
      el("td", { class: "num", text: r.pending }),
      el("td", { class: "num" + (r.queued > 100 ? " warn" : ""), text: r.queued }),
      el("td", { class: "num", text: r.assigned }),
      el("td", { class: "num", text: r.running }),
      el("td", { class: "num", text: r.queued ? fmtDur(r.oldest_wait_seconds) : "–" })));
  fill($("#queues tbody"), rows, "no queues", 6);
}

function renderWorkers(ws) {
  let alive = 0;
  const rows = (ws.workers || []).map(({ worker: w, connected }) => {
    const info = w.info || {}, cap = info.capacity || {}, al = w.allocated || {};
    const status = lower(w.status, "WORKER_STATUS_");
    if (status === "alive") alive++;
    const cpuCap = num(cap.cpu_millis) / 1000, cpuUse = num(al.cpu_millis) / 1000;
    const memCap = num(cap.memory_bytes), memUse = num(al.memory_bytes);
    const gpus = num(cap.gpus);
    return el("tr", { "data-worker": info.id },
      el("td", {}, el("b", { text: info.id })),
      el("td", { title: w.reason || "" }, badge(status), w.reason ? el("div", { class: "muted small", text: w.reason }) : null),
      el("td", { text: info.runtime || "" }),
      el("td", {}, bar(cpuUse, cpuCap, cpuUse.toFixed(1) + " / " + cpuCap.toFixed(1) + " cores")),
      el("td", {}, bar(memUse, memCap, fmtBytes(memUse) + " / " + fmtBytes(memCap))),
      el("td", {}, gpus ? bar(num(al.gpus), gpus, num(al.gpus) + " / " + gpus) : el("span", { class: "muted", text: "none" })),
      el("td", { class: "num", text: num(w.active_attempts) }),
      el("td", {}, connected === undefined ? el("span", { class: "muted", text: "(leader knows)" }) :
        badge(connected ? "connected" : "disconnected")));
  });
  $("#workers-sum").textContent = "· " + alive + " alive of " + rows.length;
  fill($("#workers tbody"), rows, "no workers have registered", 8);
}

function progress(counts, total) {
  const wrap = el("div", { class: "progress", title: STATES.map((s) => s + " " + num(counts[s])).join(", ") });
  for (const s of STATES) {
    const n = num(counts[s]);
    if (!n || !total) continue;
    wrap.append(el("div", { class: "seg s-" + s, width: ((100 * n) / total).toFixed(2) + "%" }));
  }
  return wrap;
}

function graphRow(g) {
  const counts = g.counts || {}, total = num(g.task_count), m = g.metrics || {};
  const done = num(counts.succeeded) + num(counts.failed) + num(counts.timed_out) + num(counts.cancelled);
  const state = lower(g.state, "GRAPH_STATE_");
  return el("tr", { "data-graph": g.id, class: "click" + (route.graph === g.id ? " selected" : ""), onclick: () => go("#/graph/" + encodeURIComponent(g.id)) },
    el("td", {}, el("b", { text: g.id }), g.name && g.name !== g.id ? el("div", { class: "muted small", text: g.name }) : null),
    el("td", { text: g.tenant || "" }),
    el("td", {}, badge(state)),
    el("td", {}, progress(counts, total)),
    el("td", { class: "num progress-text", text: done + " / " + total }),
    el("td", { class: "num", text: num(m.finished) ? (100 * num(m.success_rate)).toFixed(0) + "%" : "–" }),
    el("td", { class: "num", title: m.field || "reward", text: num(m.count) ? num(m.mean).toFixed(3) + " " + (m.field || "") : "–" }),
    el("td", { class: "muted", text: ago(g.create_unix_nanos) }));
}

function renderGraphs(gs) {
  fill($("#graphs tbody"), (gs.graphs || []).map(graphRow), "no graphs yet: submit one with `megaflow submit`", 8);
  $("#graphs-sum").textContent = gs.total > (gs.graphs || []).length ? "· newest " + gs.graphs.length + " of " + gs.total : "· " + gs.total;
}

// renderSandboxes lists the live sandboxes (/api/sandboxes): idle is as
// seen by this head's relay; "busy" while an exec or file call is in flight,
// "paused" while the sandbox is PAUSED (its idle timer stopped).
function renderSandboxes(ss) {
  const rows = (ss.sandboxes || []).map((r) => {
    const sb = r.sandbox || {};
    const state = lower(sb.state, "SANDBOX_STATE_");
    let idle = el("span", { class: "muted", text: "–" });
    if (state === "paused") idle = el("span", { class: "muted", text: "paused" });
    else if (r.busy > 0) idle = badge("busy");
    else if (r.idle_seconds !== undefined) idle = fmtDur(r.idle_seconds);
    return el("tr", { "data-sandbox": sb.id },
      el("td", {}, el("b", { text: sb.id })),
      el("td", { text: sb.tenant || "" }),
      el("td", { title: sb.reason || "" }, badge(state)),
      el("td", { text: sb.worker_id || "–" }),
      el("td", { class: "muted", text: sb.image || "" }),
      el("td", { class: "muted", text: fmtDur(r.age_seconds) }),
      el("td", { class: "idle" }, idle));
  });
  $("#sandboxes-sum").textContent = "· " + (ss.total || 0) + " live";
  fill($("#sandboxes tbody"), rows, "no live sandboxes: create one with `megaflow sandbox create`", 7);
}

function renderGraphDetail(d) {
  const g = d.graph;
  $("#graph-title").textContent = g.id;
  const m = g.metrics || {};
  put($("#graph-kv"),
    el("div", {}, el("span", { text: "state" }), badge(lower(g.state, "GRAPH_STATE_"))),
    el("div", {}, el("span", { text: "tasks" }), el("b", { text: num(g.task_count) })),
    el("div", {}, el("span", { text: "success" }), el("b", { text: num(m.finished) ? (100 * num(m.success_rate)).toFixed(1) + "%" : "–" })),
    el("div", {}, el("span", { text: "mean " + (m.field || "reward") }), el("b", { text: num(m.count) ? num(m.mean).toFixed(4) : "–" })),
    el("div", {}, el("span", { text: "min / max" }), el("b", { text: num(m.count) ? num(m.min).toFixed(3) + " / " + num(m.max).toFixed(3) : "–" })),
    el("div", {}, el("span", { text: "wall" }), el("b", { text: num(m.wall_millis) ? fmtDur(num(m.wall_millis) / 1000) : "–" })),
    g.reason ? el("div", {}, el("span", { text: "reason" }), el("b", { text: g.reason })) : null,
    causes(d.tasks || []) ? el("div", { class: "wide" }, el("span", { text: "causes" }), el("b", { id: "graph-causes", text: causes(d.tasks || []) })) : null);
  // Failed and unfinished tasks first: what an operator looks for.
  const order = { failed: 0, timed_out: 1, cancelled: 2, running: 3, assigned: 4, queued: 5, pending: 6, succeeded: 7 };
  const tasks = (d.tasks || []).slice().sort((a, b) => {
    const sa = order[lower(a.state, "TASK_STATE_")] ?? 9, sb = order[lower(b.state, "TASK_STATE_")] ?? 9;
    return sa - sb || a.id.localeCompare(b.id);
  });
  const rows = tasks.slice(0, 300).map((t) => {
    const st = lower(t.state, "TASK_STATE_"), atts = t.attempts || [], last = atts[atts.length - 1] || {};
    const reason = t.reason || last.reason || "", code = t.reason ? t.reason_code : last.reason_code;
    return el("tr", { "data-task": t.id, class: "click" + (route.task === t.id ? " selected" : ""), onclick: () => go("#/graph/" + encodeURIComponent(g.id) + "/task/" + encodeURIComponent(t.id)) },
      el("td", { class: "mono", text: t.id.slice(g.id.length + 1) }),
      el("td", {}, badge(st)),
      el("td", { class: "num", text: atts.length }),
      el("td", { text: last.worker_id || "" }),
      el("td", { class: "reason" + (st === "failed" || st === "timed_out" ? " bad" : "") }, codeTag(code), reason));
  });
  fill($("#tasks tbody"), rows, "no tasks", 5);
  $("#tasks-more").textContent = tasks.length > 300 || d.truncated ? "showing 300 of " + (d.truncated ? "more than " : "") + tasks.length + " tasks (failed first)" : "";
}

function renderTaskDetail(d) {
  const t = d.task, st = lower(t.state, "TASK_STATE_");
  $("#task-title").textContent = t.id;
  put($("#task-kv"),
    el("div", {}, el("span", { text: "state" }), badge(st)),
    el("div", {}, el("span", { text: "type" }), el("b", { text: (t.spec && t.spec.type) || "default" })),
    el("div", {}, el("span", { text: "retries used" }), el("b", { text: num(t.retries_used) + " / " + num(t.spec && t.spec.max_retries) })),
    el("div", {}, el("span", { text: "lost" }), el("b", { text: num(t.lost_count) })),
    t.reason ? el("div", { class: "wide" }, el("span", { text: "reason" }), el("b", { id: "task-reason", class: "bad", text: t.reason })) : null,
    t.reason_code ? el("div", {}, el("span", { text: "cause" }), el("b", { id: "task-reason-code", text: lower(t.reason_code, "REASON_CODE_") })) : null,
    t.result ? el("div", { class: "wide" }, el("span", { text: "result" }), el("code", { text: atobSafe(t.result) })) : null);
  const rows = (t.attempts || []).map((a) => {
    const as = nanosToSec(a.assign_unix_nanos), ss = nanosToSec(a.start_unix_nanos), fs = nanosToSec(a.finish_unix_nanos);
    const times = [as ? new Date(as * 1000).toLocaleTimeString() : "–",
      ss && as ? "+" + fmtDur(ss - as) : "–", fs && (ss || as) ? "+" + fmtDur(fs - (ss || as)) : "…"].join(" → ");
    const s = lower(a.state, "TASK_STATE_");
    return el("tr", { "data-attempt": a.number },
      el("td", { text: a.number }), el("td", { text: a.worker_id || "" }), el("td", {}, badge(s)),
      el("td", { class: "reason" + (s === "failed" || s === "timed_out" ? " bad" : "") }, codeTag(a.reason_code), a.reason || ""),
      el("td", { class: "num", text: a.exit_code ?? "" }), el("td", { class: "muted", text: times }));
  });
  fill($("#task-attempts tbody"), rows, "not placed yet", 6);
  const logs = $("#task-logs");
  logs.href = d.logs_url;
  $("#task-logs-note").textContent = "(" + d.logs_url + ")";
}

function atobSafe(b64) {
  try { return atob(b64); } catch { return b64; }
}

// Routing: #/graph/<id> and #/graph/<id>/task/<task id>.
let route = {};
function parseRoute() {
  const m = location.hash.match(/^#\/graph\/([^/]+)(?:\/task\/(.+))?$/);
  route = m ? { graph: decodeURIComponent(m[1]), task: m[2] ? decodeURIComponent(m[2]) : undefined } : {};
}
function go(hash) { location.hash = hash; }
window.addEventListener("hashchange", () => { parseRoute(); refresh(); });
$("#graph-close").addEventListener("click", (e) => { e.preventDefault(); go("#"); });
$("#task-close").addEventListener("click", (e) => { e.preventDefault(); go("#/graph/" + encodeURIComponent(route.graph)); });

$("#legend").replaceChildren(...STATES.map((s) => el("span", {}, el("i", { class: "s-" + s }), s.replace("_", " "))));

let busy = false, again = false;
async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  try {
    const [cluster, queues, workers, graphs, sandboxes] = await Promise.all([
      getJSON("/api/cluster"), getJSON("/api/queues"), getJSON("/api/workers"), getJSON("/api/graphs?limit=30"),
      getJSON("/api/sandboxes?limit=100")]);
    showMeta(graphs.meta || {}, cluster);
    renderCluster(cluster);
    renderQueues(queues);
    renderWorkers(workers);
    renderGraphs(graphs);
    renderSandboxes(sandboxes);
    const gd = $("#graph-detail"), td = $("#task-detail");
    if (route.graph) {
      renderGraphDetail(await getJSON("/api/graphs/" + encodeURIComponent(route.graph)));
      gd.classList.remove("hidden");
    } else gd.classList.add("hidden");
    if (route.task) {
      renderTaskDetail(await getJSON("/api/tasks/" + route.task.split("/").map(encodeURIComponent).join("/")));
      td.classList.remove("hidden");
    } else td.classList.add("hidden");
    $("#error").classList.add("hidden");
    document.body.dataset.loaded = "true";
  } catch (err) {
    const e = $("#error");
    e.textContent = "Could not read from this head: " + err.message + " (retrying)";
    e.classList.remove("hidden");
  } finally {
    busy = false;
    if (again) { again = false; setTimeout(refresh, 0); }
  }
}

// Live updates: server-sent events when the table changes; a 2 s poll as
// well, so the page also recovers when the stream is cut.
function connect() {
  const live = $("#live");
  const es = new EventSource("/api/events");
  es.addEventListener("index", () => { live.classList.remove("off"); refresh(); });
  es.onerror = () => { live.classList.add("off"); };
}
parseRoute();
refresh();
connect();
setInterval(refresh, 2000);
