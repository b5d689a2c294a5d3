// agentuq_nb trajectory explorer: one module for the JupyterLab widget (anywidget) and the standalone HTML export.
// render({model, el}): model.get("data") is the JSON of agentuq_nb.figures.explorer.explorer_data.

const NLL_SCALE = 4.0; // nats at which a token is fully red

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function colour(nll) {
  if (nll === null || nll === undefined) return "#e4e4e4";
  const t = Math.max(0, Math.min(1, nll / NLL_SCALE));
  return `rgb(255,${Math.round(255 - 160 * t)},${Math.round(255 - 255 * t)})`;
}

const fmt = (x, d = 3) => (x === null || x === undefined ? "n/a" : Number(x).toFixed(d));
const ROLE = { assistant: "agent", user: "user", tool: "tool", system: "system" };

// a per-message sparkline of one signal over the trajectory's messages (gaps where it is undefined)
// (points joined in message order; `only` keeps the messages a signal is about, e.g. the agent's)
function sparkline(messages, field, label, colourOf, only = () => true, width = 260, height = 34) {
  const pts = messages.map((m, i) => [i, m[field]]).filter(([i, v]) => v !== null && v !== undefined && only(messages[i]));
  const box = h("div", { class: "aq-spark", "data-signal": field });
  const values = pts.map(([, v]) => v);
  const lo = Math.min(0, ...values), hi = Math.max(1e-9, ...values);
  const n = Math.max(messages.length - 1, 1);
  const x = (i) => 4 + (i / n) * (width - 8);
  const y = (v) => height - 4 - ((v - lo) / (hi - lo || 1)) * (height - 8);
  const s = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  s.append(svg("line", { x1: 0, x2: width, y1: height - 4, y2: height - 4, stroke: "#ccc" }));
  let path = "";
  pts.forEach(([i, v], j) => { path += `${j ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)} `; });
  if (path) s.append(svg("path", { d: path, fill: "none", stroke: "#555", "stroke-width": 1.2 }));
  for (const [i, v] of pts) {
    const dot = svg("circle", { cx: x(i), cy: y(v), r: 2.6, fill: colourOf(messages[i]) });
    const tip = svg("title");
    tip.textContent = `message ${messages[i].idx} (${ROLE[messages[i].role] || messages[i].role}): ${fmt(v)}`;
    dot.append(tip);
    s.append(dot);
  }
  const last = values.length ? `max ${fmt(Math.max(...values), 2)}` : "none in this trajectory";
  box.append(h("span", { class: "aq-spark-label" }, label), s, h("span", { class: "aq-spark-note" }, last));
  return box;
}

function render({ model, el }) {
  const raw = model.get("data");
  const data = typeof raw === "string" ? JSON.parse(raw) : raw;
  const root = h("div", { class: "agentuq-explorer" });
  el.append(root);
  const tip = h("div", { class: "aq-tip", role: "tooltip", hidden: true });
  root.append(tip);

  const state = { outcome: "all", estimator: (data.estimators[0] || {}).name || "", min: "", max: "", current: null };
  const names = data.estimators.map((e) => e.name);

  const outcomeSel = h("select", { class: "aq-outcome", "aria-label": "outcome" },
    ...["all", "failure", "success"].map((o) => h("option", { value: o }, o === "all" ? "all outcomes" : o)));
  const estSel = h("select", { class: "aq-estimator", "aria-label": "estimator" },
    ...names.map((n) => h("option", { value: n }, n)));
  const minIn = h("input", { class: "aq-min", type: "number", step: "any", placeholder: "min" });
  const maxIn = h("input", { class: "aq-max", type: "number", step: "any", placeholder: "max" });
  const count = h("div", { class: "aq-count" });
  const list = h("ol", { class: "aq-list" });
  const main = h("div", { class: "aq-main" });
  root.append(h("div", { class: "aq-side" },
    h("div", { class: "aq-controls" },
      h("label", {}, "Outcome ", outcomeSel),
      h("label", {}, "Estimator ", estSel),
      h("div", { class: "aq-range" }, "value ", minIn, " to ", maxIn),
      count),
    list), main);

  function value(t) { return t.values[state.estimator]; }

  function refresh() {
    const lo = state.min === "" ? -Infinity : Number(state.min);
    const hi = state.max === "" ? Infinity : Number(state.max);
    const shown = data.trajectories.filter((t) =>
      (state.outcome === "all" || (state.outcome === "failure") === t.failed) &&
      (value(t) === null || value(t) === undefined ? lo === -Infinity && hi === Infinity : value(t) >= lo && value(t) <= hi));
    shown.sort((a, b) => (value(b) ?? -Infinity) - (value(a) ?? -Infinity));
    list.replaceChildren(...shown.map((t) => h("li", {
      class: `aq-item ${t.failed ? "aq-failed" : "aq-succeeded"}${state.current === t.key ? " aq-current" : ""}`,
      "data-key": t.key, onclick: () => show(t),
    }, h("span", { class: "aq-badge" }, t.failed ? "fail" : "ok"), ` task ${t.task_id} · trial ${t.trial} `,
      h("span", { class: "aq-value" }, fmt(value(t))))));
    count.textContent = `${shown.length} of ${data.trajectories.length} trajectories, by ${state.estimator || "—"} ` +
      "(highest first)";
    if (!state.current && shown.length) show(shown[0]);
  }

  function showTip(event, tok) {
    const [text, nll, alts] = tok;
    const rows = (alts || []).map(([alt, p]) => h("tr", { class: alt === text ? "aq-chosen" : null },
      h("td", { class: "aq-alt" }, JSON.stringify(alt)), h("td", {}, fmt(p)),
      h("td", {}, h("span", { class: "aq-bar", style: `width:${Math.round(60 * (p || 0))}px` }))));
    tip.replaceChildren(
      h("div", { class: "aq-tip-head" }, `${JSON.stringify(text)}  NLL ${fmt(nll)}  p ${nll === null ? "n/a" : fmt(Math.exp(-nll))}`),
      rows.length ? h("table", { class: "aq-alts" }, h("tr", {}, h("th", {}, "top-k alternative"), h("th", {}, "p"), h("th")), ...rows)
        : h("div", {}, "no alternatives recorded"));
    tip.hidden = false;
    const r = event.target.getBoundingClientRect(), host = root.getBoundingClientRect();
    tip.style.left = `${Math.max(0, r.left - host.left)}px`;
    tip.style.top = `${r.bottom - host.top + 4}px`;
  }

  function decisionBox(d) {
    return h("div", { class: "aq-decision", "data-decision": d.decision },
      h("div", { class: "aq-decision-head" },
        `decision ${d.decision}: K = ${d.k} resampled actions (${d.sampler}), ${d.clusters_n} clusters, ` +
        `agreement ${fmt(d.agreement, 2)}, semantic entropy ${fmt(d.entropy, 2)}`),
      ...d.clusters.map((c) => h("div", { class: `aq-cluster${c.taken ? " aq-taken" : ""}` },
        h("span", { class: "aq-cluster-size" }, `${c.size}/${d.k}`),
        h("span", { class: "aq-bar aq-cluster-bar", style: `width:${Math.round(80 * c.size / d.k)}px` }),
        c.taken ? h("b", {}, "taken ▸ ") : null, c.label,
        c.samples.length ? h("ul", { class: "aq-samples" }, ...c.samples.map((s) => h("li", {}, s))) : null)));
  }

  function show(t) {
    state.current = t.key;
    for (const li of list.children) li.classList.toggle("aq-current", li.dataset.key === t.key);
    const vals = data.estimators.filter((e) => t.values[e.name] !== null && t.values[e.name] !== undefined)
      .slice(0, 8).map((e) => h("span", { class: "aq-chip" }, `${e.name} ${fmt(t.values[e.name])}`));
    const byMessage = {};
    for (const d of t.decisions) (byMessage[d.message] = byMessage[d.message] || []).push(d);
    const roleColour = (m) => (m.role === "assistant" ? "#0072B2" : m.role === "user" ? "#CC79A7" : "#555");
    main.replaceChildren(
      h("div", { class: "aq-head" },
        h("h3", {}, `task ${t.task_id} · trial ${t.trial}`),
        h("span", { class: `aq-outcome-badge ${t.failed ? "aq-failed" : "aq-succeeded"}` },
          `${t.failed ? "failed" : "succeeded"}: reward ${fmt(t.reward, 2)}${t.termination ? `, ${t.termination}` : ""}`),
        h("div", { class: "aq-chips" }, ...vals)),
      h("div", { class: "aq-sparks" },
        sparkline(t.messages, "nll", `agent turn: mean token NLL${data.scorer ? ` (${data.scorer})` : ""}`, roleColour,
          (m) => m.role === "assistant"),
        sparkline(t.messages, "risk", "TRACER step risk (black-box; agent and user steps)", roleColour),
        sparkline(t.messages, "entropy", "action semantic entropy (K resamples)", roleColour)),
      h("div", { class: "aq-legend" }, `colour = token NLL (white 0 → red ≥ ${NLL_SCALE} nats); hover a token for the ` +
        "alternatives the model weighed"),
      ...t.messages.map((m) => h("div", { class: `aq-msg aq-${m.role}${m.error ? " aq-error" : ""}`, "data-idx": m.idx },
        h("div", { class: "aq-msg-head" }, `[${m.idx}] ${ROLE[m.role] || m.role}`,
          m.nll !== null ? h("span", { class: "aq-msg-note" }, ` mean NLL ${fmt(m.nll, 2)}`) : null,
          m.risk !== null ? h("span", { class: "aq-msg-note" }, ` · step risk ${fmt(m.risk, 2)}`) : null),
        m.tokens
          ? h("div", { class: "aq-tokens" }, ...m.tokens.map((tok) => h("span", {
            class: "aq-tok", style: `background:${colour(tok[1])}`,
            onmouseenter: (e) => showTip(e, tok), onmouseleave: () => { tip.hidden = true; },
          }, tok[0])))
          : h("div", { class: "aq-text" }, m.text || ""),
        m.calls.length && !m.tokens ? h("div", { class: "aq-calls" }, ...m.calls.map((c) => h("code", {}, c))) : null,
        ...(byMessage[m.idx] || []).map(decisionBox))));
  }

  outcomeSel.addEventListener("change", () => { state.outcome = outcomeSel.value; state.current = null; refresh(); });
  estSel.addEventListener("change", () => { state.estimator = estSel.value; refresh(); });
  minIn.addEventListener("input", () => { state.min = minIn.value; refresh(); });
  maxIn.addEventListener("input", () => { state.max = maxIn.value; refresh(); });
  if (!data.trajectories.length) main.append(h("p", {}, "This run holds no trajectory."));
  refresh();
}
