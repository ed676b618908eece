// raynb cluster dashboard: polls the JSON API every 2 s and redraws the tables, the
// selected run's metrics, plot and logs. Text from the cluster is only ever set as
// textContent (never parsed as HTML).
(() => {
  "use strict";
  const API = document.querySelector('meta[name="raynb-api"]').content;
  const XSRF = document.querySelector('meta[name="raynb-xsrf"]').content;
  const TOKEN = new URLSearchParams(location.search).get("token");
  const POLL_MS = 2000;
  const ACTIVE = ["PENDING", "RUNNING", "CANCELLING", "FAILING"];
  const AUTO = ["timestamp", "time_this_iter_s", "time_total_s", "training_iteration"];
  const ui = { selected: decodeURIComponent((location.hash.match(/^#run=(.+)$/) || [])[1] || "") || null,
               metric: null, rankOptions: "", toggled: new Map(), states: new Map() };
  const $ = (id) => document.getElementById(id);

  async function api(path, options = {}) {
    const headers = { "X-XSRFToken": XSRF, ...(options.headers || {}) };
    if (TOKEN) headers.Authorization = "token " + TOKEN;
    const r = await fetch(API + path, { credentials: "same-origin", ...options, headers });
    let body = {};
    try { body = await r.json(); } catch (e) { body = { message: r.status + " " + r.statusText }; }
    if (!r.ok) {
      const err = new Error(body.message || String(r.status));
      err.status = r.status;
      throw err;
    }
    return body;
  }

  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
    return node;
  }

  const fmtNum = (v) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : v == null ? "" : String(v));
  const fmtBytes = (n) => (typeof n === "number" ? (n >= 2 ** 30 ? (n / 2 ** 30).toFixed(1) + " GiB" : (n / 2 ** 20).toFixed(0) + " MiB") : "-");
  const fmtTime = (t) => (t ? new Date(t * 1000).toLocaleString() : "");
  function fmtDuration(s) {
    if (typeof s !== "number" || s < 0) return "";
    if (s < 60) return s.toFixed(1) + " s";
    const m = Math.floor(s / 60), h = Math.floor(m / 60);
    return h ? `${h} h ${m % 60} min` : `${m} min ${Math.floor(s % 60)} s`;
  }

  function banner(text) {
    $("banner").hidden = !text;
    $("banner").textContent = text || "";
  }

  function fill(tableId, rows) {
    const body = $(tableId).tBodies[0];
    body.replaceChildren(...rows);
  }

  function renderStatus(st) {
    $("head").textContent = `head ${st.address} (pid ${st.pid}), up ${fmtDuration(st.uptime_s)}, ` +
      `rejected messages: ${st.rejected_messages}`;
    fill("nodes", (st.nodes || []).map((n) => el("tr", {}, el("td", {}, n.node_id), el("td", {}, n.hostname),
      el("td", {}, n.ip), el("td", { class: "num" }, n.pid), el("td", { class: "num" }, n.num_workers),
      el("td", { class: "num" }, n.max_workers), el("td", {}, (n.gpus || []).length ? `${(n.gpus_in_use || []).length}/${n.gpus.length} in use` : "-"))));
    const workers = (st.workers || []).slice().sort((a, b) => String(a.worker_id).localeCompare(String(b.worker_id)));
    fill("workers", workers.map((w) => el("tr", {}, el("td", {}, w.worker_id), el("td", {}, w.node_id),
      el("td", { class: "num" }, w.pid), el("td", {}, w.state), el("td", {}, w.run || ""),
      el("td", { class: "num" }, w.rank == null ? "" : w.rank),
      el("td", { class: "num" }, typeof w.cpu_percent === "number" ? w.cpu_percent.toFixed(0) + "%" : "-"),
      el("td", { class: "num" }, fmtBytes(w.rss)))));
  }

  function shortMetrics(m) {
    return Object.entries(m || {}).filter(([k]) => !AUTO.includes(k)).slice(0, 4)
      .map(([k, v]) => `${k}=${fmtNum(v)}`).join("  ");
  }

  async function cancel(name, button) {
    if (!confirm(`Cancel run ${name} on every rank?`)) return;
    button.disabled = true;
    try { await api(`/runs/${encodeURIComponent(name)}/cancel`, { method: "POST" }); }
    catch (e) { banner(`cancel ${name}: ${e.message}`); button.disabled = false; }
  }

  function select(name) {
    ui.selected = name;
    ui.metric = null;
    ui.rankOptions = "";
    history.replaceState(null, "", "#run=" + encodeURIComponent(name));
    poll();
  }

  // A trial's state is the notebook's (trial_status: TERMINATED, ERROR, PAUSED...), its
  // run's state in the tooltip; a plain run's is its own.
  const shownState = (r) => r.trial_status || r.state;

  function runRow(r, now, cls) {
    const start = r.started || r.submitted;
    const end = r.ended || (ACTIVE.includes(r.state) ? now : null);
    const actions = el("td");
    if (ACTIVE.includes(r.state)) {
      const b = el("button", { class: "cancel", type: "button", title: "cancel this run on every rank" }, "Cancel");
      b.addEventListener("click", (ev) => { ev.stopPropagation(); cancel(r.name, b); });
      actions.append(b);
    }
    const state = shownState(r);
    return el("tr", { dataset: { run: r.name }, class: (cls + (r.name === ui.selected ? " selected" : "")).trim(), onclick: () => select(r.name) },
      el("td", {}, r.name), el("td", { class: "state " + state, title: "run state: " + r.state }, state),
      el("td", { class: "num" }, r.world_size),
      el("td", {}, fmtTime(start)), el("td", { class: "num" }, start && end ? fmtDuration(end - start) : ""),
      el("td", { class: "num" }, r.attempt || 0), el("td", { class: "num" }, r.num_reports || 0),
      el("td", { class: "muted" }, shortMetrics(r.metrics)), actions);
  }

  // One row per experiment, its trials under it: open while a trial runs or is selected,
  // else closed until clicked (ui.toggled keeps the user's choice per experiment).
  function experimentRow(g, open) {
    const counts = {};
    for (const t of g.trials) counts[shownState(t)] = (counts[shownState(t)] || 0) + 1;
    const text = Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(", ");
    const toggle = () => { ui.toggled.set(g.path, !open); poll(); };
    return el("tr", { class: "experiment", dataset: { experiment: g.name }, onclick: toggle },
      el("td", { colspan: "9" }, `${open ? "\u25be" : "\u25b8"} experiment ${g.name}`,
        el("span", { class: "muted" }, ` \u00b7 ${g.trials.length} trial${g.trials.length === 1 ? "" : "s"}: ${text}`)));
  }

  function renderRuns(runs) {
    const now = Date.now() / 1000;
    const items = [], groups = new Map();
    ui.states = new Map(runs.map((r) => [r.name, r]));
    for (const r of runs.slice().reverse()) {  // newest first; an experiment where its newest trial is
      if (!r.experiment_path) { items.push({ run: r }); continue; }
      let g = groups.get(r.experiment_path);
      if (!g) {
        g = { path: r.experiment_path, name: r.experiment, trials: [] };
        groups.set(g.path, g);
        items.push({ group: g });
      }
      g.trials.unshift(r);  // its trials in the order they were submitted
    }
    const rows = [];
    for (const it of items) {
      if (it.run) { rows.push(runRow(it.run, now, "")); continue; }
      const g = it.group;
      const busy = g.trials.some((t) => ACTIVE.includes(t.state) || t.name === ui.selected);
      const open = ui.toggled.has(g.path) ? ui.toggled.get(g.path) : busy;
      rows.push(experimentRow(g, open));
      if (open) rows.push(...g.trials.map((t) => runRow(t, now, "trial")));
    }
    fill("runs", rows);
    $("runs-empty").hidden = runs.length > 0;
  }

  function numericKeys(reports) {
    const keys = new Set();
    for (const row of reports) for (const [k, v] of Object.entries(row)) if (typeof v === "number" && !AUTO.includes(k)) keys.add(k);
    return [...keys];
  }

  function plot(reports, key) {
    const svg = $("plot"), W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), pad = 40;
    const ns = "http://www.w3.org/2000/svg";
    const pts = reports.map((r, i) => [r.training_iteration || i + 1, r[key]]).filter(([, y]) => typeof y === "number");
    svg.replaceChildren();
    const text = (x, y, s, anchor = "start") => {
      const t = document.createElementNS(ns, "text");
      t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "11");
      t.setAttribute("fill", "#666"); t.setAttribute("text-anchor", anchor); t.textContent = s;
      svg.append(t);
    };
    if (pts.length === 0) { text(W / 2, H / 2, "no reports yet", "middle"); return; }
    const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
    const [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    const sx = (x) => pad + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - 2 * pad);
    const sy = (y) => H - pad + -(y1 === y0 ? 0.5 : (y - y0) / (y1 - y0)) * (H - 2 * pad);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#1565c0"); line.setAttribute("stroke-width", "2");
    svg.append(line);
    text(pad, H - pad + 16, fmtNum(x0)); text(W - pad, H - pad + 16, fmtNum(x1), "end");
    text(4, sy(y1) + 4, fmtNum(y1)); text(4, sy(y0) + 4, fmtNum(y0));
    text(W / 2, H - 8, "training_iteration", "middle"); text(W / 2, 16, key, "middle");
  }

  function renderRun(rec) {
    $("run").hidden = false;
    $("run-name").textContent = rec.name;
    const listed = ui.states.get(rec.name);  // a trial: the notebook's status, as in the list
    const state = (listed && listed.trial_status && !ACTIVE.includes(rec.state)) ? listed.trial_status : rec.state;
    $("run-state").textContent = state;
    $("run-state").className = "state " + state;
    $("run-state").title = "run state: " + rec.state;
    $("run-path").textContent = rec.path + (rec.reports_dropped ? ` (plot: newest ${rec.reports.length} reports)` : "");
    const reports = rec.reports || [];
    const keys = numericKeys(reports);
    if (!ui.metric || !keys.includes(ui.metric)) ui.metric = keys.find((k) => /loss/i.test(k)) || keys[0] || null;
    const sel = $("metric");
    if (sel.dataset.keys !== keys.join("\n")) {
      sel.replaceChildren(...keys.map((k) => el("option", { value: k }, k)));
      sel.dataset.keys = keys.join("\n");
    }
    if (ui.metric) sel.value = ui.metric;
    plot(reports, ui.metric);
    const latest = reports.length ? reports[reports.length - 1] : rec.metrics || {};
    fill("latest", Object.entries(latest).filter(([k]) => k !== "timestamp")
      .map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "num" }, fmtNum(v)))));
    const failures = rec.failures || [];
    $("failures").replaceChildren(...(failures.length ? [el("h3", {}, `Failures (${rec.num_failures || failures.length})`),
      ...failures.slice(-5).map((f) => el("div", { class: "muted" }, f.message || JSON.stringify(f)))] : []));
    const ranks = [...Array(rec.world_size || 1).keys()].map(String).concat(["all"]).join(",");
    if (ui.rankOptions !== ranks) {
      const old = $("rank").value || "0";
      $("rank").replaceChildren(...ranks.split(",").map((r) => el("option", { value: r }, r === "all" ? "all ranks" : "rank " + r)));
      $("rank").value = ranks.split(",").includes(old) ? old : "0";
      ui.rankOptions = ranks;
    }
  }

  function renderLogs(logs) {
    const all = logs.rank === null;
    $("logs").replaceChildren(...logs.lines.map((l) => {
      const text = (all && l.rank !== null ? `(rank ${l.rank}) ` : "") + (l.stream === "stderr" ? "[stderr] " : "") + l.text + "\n";
      return l.stream === "stderr" ? el("span", { class: "stderr" }, text) : document.createTextNode(text);
    }));
    $("logs-note").textContent = (logs.lines.length ? "" : "no output. ") +
      (logs.more ? "Older lines: " : "Full output: ") + logs.file;
  }

  async function pollRun() {
    const name = ui.selected;
    try {
      const rec = await api(`/runs/${encodeURIComponent(name)}`);
      if (name !== ui.selected) return;
      renderRun(rec);
      const q = new URLSearchParams({ rank: $("rank").value || "0", stream: $("stream").value, lines: "500" });
      const logs = await api(`/runs/${encodeURIComponent(name)}/logs?${q}`);
      if (name === ui.selected) renderLogs(logs);
    } catch (e) {
      if (e.status === 404) { ui.selected = null; $("run").hidden = true; }
      banner(`run ${name}: ${e.message}`);
    }
  }

  // One poll at a time: a change of selection while one is in flight asks for another
  // right after it, instead of starting a second polling loop.
  let timer = null, running = false, again = false;
  async function poll() {
    if (running) { again = true; return; }
    running = true;
    clearTimeout(timer);
    try {
      const [st, runs] = await Promise.all([api("/status"), api("/runs")]);
      banner("");
      renderStatus(st);
      renderRuns(runs.runs || []);
    } catch (e) {
      banner(e.status === 403 ? "not logged in to Jupyter: open this page with the server's ?token=..." : e.message);
    }
    try {
      if (ui.selected) await pollRun();
    } finally {
      running = false;
      timer = setTimeout(poll, again ? 0 : POLL_MS);
      again = false;
    }
  }

  $("metric").addEventListener("change", (e) => { ui.metric = e.target.value; poll(); });
  $("rank").addEventListener("change", () => poll());
  $("stream").addEventListener("change", () => poll());
  poll();
})();
