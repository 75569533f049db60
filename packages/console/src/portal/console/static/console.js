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

// Times as every message of Portal writes them: UTC, labelled (the node, the control plane and
// the reader may be in three zones), with the date when it is not today's.
function clock(seconds) {
  const at = new Date(seconds * 1000);
  const iso = at.toISOString(); // 2026-12-05T21:09:18.000Z
  const day = iso.slice(0, 10);
  const time = `${iso.slice(11, 19)} UTC`;
  return day === new Date().toISOString().slice(0, 10) ? time : `${day} ${time}`;
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

// A row's cells, by column: what each shows of the job (as `portal jobs` shows it).
const JOB_COLUMNS = [
  ["job", (job) =>
    // Another tool's job (a bladekit run) has no run page here: its own tool shows it.
    job.source === "portal"
      ? el("a", { href: `/jobs/${encodeURIComponent(job.job)}` }, job.job)
      : el("span", { title: `a ${job.source} run` }, job.job, ` (${job.source})`)],
  ["name", (job) => job.name || "-"],
  ["state", (job) => stateBadge(job.state)],
  ["machine", (job) => job.machine || "-"],
  ["attempts", (job) => job.attempts_text],
  ["checkpoint", (job) => job.last_checkpoint_text],
  ["carry", (job) => job.carry || "-"],
  ["script", (job) => el("span", { class: "mono" }, job.script)],
  ["submitted", (job) => el("span", { title: job.submitted_at }, job.submitted)],
  ["duration", (job) => job.duration || "-"],
];

// Rows are kept and only the cells whose content changed are redrawn, so text a reader selects
// (a job id to copy) stays selected while the list follows the jobs.
function jobRow(body, job) {
  let row = body.querySelector(`tr[data-job="${CSS.escape(job.job)}"]`);
  if (!row) {
    row = el("tr", { "data-job": job.job, "data-source": job.source });
    for (const [col] of JOB_COLUMNS) row.append(el("td", { "data-col": col }));
  }
  JOB_COLUMNS.forEach(([, cell], index) => {
    const made = cell(job);
    const node = made instanceof Node ? made : document.createTextNode(String(made));
    const td = row.children[index];
    const html = node instanceof Element ? node.outerHTML : node.textContent;
    if (td.dataset.drawn !== html) {
      td.replaceChildren(node);
      td.dataset.drawn = html;
    }
  });
  return row;
}

async function pollJobs() {
  try {
    const { jobs } = await getJson("/api/jobs");
    const body = document.querySelector("#jobs tbody");
    const rows = jobs.map((job) => jobRow(body, job));
    rows.forEach((row, index) => {
      if (body.children[index] !== row) body.insertBefore(row, body.children[index] || null);
    });
    while (body.children.length > rows.length) body.lastElementChild.remove();
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
  node.dataset.kind = banner ? banner.kind : "";
  node.classList.toggle("blocked", Boolean(banner && ["blocked", "failed"].includes(banner.kind)));
  node.classList.toggle("next", Boolean(banner && banner.kind === "next"));
  node.querySelector("h2").textContent = banner ? banner.title : "";
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
    const node = el("pre", { class: stream, "data-stream": stream, "data-empty": "" });
    const line = el("span", { class: "line" }); // the line being written, redrawn in place
    node.append(line);
    box.append(node);
    run.logs.set(key, { offset: null, node, line, pending: "", complete: false });
  }
  return run.logs.get(key);
}

// A line as a terminal shows it: of the frames a progress bar redraws it with (each ended by a
// carriage return, as tqdm writes them), the last that showed anything.
function lastFrame(line) {
  const frames = line.replace(/\r+$/, "").split("\r").filter((frame) => frame);
  return frames.length ? frames[frames.length - 1] : "";
}

function appendLog(log, text) {
  log.node.removeAttribute("data-empty");
  const parts = (log.pending + text).split("\n");
  log.pending = parts.pop(); // the line not ended yet: shown, and redrawn as it grows
  // A bar that never ends its line (hours of frames) keeps only its last frame, not them all.
  const cut = log.pending.slice(0, -1).lastIndexOf("\r");
  if (cut > 0) log.pending = log.pending.slice(cut);
  if (parts.length) log.line.before(parts.map(lastFrame).join("\n") + "\n");
  log.line.textContent = lastFrame(log.pending);
}

// A log opens at its end (its last TAIL_BYTES, from a line's start): a long one shows its latest
// lines at once, and says how much came before (`portal logs` prints it all).
const TAIL_BYTES = 64 * 1024;

async function pollLogs(attempts) {
  for (const attempt of attempts) {
    for (const stream of ["stdout", "stderr"]) {
      const log = logNode(attempt, stream);
      if (log.complete) continue; // an ended attempt read to its end: nothing more will come
      const from = log.offset === null ? `tail=${TAIL_BYTES}` : `offset=${log.offset}`;
      const query = `attempt=${attempt.number}&stream=${stream}&${from}`;
      const chunk = await getJson(`/api/jobs/${encodeURIComponent(run.job)}/logs?${query}`);
      if (log.offset === null && chunk.start > 0) {
        const kb = Math.round(chunk.start / 1024);
        log.node.before(
          el("p", { class: "log-note", "data-earlier": chunk.start },
            `${kb} kB of earlier ${stream} not shown: \`portal logs ${run.job}\` prints it all`),
        );
      }
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
        appendLog(log, chunk.text);
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
