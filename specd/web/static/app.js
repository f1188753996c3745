// specd's status page: reads /api/*, listens to /api/events (server-sent events), acts through
// POST /api/action with the session's CSRF token. No framework, no CDN: this file is all of it.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const state = { unit: null, data: null, csrf: null, action: null, refreshTimer: null };

  // ---- small helpers -------------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    return node;
  }
  const fmtMs = (ms) => (ms === null || ms === undefined ? "–" : ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : Math.round(ms) + " ms");
  const fmtGiB = (b) => (b === null || b === undefined ? "–" : (b / 2 ** 30).toFixed(2) + " GiB");
  const fmtPct = (x) => (x === null || x === undefined ? "–" : Math.round(100 * x) + "%");
  function fmtTime(value) {
    if (value === null || value === undefined || value === "") return "–";
    const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
    return isNaN(date) ? String(value) : date.toLocaleString([], { dateStyle: "short", timeStyle: "medium" });
  }
  function replace(node, ...children) { node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined)); }
  function fact(label, value, cls) { return el("div", {}, el("dt", {}, label), el("dd", { class: cls }, value)); }
  // Routing's card line: on or off, the companions, and each class's profile (the reasons are in the timeline).
  function routingText(r) {
    if (!r) return "–";
    const routes = (r.routes || []).map((x) => x.class + " → " + x.profile).join(", ") || "no table yet";
    if (!r.on) return "off" + (r.routes && r.routes.length ? " (table: " + routes + ")" : "");
    const how = r.mode === "per-request" ? "one server, per-request draft settings" : "beside: " + r.residents.join(", ");
    return "on, " + how + "; " + routes;
  }

  async function getJson(path) {
    const response = await fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (!response.ok) throw new Error(path + ": " + response.status);
    return response.json();
  }
  const unitQuery = () => "unit=" + encodeURIComponent(state.unit || "");

  // ---- the deployment card -------------------------------------------------------------------------
  function current() { return state.data ? state.data.deployments.find((d) => d.unit === state.unit) : null; }

  function renderState() {
    const data = state.data;
    $("host").textContent = data.host;
    const daemon = data.daemon;
    $("daemon").textContent = daemon.running
      ? "daemon running since " + fmtTime(daemon.started_at) + " (pid " + daemon.pid + ")"
      : "daemon not running";
    const picker = $("unit");
    if (picker.options.length !== data.deployments.length) {
      replace(picker, data.deployments.map((d) => el("option", { value: d.unit }, d.unit)));
      $("unit-picker").hidden = data.deployments.length < 2;
    }
    picker.value = state.unit;
    const d = current();
    if (!d) return;
    $("unit-name").textContent = d.unit;
    $("active-profile").textContent = d.active_profile || "(none)";
    const pin = $("pin-badge");
    pin.hidden = !d.pin;
    if (d.pin) pin.textContent = "pinned to " + d.pin.profile;
    const gate = d.last_gate;
    const ttft = d.ttft_now || {};
    const monitor = d.monitor || {};
    replace($("facts"), [
      fact("unit state", d.unit_state || "–"),
      fact("health now", d.health || "–", d.healthy ? "ok" : "bad"),
      fact("last gate", gate ? "generation " + gate.id + ": " + gate.kind + " " + (gate.profile || "") + " → " + gate.outcome
        + (gate.health_s ? " (healthy after " + gate.health_s.toFixed(1) + " s)" : "") : "–",
        gate && gate.outcome === "ok" ? "ok" : gate && gate.outcome !== "pending" ? "bad" : ""),
      fact("TTFT now (15 min)", ttft.requests ? fmtMs(ttft.p50_ms) + " median, p95 " + fmtMs(ttft.p95_ms) + " (" + ttft.requests + " streams)" : "no streamed requests"),
      fact("monitor", monitor.checked_at ? (monitor.healthy ? "healthy" : "failing ×" + monitor.consecutive_failures)
        + " at " + fmtTime(monitor.checked_at) + (monitor.last_action ? "; last action: " + monitor.last_action : "") : "–",
        monitor.healthy === false ? "bad" : ""),
      fact("next tuning run", data.tuner.enabled ? fmtTime(daemon.next_tuning) : "tuner off"),
      fact("pin", d.pin ? d.pin.profile + " since " + fmtTime(d.pin.at) : "not pinned"),
      fact("by time of day", Object.entries(d.schedule || {}).map(([period, name]) => period + " " + name).join(", ")
        || "no time-of-day pins"),
      fact("routing", routingText(d.routing)),
      d.state ? fact("marked", d.state, "bad") : null,
    ]);
    // The options are rebuilt only when they change: a refresh while the user is choosing keeps the
    // list open and the choice made.
    const select = $("profile-select");
    const chosen = select.value;
    const options = d.profiles.map((p) => ({ value: p.name, disabled: Boolean(p.error),
      label: p.name + (p.name === d.active_profile ? " (active)" : "") + (p.error ? " (invalid)" : "") }));
    const shown = Array.from(select.options, (o) => ({ value: o.value, disabled: o.disabled, label: o.textContent }));
    if (JSON.stringify(options) !== JSON.stringify(shown)) {
      replace(select, options.map((o) => el("option", { value: o.value, disabled: o.disabled ? true : null }, o.label)));
      const fallback = d.profiles.find((p) => !p.error && p.name !== d.active_profile);
      select.value = chosen && d.profiles.some((p) => p.name === chosen) ? chosen : fallback ? fallback.name : d.active_profile || "";
    }
    const running = (data.running_actions || []).find((a) => a.unit === d.unit);
    for (const id of ["switch", "rollback", "bench"]) $(id).disabled = Boolean(running);
  }

  async function loadState() {
    state.data = await getJson("/api/state");
    if (!state.unit || !state.data.deployments.some((d) => d.unit === state.unit)) state.unit = state.data.deployments[0].unit;
    renderState();
  }

  // ---- the timeline --------------------------------------------------------------------------------
  function diffBlock(text) {
    const pre = el("pre");
    for (const line of text.split("\n")) {
      const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : null;
      pre.append(cls ? el("span", { class: cls }, line) : document.createTextNode(line + "\n"));
    }
    return pre;
  }
  function estimatesTable(estimates) {
    const rows = Object.entries(estimates || {}).map(([profile, v]) => el("tr", {}, el("td", {}, profile),
      el("td", { class: "num" }, fmtMs(v[0])), el("td", { class: "num" }, fmtMs(v[1]) + " – " + fmtMs(v[2])), el("td", { class: "num" }, v[3])));
    return el("table", {}, el("tr", {}, el("th", {}, "profile"), el("th", { class: "num" }, "median"), el("th", { class: "num" }, "95% CI"), el("th", { class: "num" }, "n")), rows);
  }
  const outcomeClass = { ok: "ok", reverted: "bad", failed: "bad", pending: "warn" };
  function timelineItem(entry) {
    const head = el("div", { class: "head" }, el("span", { class: "muted" }, fmtTime(entry.at)));
    const item = el("li", { class: "entry entry-" + entry.type, "data-kind": entry.kind });
    if (entry.type === "generation") {
      head.append(el("strong", {}, entry.kind), el("span", {}, entry.profile || "(unmanaged)"),
        el("span", { class: "badge " + (outcomeClass[entry.outcome] || "") }, entry.outcome),
        el("span", { class: "muted" }, "gen " + entry.id + " · by " + entry.trigger + (entry.total_s ? " · " + entry.total_s.toFixed(1) + " s" : "")));
      item.append(head);
      if (entry.detail) item.append(el("p", { class: "detail" }, entry.detail));
      if (entry.journal) item.append(el("details", { open: entry.kind === "auto-revert" }, el("summary", {}, "journal"), el("pre", {}, entry.journal)));
      if (entry.diff) item.append(el("details", {}, el("summary", {}, "unit diff against " + (entry.previous ? "generation " + entry.previous.id : "nothing")), diffBlock(entry.diff)));
    } else {
      head.append(el("strong", {}, entry.kind));
      item.append(head, el("p", { class: "detail" }, entry.detail));
      if (entry.numbers && entry.numbers.estimates) item.append(el("details", {}, el("summary", {}, "numbers"), el("div", { class: "scroll" }, estimatesTable(entry.numbers.estimates))));
    }
    return item;
  }
  async function loadTimeline() {
    const entries = await getJson("/api/timeline?" + unitQuery());
    replace($("timeline"), entries.length ? entries.map(timelineItem) : [el("li", { class: "muted" }, "nothing yet")]);
  }

  // ---- charts ------------------------------------------------------------------------------------------
  function barChart(values, labels, width, height) {
    const box = svg("svg", { viewBox: "0 0 " + width + " " + height, role: "img" });
    const max = Math.max(1, ...values);
    const step = width / Math.max(1, values.length);
    values.forEach((value, i) => {
      const h = (height - 14) * value / max;
      const rect = svg("rect", { class: "bar", x: i * step + 1, y: height - 14 - h, width: Math.max(1, step - 2), height: h });
      const title = svg("title", {});
      title.textContent = labels[i] + ": " + value;
      rect.append(title);
      box.append(rect);
    });
    box.append(svg("line", { class: "axis", x1: 0, y1: height - 14, x2: width, y2: height - 14 }));
    const first = svg("text", { x: 0, y: height - 2 }); first.textContent = labels[0] || "";
    const last = svg("text", { x: width, y: height - 2, "text-anchor": "end" }); last.textContent = labels[labels.length - 1] || "";
    box.append(first, last);
    return box;
  }
  function histogram(buckets) {
    let rows = buckets.slice();
    while (rows.length && rows[rows.length - 1].count === 0) rows.pop();
    if (!rows.length) return el("p", { class: "muted" }, "no requests");
    return barChart(rows.map((b) => b.count), rows.map((b) => b.hi === null ? b.lo + "+" : b.lo + "–" + (b.hi - 1)), 320, 110);
  }
  const PALETTE = ["#0969da", "#cf222e", "#1f883d", "#9a6700", "#8250df", "#bf3989"];
  function crossoverChart(cells) {
    const width = 640, height = 260, pad = 40;
    const points = cells.flatMap((c) => c.points);
    if (!points.length) return el("p", { class: "muted" }, "no samples");
    const xs = points.map((p) => p[0]);
    const minX = Math.min(...xs), maxX = Math.max(minX + 1, ...xs), maxY = Math.max(1, ...points.map((p) => p[1]));
    const single = minX === Math.max(...xs);  // one output length: no axis to spread over, centre it
    const x = (v) => single ? (pad + width) / 2 : pad + 10 + (width - pad - 30) * (v - minX) / (maxX - minX);
    const y = (v) => height - pad + 10 - (height - pad) * v / maxY;
    const box = svg("svg", { viewBox: "0 0 " + width + " " + height, role: "img" });
    box.append(svg("line", { class: "axis", x1: pad, y1: y(0), x2: width - 10, y2: y(0) }), svg("line", { class: "axis", x1: pad, y1: y(0), x2: pad, y2: 10 }));
    const xl = svg("text", { x: width - 10, y: height - 4, "text-anchor": "end" });
    xl.textContent = single ? "every request had " + minX + " output tokens: no crossover to see"
      : "output tokens " + minX + " – " + maxX;
    const yl = svg("text", { x: 2, y: 12 }); yl.textContent = "wall " + fmtMs(maxY);
    box.append(xl, yl);
    cells.forEach((cell, i) => {
      const color = PALETTE[i % PALETTE.length];
      const byX = new Map();
      for (const [px, py] of cell.points) {
        box.append(svg("circle", { cx: x(px), cy: y(py), r: 2.5, fill: color, opacity: 0.45 }));
        byX.set(px, (byX.get(px) || []).concat(py));
      }
      const line = [...byX.entries()].sort((a, b) => a[0] - b[0]).map(([px, ys]) => {
        const sorted = ys.sort((a, b) => a - b);
        return x(px) + "," + y(sorted[Math.floor(sorted.length / 2)]);
      });
      box.append(svg("polyline", { points: line.join(" "), fill: "none", stroke: color, "stroke-width": 2 }));
      const legend = svg("text", { x: pad + 8, y: 22 + 13 * i, fill: color }); legend.textContent = cell.profile;
      legend.style.fill = color;
      box.append(legend);
    });
    return box;
  }

  // ---- traffic, bench, GPUs ----------------------------------------------------------------------------
  async function loadTraffic() {
    const t = await getJson("/api/traffic?" + unitQuery() + "&hours=24");
    $("traffic-window").textContent = "last " + t.hours + " h: " + t.requests + " requests, " + t.failed + " failed, " + t.streamed + " streamed";
    const hours = t.requests_per_hour.map((_, i) => i === t.requests_per_hour.length - 1 ? "this hour" : (i - t.requests_per_hour.length + 1) + " h");
    replace($("per-hour"), barChart(t.requests_per_hour, hours, 320, 110));
    const mix = Object.entries(t.class_mix), total = mix.reduce((s, [, n]) => s + n, 0);
    replace($("class-mix"), mix.length ? mix.map(([name, n]) => el("div", { class: "mix" }, el("span", { class: "label" }, name),
      el("div", { class: "track" }, (() => { const f = el("div", { class: "fill" }); f.style.width = (100 * n / total) + "%"; return f; })()),
      el("span", { class: "num" }, Math.round(100 * n / total) + "%"))) : [el("p", { class: "muted" }, "no requests")]);
    replace($("prompt-hist"), histogram(t.prompt_tokens_hist));
    replace($("output-hist"), histogram(t.output_tokens_hist));
    replace($("per-profile"), el("tr", {}, ["profile", "requests", "TTFT p50", "TTFT p95", "draft acceptance", "decode tok/s"].map((h, i) => el("th", { class: i ? "num" : null }, h))),
      t.per_profile.map((p) => el("tr", {}, el("td", {}, p.profile), el("td", { class: "num" }, p.requests), el("td", { class: "num" }, fmtMs(p.ttft_p50_ms)),
        el("td", { class: "num" }, fmtMs(p.ttft_p95_ms)), el("td", { class: "num" }, fmtPct(p.acceptance)),
        el("td", { class: "num" }, p.decode_tok_s === null ? "–" : p.decode_tok_s.toFixed(1)))));
  }
  async function loadBench() {
    const b = await getJson("/api/bench?" + unitQuery());
    const decision = b.decision ? "Tuner (" + fmtTime(b.decision.at) + "): " + b.decision.reason : "The tuner has not decided yet.";
    if (!b.run) {
      $("bench-summary").textContent = "No bench has run on this deployment. " + decision;
      replace($("bench-table")); replace($("crossover")); replace($("crossovers"));
      return;
    }
    $("bench-summary").textContent = "Run " + b.run.id + " at " + fmtTime(b.run.at) + " on workload " + b.run.workload + " (" + b.run.elapsed_s.toFixed(0) + " s, medians over the " + b.run.compared_n + " requests every profile ran). " + decision;
    const maxHi = Math.max(1, ...b.cells.map((c) => c.ci_hi_ms));
    replace($("bench-table"), el("tr", {}, ["profile", "n", "median wall", "95% CI", "", ""].map((h, i) => el("th", { class: i && i < 4 ? "num" : null }, h))),
      b.cells.map((c) => {
        const bar = svg("svg", { viewBox: "0 0 200 12", width: 200, height: 12 });
        bar.append(svg("line", { x1: 200 * c.ci_lo_ms / maxHi, x2: 200 * c.ci_hi_ms / maxHi, y1: 6, y2: 6, stroke: "currentColor", "stroke-width": 2 }),
          svg("circle", { cx: 200 * c.median_ms / maxHi, cy: 6, r: 4, fill: "currentColor" }));
        return el("tr", {}, el("td", {}, c.profile), el("td", { class: "num" }, c.n), el("td", { class: "num" }, fmtMs(c.median_ms)),
          el("td", { class: "num" }, fmtMs(c.ci_lo_ms) + " – " + fmtMs(c.ci_hi_ms)), el("td", { class: c.best ? "ok" : "" }, bar),
          el("td", {}, c.best ? "fastest" : c.separated_from_best ? "slower (CIs separated)" : "CIs overlap the fastest"));
      }));
    replace($("crossover"), crossoverChart(b.cells));
    replace($("crossovers"), b.crossovers.map((s) => el("li", {}, s)));
  }
  async function loadGpu() {
    const g = await getJson("/api/gpu");
    $("gpu-summary").textContent = g.gpu || "No NVIDIA GPU: " + g.no_gpu;
    replace($("gpu-processes"), g.processes.length ? [el("tr", {}, ["GPU", "pid", "process", "unit", "VRAM"].map((h) => el("th", {}, h))),
      g.processes.map((p) => el("tr", {}, el("td", {}, p.device), el("td", {}, p.pid), el("td", {}, p.name), el("td", {}, p.unit || ""), el("td", { class: "num" }, fmtGiB(p.used_bytes))))] : []);
    replace($("gpu-estimates"), el("tr", {}, ["profile", "needs (estimate)", "available", "fits"].map((h) => el("th", {}, h))),
      g.estimates.map((e) => el("tr", {}, el("td", {}, e.profile), el("td", { class: "num", title: e.describe || e.note || "" }, e.needed_bytes === null ? (e.note || "–") : fmtGiB(e.needed_bytes)),
        el("td", { class: "num" }, e.available_bytes === undefined ? "no GPU" : fmtGiB(e.available_bytes)),
        el("td", { class: e.fits === false ? "bad" : e.fits ? "ok" : "" }, e.fits === null ? "–" : e.fits ? "yes" : "no"))));
  }

  // ---- refresh, live events --------------------------------------------------------------------------
  function report(error) { const m = $("action-message"); m.className = "message bad"; m.textContent = String(error.message || error); }
  function refresh(parts) {
    const work = { state: loadState, timeline: loadTimeline, traffic: loadTraffic, bench: loadBench, gpu: loadGpu };
    return Promise.all(parts.map((p) => work[p]().catch(report)));
  }
  function refreshSoon(parts) {
    clearTimeout(state.refreshTimer);
    state.refreshTimer = setTimeout(() => refresh(parts), 250);
  }
  function showAction(action) {
    const live = $("live");
    if (action.unit !== state.unit) return;
    if (!state.action || state.action.id !== action.id) {
      state.action = action;
      replace($("steps"));
    }
    live.hidden = false;
    $("live-title").textContent = action.kind + (action.profile ? " " + action.profile : "") + " — " + action.state;
    const m = $("action-message");
    if (action.state !== "running") {
      m.className = "message " + (action.state === "ok" ? "ok" : "bad");
      m.textContent = action.message;
      refresh(["state", "timeline", "bench"]);
    }
  }
  function listen() {
    const source = new EventSource("/api/events");
    source.addEventListener("action", (e) => showAction(JSON.parse(e.data)));
    source.addEventListener("step", (e) => {
      const step = JSON.parse(e.data);
      if (step.action === null && step.unit === state.unit) {  // a switch or rollback run from the command line
        const last = state.action && state.action.id === "cli" ? state.action.last : null;
        if (!last || step.step === "preflight" || (step.step === "intent" && last !== "preflight")) {
          state.action = { id: "cli", unit: step.unit };
          replace($("steps"));
          $("live").hidden = false;
          $("live-title").textContent = "from the command line";
        }
        state.action.last = step.step;
        if (step.step === "commit" || step.step === "revert-gate") refreshSoon(["state", "timeline"]);
      } else if (!state.action || step.action !== state.action.id) return;
      $("steps").append(el("li", { "data-step": step.step }, el("span", { class: "step" }, step.step), " ", el("span", {}, step.detail),
        " ", el("span", { class: "muted" }, new Date(step.at * 1000).toLocaleTimeString())));
    });
    for (const kind of ["generation", "history-event"]) source.addEventListener(kind, () => refreshSoon(["state", "timeline"]));
    source.addEventListener("health", () => refreshSoon(["state"]));
  }

  // ---- session and actions ------------------------------------------------------------------------------
  function showSession(authenticated) {
    $("login").hidden = authenticated;
    $("session").hidden = !authenticated;
    $("readonly-note").hidden = authenticated;
  }
  async function post(path, body) {
    const headers = { "Content-Type": "application/json" };
    if (state.csrf) headers["X-CSRF-Token"] = state.csrf;
    const response = await fetch(path, { method: "POST", headers, body: JSON.stringify(body), credentials: "same-origin" });
    const text = await response.text();
    let data;
    try { data = JSON.parse(text); } catch (_) { data = { error: response.status + " " + text.slice(0, 200) }; }
    if (!response.ok) throw new Error(data.error || response.status);
    return data;
  }
  async function login(token) {
    const data = await post("/api/login", { token });
    state.csrf = data.csrf;
    showSession(true);
  }
  async function act(kind) {
    const m = $("action-message");
    const profile = $("profile-select").value;
    m.className = "message";
    m.textContent = kind + "…";
    try {
      const data = await post("/api/action", { unit: state.unit, kind, profile: kind === "switch" || kind === "pin" ? profile : null });
      showAction(data.action);
      if (data.action.state === "running") m.textContent = kind + " started";
    } catch (error) { report(error); }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    for (const kind of ["switch", "rollback", "pin", "unpin", "bench"]) $(kind).addEventListener("click", () => act(kind));
    $("login").addEventListener("submit", (e) => {
      e.preventDefault();
      login($("token").value).then(() => { $("token").value = ""; $("action-message").textContent = ""; }).catch(report);
    });
    $("logout").addEventListener("click", () => post("/api/logout", {}).then(() => { state.csrf = null; showSession(false); }).catch(report));
    $("unit").addEventListener("change", (e) => { state.unit = e.target.value; refresh(["state", "timeline", "traffic", "bench"]); });
    listen();
    const fragment = new URLSearchParams(location.hash.slice(1));
    const session = getJson("/api/session").then((s) => { state.csrf = s.csrf; showSession(s.authenticated); });
    if (fragment.get("token")) {
      history.replaceState(null, "", location.pathname);
      await session.catch(report);
      await login(fragment.get("token")).catch(report);
    }
    await loadState().catch(report);
    document.body.dataset.loaded = "state";
    document.body.dataset.loadedMs = String(Math.round(performance.now()));
    await refresh(["timeline", "traffic", "bench", "gpu"]);
    document.body.dataset.loaded = "all";
    await session.catch(report);
  });
})();
