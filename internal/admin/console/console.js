// The console: reads /api/sources and /api/dead-letters, replays a dead
// letter (after a confirmation) with the token kept for this tab only.
"use strict";
const token = document.getElementById("token");
token.value = sessionStorage.getItem("outbox-relay-token") || "";
token.addEventListener("input", () => sessionStorage.setItem("outbox-relay-token", token.value));
const msg = (text, error) => { const m = document.getElementById("msg"); m.textContent = text; m.className = error ? "error" : ""; };
const cell = (tr, text, cls) => { const td = tr.insertCell(); td.textContent = text; if (cls) td.className = cls; return td; };
const age = (s) => s < 1 ? "0s" : s < 120 ? Math.round(s) + "s" : Math.round(s / 60) + "m";

// chart draws values (oldest first) as a small SVG line, scaled to its
// largest value, which it shows in its title.
function chart(values) {
  const ns = "http://www.w3.org/2000/svg", w = 160, h = 32;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.classList.add("chart");
  const top = Math.max(...values, 0);
  const title = document.createElementNS(ns, "title");
  title.textContent = values.length ? "max " + top.toFixed(1) + ", now " + values[values.length - 1].toFixed(1) : "no samples yet";
  svg.append(title);
  if (values.length > 1) {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", values.map((v, i) =>
      (i * (w - 2) / (values.length - 1) + 1).toFixed(1) + "," + (h - 1 - (top ? v / top : 0) * (h - 2)).toFixed(1)).join(" "));
    svg.append(line);
  }
  return svg;
}

async function sources() {
  const r = await fetch("/api/sources");
  const out = await r.json();
  if (!r.ok) { msg(out.error, true); return; }
  const { sources: list, history, replicas } = out;
  const reps = document.querySelector("#replicas tbody");
  reps.replaceChildren();
  for (const r of replicas || []) {
    const tr = reps.insertRow();
    cell(tr, r.database);
    cell(tr, r.owner + (r.self ? " (this one)" : ""));
    cell(tr, age((Date.now() - Date.parse(r.since)) / 1000));
    cell(tr, r.holds);
    cell(tr, r.share);
  }
  const body = document.querySelector("#sources tbody");
  body.replaceChildren();
  for (const s of list) {
    const tr = body.insertRow();
    cell(tr, s.source);
    cell(tr, s.owner ? s.owner + (s.held ? "" : " (expired)") + " #" + s.term : "-");
    cell(tr, s.pending + (s.pending_stale ? " (stale, " + age(s.pending_age_seconds) + " old)" : ""));
    cell(tr, age(s.oldest_pending_seconds));
    cell(tr, s.events_per_second.toFixed(1));
    cell(tr, s.retrying);
    cell(tr, s.dead_letters);
    cell(tr, s.last_claim ? age((Date.now() - Date.parse(s.last_claim)) / 1000) + " ago" : "never");
    cell(tr, Object.entries(s.sinks || {}).map(([k, v]) => k + "=" + v).join(", "));
    const why = s.cause ? " (" + s.cause + ")" : "";
    cell(tr, s.stuck ? "stuck" + why + ": " + s.stuck
      : s.state && s.state !== "relaying" ? s.state + why + (s.reason ? ": " + s.reason : "") : "ok", s.stuck ? "stuck" : "");
    const h = (history || {})[s.source] || [];
    tr.insertCell().append(chart(h.map((p) => p.oldest_seconds)));
    tr.insertCell().append(chart(h.map((p) => p.events_per_second)));
  }
}

async function deadLetters() {
  const q = new URLSearchParams(new FormData(document.getElementById("filter")));
  for (const [k, v] of [...q]) if (!v) q.delete(k);
  const r = await fetch("/api/dead-letters?" + q);
  const list = await r.json();
  if (!r.ok) { msg(list.error, true); return; }
  const body = document.querySelector("#dead tbody");
  body.replaceChildren();
  for (const d of list) {
    const tr = body.insertRow();
    tr.dataset.id = d.id;
    cell(tr, new Date(d.last_failed_at).toLocaleString());
    cell(tr, d.source);
    cell(tr, d.original_event_id);
    cell(tr, d.event_type);
    cell(tr, d.reason, "reason");
    cell(tr, d.failure_count);
    const b = document.createElement("button");
    b.textContent = "Replay";
    b.className = "replay";
    b.addEventListener("click", () => change(d, "replay"));
    const p = document.createElement("button");
    p.textContent = "Purge";
    p.className = "purge";
    p.addEventListener("click", () => change(d, "purge"));
    tr.insertCell().append(b, " ", p);
  }
}

async function change(d, what) {
  const ask = what === "replay"
    ? "Replay event " + d.original_event_id + " of " + d.source + "? It goes back to its table's pending set."
    : "Purge the dead letter of event " + d.original_event_id + " of " + d.source + "? Its record is deleted (the purge is audited).";
  if (!confirm(ask)) return;
  const r = await fetch("/api/dead-letters/" + what, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token.value },
    body: JSON.stringify({ ids: [d.id] }),
  });
  const out = await r.json();
  if (!r.ok) { msg(out.error, true); return; }
  msg(what === "replay" ? "replayed " + out.replayed + " dead letter(s)" : "purged " + out.purged + " dead letter(s)");
  await refresh();
}

async function refresh() {
  try { await Promise.all([sources(), deadLetters()]); } catch (e) { msg(String(e), true); }
}
document.getElementById("filter").addEventListener("submit", (e) => { e.preventDefault(); refresh(); });
refresh();
setInterval(() => sources().catch((e) => msg(String(e), true)), 5000);
