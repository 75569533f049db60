// Portal's console: polls the console's JSON API once a second and redraws what changed.
// Everything the server sends is put in the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 1000;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });
}

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function showError(error) {
  const node = document.getElementById("error");
  node.textContent = error ? String(error.message || error) : "";
  node.hidden = !error;
}

function stateBadge(state) {
  return el("span", { class: `state state-${state}`, "data-state": state }, state);
}

// --- the jobs list ------------------------------------------------------------------------------

async function pollJobs() {
  try {
    const { jobs } = await getJson("/api/jobs");
    const body = document.querySelector("#jobs tbody");
    body.replaceChildren(
      ...jobs.map((job) =>
        el(
          "tr",
          { "data-job": job.job, "data-source": job.source },
          // Another tool's job (a bladekit run) has no run page here: its own tool shows it.
          el(
            "td",
            {},
            job.source === "portal"
              ? el("a", { href: `/jobs/${encodeURIComponent(job.job)}` }, job.job)
              : el("span", { title: `a ${job.source} run` }, job.job, ` (${job.source})`),
          ),
          el("td", {}, job.name || "-"),
          el("td", {}, stateBadge(job.state)),
          el("td", {}, job.attempts),
          el("td", { class: "mono" }, job.script),
          el("td", { "data-col": "submitted" }, job.submitted),
          el("td", { "data-col": "duration" }, job.duration || "-"),
        ),
      ),
    );
    document.getElementById("empty").hidden = jobs.length > 0;
    showError(null);
  } catch (error) {
    showError(error);
  }
  setTimeout(pollJobs, POLL_MS);
}

// --- a job's run page ---------------------------------------------------------------------------

const run = {
  job: decodeURIComponent(location.pathname.split("/").pop()),
  lastSeq: 0,
  logs: new Map(), // "attempt/stream" -> {offset, node}
  chartsSeq: -1, // the last event the charts were drawn with
  chartsAt: 0, // when they were drawn (a running job's strip grows with time)
};

const CHARTS_EVERY_MS = 5000;

function renderKeyElsewhere(line) {
  const node = document.getElementById("key-elsewhere");
  node.hidden = !line;
  node.textContent = line ? `The key is elsewhere: ${line}` : "";
}

// The charts are SVG drawn by the server (no chart library here). They are parsed as XML, never
// as HTML, and taken in only when they are an <svg> whole.
function svgNode(text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const root = doc.documentElement;
  if (root.nodeName !== "svg" || doc.getElementsByTagName("parsererror").length) return null;
  return document.importNode(root, true);
}

function renderCharts(charts) {
  const box = document.getElementById("charts");
  for (const chart of charts) {
    let figure = document.getElementById(`chart-${chart.id}`);
    if (!figure) {
      figure = el("figure", { id: `chart-${chart.id}`, "data-chart-figure": chart.id });
      figure.append(el("figcaption", {}, chart.title), el("p", { class: "chart-note" }));
      box.append(figure);
    }
    const old = figure.querySelector("svg");
    const drawn = chart.svg ? svgNode(chart.svg) : null;
    if (old) old.remove();
    if (drawn) figure.querySelector("figcaption").after(drawn);
    const note = figure.querySelector(".chart-note");
    note.textContent = chart.note || "";
    note.hidden = !chart.note;
  }
  document.body.dataset.charts = "drawn";
}

async function pollCharts(running) {
  const stale = running && Date.now() - run.chartsAt >= CHARTS_EVERY_MS;
  if (run.chartsSeq === run.lastSeq && !stale) return;
  const seq = run.lastSeq;
  const { charts } = await getJson(`/api/jobs/${encodeURIComponent(run.job)}/charts`);
  renderCharts(charts);
  run.chartsSeq = seq;
  run.chartsAt = Date.now();
}

function renderOverview(rows, status) {
  document.getElementById("overview").replaceChildren(
    ...rows.flatMap(([label, value]) => [
      el("dt", {}, label),
      el("dd", { "data-row": label }, label === "State" ? stateBadge(value) : value),
    ]),
  );
  const name = status.name ? ` (${status.name})` : "";
  document.getElementById("title").textContent = `${status.job}${name}: ${status.script}`;
  document.title = `Portal: ${status.name || status.job}`;
}

function renderBanner(banner) {
  const node = document.getElementById("banner");
  node.hidden = !banner;
  node.classList.toggle("blocked", Boolean(banner && banner.kind === "blocked"));
  document.getElementById("banner-text").textContent = banner ? banner.text : "";
}

function renderEvents(events) {
  const list = document.getElementById("timeline");
  for (const event of events) {
    if (event.seq <= run.lastSeq) continue;
    run.lastSeq = event.seq;
    const item = el("li", { "data-kind": event.kind }, el("span", { class: "at mono" }, clock(event.at)));
    if (event.decision) {
      item.append(
        el("span", { class: `decision decision-${event.decision}` }, `${event.decision} (checkpoint)`),
      );
    }
    item.append(el("span", { class: "kind" }, event.kind), event.message);
    list.append(item);
  }
}

function logNode(attempt, stream) {
  const key = `${attempt.number}/${stream}`;
  if (!run.logs.has(key)) {
    let box = document.getElementById(`attempt-${attempt.number}`);
    if (!box) {
      box = el("div", { class: "attempt", id: `attempt-${attempt.number}` });
      box.append(el("h3", {}, `attempt ${attempt.number} on ${attempt.machine}`));
      document.getElementById("logs").append(box);
    }
    const node = el("pre", { class: stream, "data-stream": stream });
    box.append(node);
    run.logs.set(key, { offset: 0, node, complete: false });
  }
  return run.logs.get(key);
}

async function pollLogs(attempts) {
  for (const attempt of attempts) {
    for (const stream of ["stdout", "stderr"]) {
      const log = logNode(attempt, stream);
      if (log.complete) continue; // an ended attempt read to its end: nothing more will come
      const query = `attempt=${attempt.number}&stream=${stream}&offset=${log.offset}`;
      const chunk = await getJson(`/api/jobs/${encodeURIComponent(run.job)}/logs?${query}`);
      if (chunk.note && !log.noted) {
        // Output a later attempt did again is left out (as `portal logs` does); say why once.
        log.noted = true;
        const box = document.getElementById(`attempt-${attempt.number}`);
        if (!box.querySelector(".log-note")) {
          box.querySelector("h3").after(el("p", { class: "log-note" }, chunk.note));
        }
      }
      if (chunk.text) {
        const follow = log.node.scrollTop + log.node.clientHeight >= log.node.scrollHeight - 4;
        log.node.append(chunk.text);
        if (follow) log.node.scrollTop = log.node.scrollHeight;
      }
      log.offset = chunk.next;
      log.complete = attempt.state !== "running" && !chunk.text;
    }
  }
}

async function pollRun() {
  try {
    const data = await getJson(`/api/jobs/${encodeURIComponent(run.job)}?after=${run.lastSeq}`);
    renderOverview(data.overview, data.status);
    renderBanner(data.banner);
    renderEvents(data.events);
    renderKeyElsewhere(data.key_elsewhere);
    await pollCharts(["running", "pausing"].includes(data.status.state));
    await pollLogs(data.status.attempts);
    document.body.dataset.state = data.status.state;
    document.body.dataset.updated = String(Date.now());
    showError(null);
  } catch (error) {
    showError(error);
  }
  setTimeout(pollRun, POLL_MS);
}

if (document.body.dataset.page === "jobs") pollJobs();
else pollRun();
