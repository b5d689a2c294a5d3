// agentuq_nb trajectory explorer: one module for the JupyterLab widget (anywidget) and the standalone HTML export.
// render({model, el}): model.get("data") is the JSON of agentuq_nb.figures.explorer.explorer_data.
// Every string of the data is put in the page as text (createTextNode, textContent), never parsed as HTML.

const NLL_SCALE = 4.0; // nats at which a token is fully red
const SPARK_W = 220, SPARK_H = 30;
const ROLE = { assistant: "agent", user: "user", tool: "tool", system: "system" };
const CHECK_NAMES = {
  DB: "database", ENV_ASSERTION: "environment assertion", ACTION: "expected action",
  COMMUNICATE: "communicate", NL_ASSERTION: "NL assertion",
  r_actions: "database (hash)", r_outputs: "outputs", // the original τ-bench's names
};

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
const roleColour = (m) => (m.role === "assistant" ? "#0072B2" : m.role === "user" ? "#CC79A7" : "#777");
const outcomeWord = (t) => (t.failed === null ? "no label" : t.failed ? "fail" : "ok");
const outcomeClass = (t) => (t.failed === null ? "aq-unlabelled" : t.failed ? "aq-failed" : "aq-succeeded");

// text with every case-insensitive occurrence of `query` wrapped in <mark>
function marked(text, query) {
  if (!query) return [text];
  const out = [], lower = text.toLowerCase();
  let at = 0, i;
  while ((i = lower.indexOf(query, at)) !== -1) {
    if (i > at) out.push(text.slice(at, i));
    out.push(h("mark", {}, text.slice(i, i + query.length)));
    at = i + query.length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

function render({ model, el }) {
  const raw = model.get("data");
  const data = typeof raw === "string" ? JSON.parse(raw) : raw;
  const multi = data.runs.length > 1;
  const byName = Object.fromEntries(data.estimators.map((e) => [e.name, e]));
  const byKey = Object.fromEntries(data.trajectories.map((t) => [t.key, t]));
  const runName = (i) => data.runs[i].name;
  const tokensText = (m) => (m.tokens ? m.tokens.map((t) => t[0]).join("") : m.text || "");
  // what a search looks through, per trajectory (lower case)
  const haystack = Object.fromEntries(data.trajectories.map((t) => [t.key, [
    `task ${t.task_id}`, runName(t.run), t.termination || "",
    ...t.messages.map((m) => [tokensText(m), m.tool || "", ...m.calls.map((c) => `${c.name} ${c.args}`)].join(" ")),
  ].join("\n").toLowerCase()]));

  const root = h("div", { class: "agentuq-explorer" });
  el.append(root);
  const tip = h("div", { class: "aq-tip", role: "tooltip", hidden: true });

  const state = {
    run: "all", outcome: "all", query: "", estimator: data.sort.estimator || (data.estimators[0] || {}).name || "",
    ascending: false, min: "", max: "", panes: [null, null],
  };

  // ------------------------------------------------------------------ the side: runs, filters, the list
  const runSel = h("select", { class: "aq-run", "aria-label": "run" }, h("option", { value: "all" }, "all runs"),
    ...data.runs.map((r, i) => h("option", { value: String(i) }, runLabel(i))));
  const outcomeSel = h("select", { class: "aq-outcome", "aria-label": "outcome" },
    ...[["all", "all outcomes"], ["failure", "failures"], ["success", "successes"]].map(([v, l]) => h("option", { value: v }, l)));
  const search = h("input", { class: "aq-search", type: "search", placeholder: "search task ids, messages, tools",
    "aria-label": "search" });
  const estSel = h("select", { class: "aq-estimator", "aria-label": "sort by estimator" });
  const families = [...new Set(data.estimators.map((e) => e.family))];
  for (const family of families) {
    estSel.append(h("optgroup", { label: family }, ...data.estimators.filter((e) => e.family === family)
      .map((e) => h("option", { value: e.name, title: e.description }, estimatorOption(e)))));
  }
  const dirBtn = h("button", { class: "aq-dir", type: "button", title: "sort direction" });
  const minIn = h("input", { class: "aq-min", type: "number", step: "any", placeholder: "min", "aria-label": "min" });
  const maxIn = h("input", { class: "aq-max", type: "number", step: "any", placeholder: "max", "aria-label": "max" });
  const estInfo = h("div", { class: "aq-est-info" });
  const count = h("div", { class: "aq-count" });
  const list = h("ol", { class: "aq-list" });
  const panes = h("div", { class: "aq-panes" });
  root.append(
    h("div", { class: "aq-side" },
      h("div", { class: "aq-runs" }, ...data.runs.map((r, i) => h("div", { class: "aq-run-line" }, runSummary(i),
        r.task_mismatch ? h("div", { class: "aq-warn aq-task-mismatch" }, r.task_mismatch.text) : null))),
      h("div", { class: "aq-controls" },
        multi ? h("label", {}, h("span", {}, "Run"), runSel) : null,
        h("label", {}, h("span", {}, "Outcome"), outcomeSel),
        h("label", {}, h("span", {}, "Search"), search),
        h("label", {}, h("span", {}, "Sort by"), estSel),
        h("label", {}, h("span", {}, "Order"), dirBtn),
        h("div", { class: "aq-range" }, h("span", {}, "values from"), minIn, h("span", {}, "to"), maxIn),
        estInfo, count),
      list),
    h("div", { class: "aq-main" }, panes), tip);

  function runLabel(i) {
    const r = data.runs[i];
    const what = [r.model, r.domain].filter((x) => x).join(", ");
    return `${multi ? String.fromCharCode(65 + (i % 26)) + ": " : ""}${r.name}${what ? ` (${what})` : ""}`;
  }

  function runSummary(i) {
    const r = data.runs[i];
    const labels = r.unlabelled ? `, ${r.unlabelled} without a label` : "";
    return `${runLabel(i)}: ${r.n} trajectories, ${r.failures} failure${r.failures === 1 ? "" : "s"}${labels}; ` +
      (r.has_tokens ? `token log-probs (${r.scorer})` : "no token log-probs: messages shown as text");
  }

  function aurocText(e) {
    const parts = e.auroc.map((a, i) => (multi ? `${String.fromCharCode(65 + (i % 26))} ` : "") + (a === null ? "n/a" : fmt(a, 2)));
    return `AUROC ${parts.join(" | ")}`;
  }

  function estimatorOption(e) {
    return `${e.name} · ${aurocText(e)}${e.in_sample ? " · IN-SAMPLE" : ""}`;
  }

  const est = () => byName[state.estimator];
  // a value oriented so that larger = more uncertain (a confidence is negated)
  function oriented(t) {
    const v = t.values[state.estimator];
    if (v === null || v === undefined) return null;
    return est() && est().higher_is_uncertain === false ? -v : v;
  }

  function matchesFilters(t) {
    if (state.run !== "all" && String(t.run) !== state.run) return false;
    if (state.outcome === "failure" && t.failed !== true) return false;
    if (state.outcome === "success" && t.failed !== false) return false;
    if (state.query && !haystack[t.key].includes(state.query)) return false;
    const v = t.values[state.estimator];
    const lo = state.min === "" ? -Infinity : Number(state.min), hi = state.max === "" ? Infinity : Number(state.max);
    if (v === null || v === undefined) return lo === -Infinity && hi === Infinity;
    return v >= lo && v <= hi;
  }

  function refresh() {
    const shown = data.trajectories.filter(matchesFilters);
    const sign = state.ascending ? -1 : 1;
    shown.sort((a, b) => {
      const va = oriented(a), vb = oriented(b);
      if (va === null && vb === null) return 0;
      if (va === null) return 1;
      if (vb === null) return -1;
      return sign * (vb - va);
    });
    list.replaceChildren(...shown.map((t) => h("li", {
      class: `aq-item ${outcomeClass(t)}${state.panes[0] === t.key ? " aq-current" : ""}`,
      "data-key": t.key, onclick: () => openTrajectory(t.key, 0),
    }, h("span", { class: "aq-badge" }, outcomeWord(t)),
      h("span", { class: "aq-item-name", title: `task ${t.task_id}` }, `${multi ? String.fromCharCode(65 + (t.run % 26)) + " · " : ""}` +
        `task ${t.task_id}${t.trial !== null ? ` · trial ${t.trial}` : ""}`),
      h("span", { class: "aq-value" }, fmt(t.values[state.estimator])))));
    dirBtn.textContent = state.ascending ? "▲ least uncertain first" : "▼ most uncertain first";
    const e = est();
    estInfo.replaceChildren(...(e ? [
      h("div", {}, h("b", {}, e.name), ` (${e.family}; ${e.higher_is_uncertain ? "higher = more uncertain" :
        "a confidence: lower = more uncertain"}) · ${aurocText(e)} on n = ${e.n.join(" | ")}`),
      e.in_sample ? h("div", { class: "aq-warn" }, "IN-SAMPLE: tuned on these same trajectories' labels; its AUROC is " +
        "optimistic by construction, not a result") : null,
      e.protocol && !e.in_sample ? h("div", {}, `fitted on labels: ${e.protocol}`) : null,
      e.description ? h("div", { class: "aq-desc" }, e.description) : null,
      e.name === data.sort.estimator ? h("div", { class: "aq-desc" }, `default sort: ${data.sort.why}`) : null,
    ].filter((x) => x) : []));
    count.textContent = `${shown.length} of ${data.trajectories.length} trajectories` +
      (state.query ? ` matching “${state.query}”` : "");
    if (!state.panes[0] && shown.length) openTrajectory(shown[0].key, 0);
  }

  // ------------------------------------------------------------------ one trajectory in a pane
  function openTrajectory(key, pane) {
    state.panes[pane] = key;
    if (state.panes[0] === state.panes[1]) state.panes[1] = null; // one trajectory is shown once
    if (pane === 0) {
      for (const li of list.children) li.classList.toggle("aq-current", li.dataset.key === key);
    }
    drawPanes();
  }

  function drawPanes() {
    const keys = state.panes.filter((k) => k);
    panes.classList.toggle("aq-split", keys.length > 1);
    panes.replaceChildren(...state.panes.map((k, i) => (k ? paneView(byKey[k], i) : null)).filter((x) => x));
    if (state.query) {
      for (const p of panes.querySelectorAll(".aq-pane")) {
        const hit = p.querySelector(".aq-hit");
        if (hit) hit.scrollIntoView({ block: "center" });
      }
    }
  }

  function sameTask(t) {
    return data.trajectories.filter((o) => o.key !== t.key && o.domain === t.domain && o.task_id === t.task_id);
  }

  function ranks(t) {
    // this trajectory's rank in its run for every estimator (1 = most uncertain)
    const out = {};
    const peers = data.trajectories.filter((o) => o.run === t.run);
    for (const e of data.estimators) {
      const v = t.values[e.name];
      if (v === null || v === undefined) continue;
      const s = e.higher_is_uncertain === false ? -1 : 1;
      const defined = peers.filter((o) => o.values[e.name] !== null && o.values[e.name] !== undefined);
      out[e.name] = [1 + defined.filter((o) => s * o.values[e.name] > s * v).length, defined.length];
    }
    return out;
  }

  function paneView(t, pane) {
    const node = h("div", { class: "aq-pane", "data-key": t.key });
    const others = sameTask(t);
    const opposite = others.find((o) => o.failed !== null && t.failed !== null && o.failed !== t.failed);
    const compare = h("select", { class: "aq-compare", "aria-label": "side by side with" },
      h("option", { value: "" }, others.length ? `side by side with… (${others.length} more of this task)` :
        "no other trajectory of this task"),
      ...others.map((o) => h("option", { value: o.key }, `${multi ? runLabel(o.run) + " · " : ""}` +
        `${o.trial !== null ? `trial ${o.trial}` : "trajectory"} · ${outcomeWord(o)} (reward ${fmt(o.reward, 2)})`)));
    compare.disabled = !others.length;
    compare.addEventListener("change", () => { if (compare.value) openTrajectory(compare.value, 1); });
    const rank = ranks(t);
    const r = rank[state.estimator];
    const head = h("div", { class: "aq-head" },
      h("div", { class: "aq-title" },
        h("h3", {}, `${multi ? runLabel(t.run) + " · " : ""}task ${t.task_id}${t.trial !== null ? ` · trial ${t.trial}` : ""}`),
        h("span", { class: `aq-outcome-badge ${outcomeClass(t)}` },
          `${t.failed === null ? "no label" : t.failed ? "failed" : "succeeded"}: reward ${fmt(t.reward, 2)}` +
          `${t.termination ? `, ${t.termination}` : ""}`),
        pane === 1 ? h("button", { class: "aq-close", type: "button", onclick: () => { state.panes[1] = null; drawPanes(); } },
          "close ✕") : null),
      h("div", { class: "aq-tools" },
        compare,
        opposite && pane === 0 ? h("button", { class: "aq-opposite", type: "button", onclick: () => openTrajectory(opposite.key, 1) },
          `⇆ beside a ${opposite.failed ? "failure" : "success"} of this task`) : null),
      h("div", { class: "aq-chips" },
        r ? h("span", { class: "aq-chip aq-chip-main" }, `${state.estimator} ${fmt(t.values[state.estimator])} · rank ` +
          `${r[0]} of ${r[1]} in its run (1 = most uncertain)`) : null,
        t.detector ? h("span", { class: "aq-chip aq-chip-detector" }, `detector: failure probability ${fmt(t.detector.p_failure, 2)}`) : null),
      allValues(t, rank));
    node.append(head);
    if (t.detector) node.append(detectorView(t.detector));
    if (t.monitors && t.monitors.length) node.append(monitorView(t.monitors));
    node.append(forensics(t));
    const signals = signalStrip(t, node);
    if (signals) node.append(signals);
    if (t.messages.some((m) => m.tokens)) {
      node.append(h("div", { class: "aq-legend" }, `colour = token NLL (white 0 → red ≥ ${NLL_SCALE} nats); hover a token ` +
        "for the alternatives the model weighed"));
    }
    const byMessage = {};
    for (const d of t.decisions) (byMessage[d.message] = byMessage[d.message] || []).push(d);
    node.append(h("div", { class: "aq-msgs" },
      ...t.messages.map((m, i) => messageView(m, i, byMessage[m.idx] || [], t, node))));
    if (!t.messages.length) node.append(h("p", {}, "No message of this trajectory is in its results file."));
    return node;
  }

  function allValues(t, rank) {
    const rows = data.estimators.filter((e) => t.values[e.name] !== null && t.values[e.name] !== undefined);
    const auroc = (e) => e.auroc[t.run];
    rows.sort((a, b) => (a.in_sample - b.in_sample) || ((auroc(b) ?? -1) - (auroc(a) ?? -1)));
    return h("details", { class: "aq-allvalues" },
      h("summary", {}, `all ${rows.length} estimator values of this trajectory, by AUROC on its run`),
      h("table", { class: "aq-table" },
        h("tr", {}, h("th", {}, "estimator"), h("th", {}, "value"), h("th", {}, "rank in run"), h("th", {}, "AUROC"),
          h("th", {}, "fitted on labels")),
        ...rows.map((e) => h("tr", { class: e.in_sample ? "aq-insample" : null },
          h("td", {}, h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); setEstimator(e.name); } }, e.name)),
          h("td", {}, fmt(t.values[e.name])), h("td", {}, rank[e.name] ? `${rank[e.name][0]} / ${rank[e.name][1]}` : ""),
          h("td", {}, fmt(auroc(e), 2)), h("td", {}, e.in_sample ? "IN-SAMPLE" : e.protocol || "—")))));
  }

  function monitorView(monitors) {
    return h("div", { class: "aq-monitors" },
      h("div", { class: "aq-section-head" }, `Monitors: what ${monitors.length === 1 ? "one" : monitors.length} ` +
        `monitor${monitors.length === 1 ? "" : "s"} said of this trajectory`),
      ...monitors.map((m) => h("div", { class: "aq-monitor" },
        h("div", {},
          h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); setEstimator(m.estimator); } }, m.estimator),
          m.verdict !== null ? h("span", { class: "aq-chip aq-chip-verdict" }, `verdict: ${m.verdict}`) : null,
          h("span", { class: "aq-chip" }, `score ${fmt(m.score)}`),
          m.cost_usd !== null ? h("span", { class: "aq-chip" }, `$${fmt(m.cost_usd, 4)}`) : null),
        m.justification ? h("p", { class: "aq-justification" }, m.justification) : null,
        m.source ? h("div", { class: "aq-detail" }, m.source) : null)));
  }

  function detectorView(d) {
    const top = d.contributions.slice(0, 12);
    const points = d.scale === "points";
    const size = (c) => Math.abs((points ? c.points : c.log_odds) || 0);
    const scale = Math.max(1e-9, ...top.map(size));
    const sign = (c) => ((points ? c.points : c.log_odds) || 0) > 0;
    const head = points && d.base !== null && d.base !== undefined
      ? `Learned detector: failure probability ${fmt(100 * d.p_failure, 1)} % = ${fmt(100 * d.base, 1)} % for an average training trajectory, plus the reasons below (percentage points; the ${top.length} largest, interpretable ones first)`
      : `Learned detector: failure probability ${fmt(d.p_failure, 2)}`;
    return h("div", { class: "aq-detector" },
      h("div", { class: "aq-section-head" }, head,
        h("span", { class: "aq-bar aq-pbar", style: `width:${Math.round(120 * (d.p_failure || 0))}px` })),
      top.length ? h("table", { class: "aq-table aq-contrib" },
        h("tr", {}, h("th", {}, "reason"), h("th", {}, points ? "points" : "contribution (log-odds)"),
          h("th", { class: "aq-diverge-head" }, h("span", {}, "← toward success"), h("span", {}, "toward failure →"))),
        ...top.map((c) => h("tr", { title: c.feature },
          h("td", {}, c.reason || c.feature),
          h("td", {}, points ? `${c.points > 0 ? "+" : ""}${fmt(c.points, 1)}` : fmt(c.log_odds)),
          h("td", { class: "aq-diverge" }, h("span", {
            class: `aq-bar ${sign(c) ? "aq-up" : "aq-down"}`,
            style: `width:${Math.round(80 * size(c) / scale)}px` }))))) : null);
  }

  // ------------------------------------------------------------------ why it got its reward
  // the made call beside an expected one: where it is, whether it errored, and only the arguments that differ
  function madeCell(x, goto) {
    const c = x.call;
    const same = !x.diff || !x.diff.length;
    return [goto(c.message, `[${c.message}]`), " ", h("code", { title: c.args },
      `${c.name}(${same ? "as expected" : "…"})`),
      c.errored ? h("span", { class: "aq-evchip aq-errchip" }, x.matched ? "errored: credited, but changed nothing" : "errored") : null,
      x.credited_elsewhere ? h("span", { class: "aq-detail" }, " (it counted for another expected call)") : null,
      same ? null : h("table", { class: "aq-argdiff" },
        h("tr", {}, h("th", {}, "argument"), h("th", {}, "expected"), h("th", {}, "made")),
        ...x.diff.map(([k, want, got]) => h("tr", {}, h("td", {}, k),
          h("td", { class: "aq-want" }, want === null ? "(absent)" : want),
          h("td", { class: "aq-got" }, got === null ? "(absent)" : got))))];
  }

  function forensics(t) {
    const failedChecks = t.checks.filter((c) => c.passed === false);
    const counted = failedChecks.filter((c) => c.counted !== false);
    const missed = t.expected.filter((x) => x.matched === false);
    const summary = [];
    if (t.breakdown) summary.push(t.breakdown.map(([k, v]) => `${CHECK_NAMES[k] || k} ${v >= 1 ? "✓" : "✗"}`).join(" × "));
    if (counted.length) summary.push(`${counted.length} failing check${counted.length > 1 ? "s" : ""} counted in the reward`);
    if (failedChecks.length > counted.length) summary.push(`${failedChecks.length - counted.length} failing, diagnostic only`);
    if (t.expected.length) summary.push(`${t.expected.length - missed.length} of ${t.expected.length} expected calls made`);
    if (!t.checks.length && !t.expected.length) summary.push("the results file records no checks for this trajectory");
    const unscored = !t.checks.length && t.notes.length;
    if (unscored) summary.unshift(t.notes[0]);
    const task = t.task ? data.tasks[t.task] : null;
    const made = Object.fromEntries((t.made || []).map((c) => [c.ci, c]));
    const unrequested = (t.unrequested || []).map((ci) => made[ci]).filter((c) => c);
    // the expected actions' checks are one row here, and each beside the call made in the table below
    const actions = t.checks.filter((c) => c.kind === "ACTION");
    const rows = t.checks.filter((c) => c.kind !== "ACTION" || !t.expected.length);
    if (actions.length && t.expected.length) {
      const met = actions.filter((c) => c.passed).length;
      rows.splice(rows.filter((c) => ["DB", "ENV_ASSERTION"].includes(c.kind)).length, 0, {
        kind: "ACTION", label: `${met} of ${actions.length} expected tool calls made (each below)`,
        passed: actions.some((c) => c.passed === null) ? null : met === actions.length, counted: actions[0].counted });
    }
    const goto = (idx, label) => h("a", { href: "#", class: "aq-goto", onclick: (ev) => {
      ev.preventDefault(); goTo(ev.target.closest(".aq-pane"), idx); } }, label);
    const v = t.verdict || { computed: false, text: "" };
    return h("details", { class: "aq-forensics", open: t.failed === true },
      h("summary", {}, h("b", {}, "Why this reward: "), summary.join("; ")),
      v.text ? h("div", { class: `aq-reward-verdict${v.computed ? "" : " aq-warn"}` },
        h("b", {}, "What decided the reward: "), v.text) : null,
      t.task_mismatch ? h("div", { class: "aq-warn aq-task-mismatch" }, `The file's task ${t.task_id} does not ` +
        "match the harness's checks (its expected actions differ from those the harness checked): the expected " +
        "calls below are the harness's, and the file's task is not shown (its instructions may be another task's).") : null,
      t.task_unverified ? h("div", { class: "aq-warn aq-task-mismatch" }, "The harness recorded no check to compare the " +
        `file's task ${t.task_id} with, and other tasks of this run do not match theirs: it is not shown.`) : null,
      t.divergence ? h("div", { class: "aq-divergence" }, h("b", {}, "First divergence from the expected actions: "),
        goto(t.divergence.message, `[${t.divergence.message}]`),
        `${t.divergence.turn !== t.divergence.message ? ` (turn ${t.divergence.turn})` : ""} ${t.divergence.what}`) : null,
      unrequested.length ? h("div", { class: "aq-unrequested-list" },
        h("b", {}, `Unrequested write${unrequested.length > 1 ? "s" : ""} (no expected action asked for ` +
          `${unrequested.length > 1 ? "them" : "it"}): `),
        ...unrequested.flatMap((c, i) => [i ? ", " : "", goto(c.message, `[${c.message}] ${c.name}`),
          c.errored ? " (errored: changed nothing)" : ""])) : null,
      t.notes.length ? h("div", { class: "aq-detail aq-notes" }, `the harness noted: ${t.notes.join("; ")}`) : null,
      rows.length ? h("table", { class: "aq-table aq-checks" },
        h("tr", {}, h("th", {}, ""), h("th", {}, "check"), h("th", {}, "what was checked"), h("th", {}, "in the reward")),
        ...rows.map((c) => h("tr", { class: c.passed === false ? "aq-check-failed" : c.passed ? "aq-check-passed" : null },
          h("td", { class: "aq-verdict" }, c.passed === null ? "?" : c.passed ? "✓" : "✗"),
          h("td", {}, CHECK_NAMES[c.kind] || c.kind),
          h("td", {}, c.label, c.detail && c.kind !== "ACTION" ? h("div", { class: "aq-detail" }, c.detail) : null),
          h("td", {}, c.counted === null ? "?" : c.counted ? "counted" : "diagnostic only")))) : null,
      t.expected.length ? h("div", { class: "aq-expected" },
        h("div", { class: "aq-section-head" }, `Expected tool calls (${t.expected_from === "harness" ?
          "as the harness checked them" : "the task's"}) beside the call that counted`),
        h("table", { class: "aq-table" },
          h("tr", {}, h("th", {}, ""), h("th", {}, "expected"), h("th", {}, "made: the call that counted, or the closest"),
            h("th", {}, "verdict by")),
          ...t.expected.map((x) => h("tr", { class: x.matched === false ? "aq-check-failed" : x.matched ? "aq-check-passed" : null,
            "data-expected": x.id },
            h("td", { class: "aq-verdict" }, x.matched === null ? "?" : x.matched ? "✓" : "✗"),
            h("td", {}, h("code", {}, `${x.name}(${x.arguments})`)),
            h("td", {}, x.call ? madeCell(x, goto) : h("span", { class: "aq-detail" }, `no call of ${x.name}`)),
            h("td", { class: "aq-detail" }, x.verdict_by))))) : null,
      task ? h("details", { class: "aq-task" },
        h("summary", {}, h("b", {}, "The task"), task.purpose ? h("span", { class: "aq-detail" }, ` (purpose: ${task.purpose})`) : null),
        ...task.instructions.map(([k, v]) => h("div", { class: "aq-task-field" }, h("b", {}, `${k.replace(/_/g, " ")}: `), v)),
        task.env_assertions.length ? h("div", { class: "aq-task-field" }, h("b", {}, "environment assertions: "),
          h("ul", {}, ...task.env_assertions.map((a) => h("li", {}, a)))) : null,
        task.nl_assertions.length ? h("div", { class: "aq-task-field" }, h("b", {}, "NL assertions: "),
          h("ul", {}, ...task.nl_assertions.map((a) => h("li", {}, a)))) : null,
        task.communicate_info.length ? h("div", { class: "aq-task-field" }, h("b", {}, "to communicate: "),
          task.communicate_info.join("; ")) : null) : null);
  }

  // ------------------------------------------------------------------ signals, message by message
  function signalStrip(t, paneNode) {
    const n = Math.max(t.messages.length - 1, 1);
    const x = (i) => 4 + (i / n) * (SPARK_W - 8);
    const cursors = [];
    const cells = [];
    // a mark of message m: its value on hover, a click goes to the message
    const point = (mark, m, text) => {
      const title = svg("title");
      title.textContent = text;
      mark.append(title);
      mark.setAttribute("class", "aq-dot");
      mark.addEventListener("click", () => goTo(paneNode, m.idx));
      return mark;
    };
    // the line that follows the message under the mouse
    const cursor = (height) => {
      const line = svg("line", { x1: -10, x2: -10, y1: 0, y2: height, stroke: "#E69F00", "stroke-width": 1.5 });
      cursors.push(line);
      return line;
    };
    for (const sig of data.signals) {
      const pts = t.messages.map((m, i) => [i, m.s[sig.field]])
        .filter(([i, v]) => v !== null && v !== undefined && (!sig.role || t.messages[i].role === sig.role));
      if (!pts.length) continue; // nothing of it in this trajectory: no empty chart
      const values = pts.map(([, v]) => v);
      const lo = Math.min(0, ...values), hi = Math.max(1e-9, ...values);
      const y = (v) => SPARK_H - 4 - ((v - lo) / (hi - lo || 1)) * (SPARK_H - 8);
      const s = svg("svg", { width: SPARK_W, height: SPARK_H, viewBox: `0 0 ${SPARK_W} ${SPARK_H}` });
      s.append(svg("line", { x1: 0, x2: SPARK_W, y1: SPARK_H - 4, y2: SPARK_H - 4, stroke: "#ccc" }));
      const path = pts.map(([i, v], j) => `${j ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      s.append(svg("path", { d: path, fill: "none", stroke: "#555", "stroke-width": 1.2 }));
      for (const [i, v] of pts) {
        const m = t.messages[i];
        s.append(point(svg("circle", { cx: x(i), cy: y(v), r: 2.6, fill: roleColour(m) }), m,
          `message ${m.idx} (${ROLE[m.role] || m.role}): ${fmt(v)}`));
      }
      s.append(cursor(SPARK_H));
      const top = pts.reduce((a, b) => (b[1] > a[1] ? b : a));
      cells.push(h("div", { class: "aq-spark", "data-signal": sig.field },
        h("span", { class: "aq-spark-label", title: sig.label }, sig.label), s,
        h("span", { class: "aq-spark-note" }, `max ${fmt(top[1], 2)} at [${t.messages[top[0]].idx}]`)));
    }
    const events = data.events.filter((ev) => t.messages.some((m) => m.ev.includes(ev.field)));
    if (events.length) {
      const rowH = 11;
      const height = rowH * events.length + 2;
      const s = svg("svg", { width: SPARK_W, height, viewBox: `0 0 ${SPARK_W} ${height}`, class: "aq-events-svg" });
      events.forEach((ev, r) => {
        s.append(svg("line", { x1: 0, x2: SPARK_W, y1: r * rowH + rowH / 2 + 1, y2: r * rowH + rowH / 2 + 1, stroke: "#eee" }));
        t.messages.forEach((m, i) => {
          if (!m.ev.includes(ev.field)) return;
          s.append(point(svg("rect", { x: x(i) - 2, y: r * rowH + 2, width: 4, height: rowH - 3,
            fill: ev.field === "tool_error" || ev.field === "repeated_call" ? "#D55E00" : "#555" }), m,
          `message ${m.idx}: ${ev.label}`));
        });
      });
      s.append(cursor(height));
      cells.push(h("div", { class: "aq-spark aq-events", "data-signal": "events" },
        h("span", { class: "aq-spark-label" }, "structure events"), s,
        h("span", { class: "aq-spark-note" }, events.map((ev) =>
          `${ev.label} ${t.messages.filter((m) => m.ev.includes(ev.field)).length}`).join(" · "))));
    }
    if (!cells.length) return null;
    const readout = h("div", { class: "aq-readout" }, "hover a message to read its signals here; click a point to go to its message");
    paneNode.aqCursor = (i) => {
      for (const c of cursors) { c.setAttribute("x1", x(i)); c.setAttribute("x2", x(i)); }
      readout.replaceChildren(...signalsOf(t.messages[i]));
    };
    return h("div", { class: "aq-signals" }, h("div", { class: "aq-sparks" }, ...cells), readout);
  }

  function signalsOf(m) {
    const parts = [h("b", {}, `[${m.idx}] ${ROLE[m.role] || m.role}${m.tool ? ` ${m.tool}` : ""}: `)];
    const named = data.signals.filter((s) => m.s[s.field] !== undefined && m.s[s.field] !== null)
      .map((s) => `${s.label} ${fmt(m.s[s.field], 2)}`);
    const fired = data.events.filter((ev) => m.ev.includes(ev.field)).map((ev) => ev.label);
    parts.push(named.length ? named.join(" · ") : "no per-message signal");
    if (fired.length) parts.push(h("span", { class: "aq-evchip" }, ` events: ${fired.join(", ")}`));
    if (m.error) parts.push(h("span", { class: "aq-evchip" }, " error"));
    return parts;
  }

  function goTo(paneNode, idx) {
    const msg = paneNode.querySelector(`.aq-msg[data-idx="${idx}"]`);
    if (!msg) return;
    msg.scrollIntoView({ block: "center" });
    msg.classList.add("aq-flash");
    setTimeout(() => msg.classList.remove("aq-flash"), 900);
  }

  // ------------------------------------------------------------------ messages
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
    const left = Math.min(r.left - host.left, host.width - tip.offsetWidth - 8);
    tip.style.left = `${Math.max(0, left)}px`;
    tip.style.top = `${r.bottom - host.top + 4}px`;
  }

  function body(m) {
    if (m.tokens) {
      return h("div", { class: "aq-tokens" }, ...m.tokens.map((tok) => h("span", {
        class: "aq-tok", style: `background:${colour(tok[1])}`,
        onmouseenter: (e) => showTip(e, tok), onmouseleave: () => { tip.hidden = true; },
      }, tok[0])));
    }
    return h("div", { class: m.json ? "aq-text aq-json" : "aq-text" }, ...marked(m.text || "", state.query),
      m.cut ? h("div", { class: "aq-detail" }, `… ${m.cut} more characters in the results file`) : null);
  }

  // the marks of a made call (by its index ci): the expected call it counted for, or is closest to; unrequested write
  function callMarks(t, ci) {
    const out = [];
    const c = (t.made || []).find((y) => y.ci === ci);
    const errored = Boolean(c && c.errored);
    for (const x of t.expected.filter((e) => e.call && e.call.ci === ci)) {
      const exact = !x.diff || !x.diff.length;
      out.push(h("span", { class: `aq-evchip ${x.matched && exact && !errored ? "aq-okchip" : "aq-errchip"}` },
        exact ? `expected call ${x.id} ${x.matched ? "✓" : "✗"}${errored ? " (credited, but it errored: changed nothing)" : ""}`
          : `closest to expected ${x.id} (differs in ${x.differs.join(", ")})`));
    }
    if ((t.unrequested || []).includes(ci)) {
      out.push(h("span", { class: "aq-evchip aq-unrequested" }, `unrequested write${errored ? " (errored: changed nothing)" : ""}`));
    }
    return out;
  }

  function messageView(m, position, decisions, t, paneNode) {
    const hit = Boolean(state.query) && ((m.text || "").toLowerCase().includes(state.query) ||
      tokensText(m).toLowerCase().includes(state.query) ||
      m.calls.some((c) => `${c.name} ${c.args}`.toLowerCase().includes(state.query)));
    const fired = data.events.filter((ev) => m.ev.includes(ev.field));
    const diverged = t.divergence && t.divergence.message === m.idx;
    const head = h("div", { class: "aq-msg-head" }, `[${m.idx}] ${ROLE[m.role] || m.role}`,
      diverged ? h("span", { class: "aq-evchip aq-divchip" }, `▸ first divergence: ${t.divergence.what}`) : null,
      m.action_ci !== null && m.action_ci !== undefined ? callMarks(t, m.action_ci) : null,
      m.nll !== null ? h("span", { class: "aq-msg-note" }, ` mean NLL ${fmt(m.nll, 2)}`) : null,
      m.s.tracer_step_risk !== undefined ? h("span", { class: "aq-msg-note" }, ` · step risk ${fmt(m.s.tracer_step_risk, 2)}`) : null,
      m.error ? h("span", { class: "aq-evchip aq-errchip" }, "error") : null,
      ...fired.map((ev) => h("span", { class: "aq-evchip" }, ev.label)));
    let content;
    if (m.role === "tool") {
      const preview = (m.tokens ? tokensText(m) : m.text || "").replace(/\s+/g, " ").slice(0, 140);
      content = h("details", { class: "aq-toolres", open: Boolean(m.error || hit) },
        h("summary", {}, h("b", {}, `${m.tool || "tool"} → `), h("span", { class: "aq-preview" }, preview || "(empty)")),
        body(m));
    } else {
      content = (m.tokens || m.text) ? body(m) : null;
    }
    const calls = m.calls.map((c) => h("div", { class: `aq-call${(t.unrequested || []).includes(c.ci) ? " aq-unrequested-call" : ""}`,
      "data-ci": c.ci },
      h("pre", {}, ...marked(`${c.requestor === "user" ? "(the user's tool) " : ""}${c.name}(${c.args})`, state.query)),
      ...callMarks(t, c.ci)));
    const node = h("div", {
      class: `aq-msg aq-${m.role}${m.error ? " aq-error" : ""}${hit ? " aq-hit" : ""}${diverged ? " aq-diverged" : ""}`,
      "data-idx": m.idx,
      onmouseenter: () => { if (paneNode.aqCursor) paneNode.aqCursor(position); },
    }, head, content, ...calls, ...decisions.map(decisionBox));
    return node;
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

  // ------------------------------------------------------------------ wiring
  function setEstimator(name) {
    state.estimator = name;
    estSel.value = name;
    refresh();
    drawPanes();
  }

  estSel.value = state.estimator;
  runSel.addEventListener("change", () => { state.run = runSel.value; refresh(); });
  outcomeSel.addEventListener("change", () => { state.outcome = outcomeSel.value; state.panes[0] = null; refresh(); });
  search.addEventListener("input", () => { state.query = search.value.trim().toLowerCase(); refresh(); drawPanes(); });
  estSel.addEventListener("change", () => setEstimator(estSel.value));
  dirBtn.addEventListener("click", () => { state.ascending = !state.ascending; refresh(); });
  minIn.addEventListener("input", () => { state.min = minIn.value; refresh(); });
  maxIn.addEventListener("input", () => { state.max = maxIn.value; refresh(); });
  if (!data.trajectories.length) panes.append(h("p", {}, "This run holds no trajectory."));
  refresh();
  // a link from the run's report (figures/report.py explorer_href): #trajectory=<key> opens that trajectory
  function openFromHash() {
    const found = /^#trajectory=(.+)$/.exec(globalThis.location ? globalThis.location.hash : "");
    let key = null;
    try { key = found ? decodeURIComponent(found[1]) : null; } catch (err) { key = null; }
    if (key && byKey[key]) openTrajectory(key, 0);
  }
  openFromHash();
  if (globalThis.addEventListener) globalThis.addEventListener("hashchange", openFromHash);
}
