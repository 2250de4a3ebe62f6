// The planner page: Pyodide (served beside this file, from its npm package) runs the course's
// wheel, and page.py hands the command line's flags and its JSON plan to this script, which
// draws the form, the verdict, the device band and the breakdown. Nothing runs on a server.
import { loadPyodide } from "./pyodide/pyodide.mjs";

const GIB = 2 ** 30;
const AXIS = 1.5; // the bar's axis runs to 1.5x the card's memory, whatever the plan
const COLOURS = {
  weights: "#4c72b0", adapters: "#8172b3", optimizer_state: "#937860", gradients: "#da8bc3",
  activations: "#55a868", logits_and_loss: "#c44e52", transient: "#dd8452",
  gathered: "#64b5cd", held_outputs: "#ccb974", optimizer_step: "#8c8c8c",
  cublas_workspaces: "#b0b0b0", batch: "#d0d0d0", ddp_buckets: "#a1c9f4",
  reserve: "#e8e8e8", context: "#bdbdbd",
};
const state = { ready: false, last: null };
window.planner = state;
let page = null;

const $ = (id) => document.getElementById(id);
const gib = (bytes) => `${(bytes / GIB).toFixed(2)} GiB`;

async function start() {
  const manifest = await (await fetch("manifest.json")).json();
  const py = await loadPyodide({ indexURL: new URL("pyodide/", location.href).href });
  py.unpackArchive(await (await fetch(manifest.wheel)).arrayBuffer(), "wheel");
  py.FS.writeFile("/home/pyodide/page.py", await (await fetch("page.py")).text());
  py.runPython("import sys; sys.path.insert(0, '/home/pyodide')");
  page = py.pyimport("page");
  page.__py = py;
  buildForm(JSON.parse(page.form()));
  $("plan-button").disabled = false;
  $("plan-button").textContent = "Plan";
  state.ready = true;
  document.body.dataset.state = "ready";
}

function buildForm(spec) {
  for (const name of spec.models) $("model").append(new Option(name, name));
  for (const card of spec.cards) $("gpu").append(new Option(card, card));
  const box = $("flags");
  for (const f of spec.fields) {
    if (f.flag === "--model" || f.flag === "--gpu") continue; // in "The run" above
    const label = document.createElement("label");
    label.title = f.help;
    label.append(`${f.flag} `);
    let input;
    if (!f.value) {
      input = Object.assign(document.createElement("input"), { type: "checkbox" });
    } else if (f.choices) {
      input = document.createElement("select");
      input.append(new Option("", ""));
      for (const c of f.choices) input.append(new Option(c, c));
    } else {
      input = Object.assign(document.createElement("input"), { type: "text" });
      input.placeholder = f.metavar || "";
    }
    Object.assign(input, { name: f.flag, id: `flag${f.flag}` });
    input.dataset.flag = f.flag;
    label.append(input);
    box.append(label);
  }
}

function argv() {
  const file = $("config-file").files[0];
  const out = ["--model", file ? "/tmp/config.json" : $("model").value];
  if ($("gpu").value) out.push("--gpu", $("gpu").value);
  for (const input of $("flags").querySelectorAll("[data-flag]")) {
    if (input.type === "checkbox") {
      if (input.checked) out.push(input.dataset.flag);
    } else if (input.value.trim() !== "") {
      out.push(input.dataset.flag, input.value.trim());
    }
  }
  return out;
}

async function plan(event) {
  event.preventDefault();
  document.body.dataset.state = "busy";
  const file = $("config-file").files[0];
  if (file) page.__py.FS.writeFile("/tmp/config.json", await file.text());
  const args = argv();
  const ran = JSON.parse(page.plan(JSON.stringify(args)));
  const result = ran.stdout ? JSON.parse(ran.stdout) : null;
  state.last = { argv: args, status: ran.status, plan: result, stderr: ran.stderr };
  show(result, ran.stderr);
  document.body.dataset.state = "done";
}

function show(p, stderr) {
  $("errors").textContent = stderr || "";
  $("json").textContent = p ? JSON.stringify(p, null, 2) : "";
  $("verdict").textContent = "";
  $("numbers").replaceChildren();
  $("notes").replaceChildren();
  $("bar").replaceChildren();
  if (!p) return;
  const [low, high] = p.verdict_band;
  const words = { fits: "Fits", "may not fit": "May not fit (fits at the band's low end)",
    "does not fit": "Does not fit" }[p.verdict];
  $("verdict").textContent = `${words}: micro-batch ${p.verdict_micro_batch} needs ${gib(low)} ` +
    `to ${gib(high)} on the device; the card has ${gib(p.memory_budget)}.` +
    p.advice.map((a) => ` It fits with ${a.flag} (micro-batch ${a.micro_batch}).`).join("");
  $("verdict").dataset.verdict = p.verdict;
  drawBar(p);
  const rows = [
    ["largest micro-batch", `${p.max_micro_batch ?? "-"} at the band's top, ` +
      `${p.max_micro_batch_low ?? "-"} at its low end`],
    ["plan", p.micro_batch ? `micro-batch ${p.micro_batch} x ${p.grad_accum_steps} ` +
      `accumulation, checkpointing ${p.checkpointing}` : "nothing fits for sure"],
    ["tokens per step", p.tokens_per_step.toLocaleString("en")],
    ["allocated peak", gib(p.verdict_peak_bytes)],
    ["time per step", p.step_seconds ? `${p.step_seconds.toFixed(2)} s` : "-"],
    ["tokens per second", p.tokens_per_second ? Math.round(p.tokens_per_second).toLocaleString("en") : "-"],
  ];
  for (const [k, v] of rows) $("numbers").append(Object.assign(document.createElement("dt"), { textContent: k }),
    Object.assign(document.createElement("dd"), { textContent: v }));
  for (const n of [...p.warnings.map((w) => `warning: ${w}`), ...p.notes]) {
    $("notes").append(Object.assign(document.createElement("li"), { textContent: n }));
  }
}

function drawBar(p) {
  const svg = $("bar");
  const ns = "http://www.w3.org/2000/svg";
  const width = 800, left = 30, top = 20, height = 40;
  const axis = AXIS * p.memory_budget; // fixed by the card, not by the plan
  const x = (bytes) => left + (Math.min(bytes, axis) / axis) * width;
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el);
    return el;
  };
  const [ctxLow] = p.context_bytes_band;
  const [low, high] = p.verdict_band;
  const parts = [...Object.entries(p.verdict_components),
    ["reserve", low - p.verdict_peak_bytes - ctxLow], ["context", ctxLow]];
  let at = 0;
  for (const [name, bytes] of parts) {
    if (bytes <= 0) continue;
    add("rect", { x: x(at), y: top, width: Math.max(0, x(at + bytes) - x(at)), height,
      fill: COLOURS[name] || "#999", "data-part": name }).append(
      Object.assign(document.createElementNS(ns, "title"), { textContent: `${name}: ${gib(bytes)}` }));
    at += bytes;
  }
  add("rect", { x: x(low), y: top, width: Math.max(0, x(high) - x(low)), height,
    fill: "url(#hatch)", stroke: "#555", "data-part": "band" });
  const defs = add("defs", {});
  defs.innerHTML = '<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" ' +
    'patternTransform="rotate(45)"><rect width="3" height="6" fill="#bbb"/></pattern>';
  add("line", { x1: x(p.memory_budget), x2: x(p.memory_budget), y1: top - 12, y2: top + height + 8,
    stroke: "#c00", "stroke-width": 2, "data-part": "card" });
  add("text", { x: x(p.memory_budget) + 4, y: top - 4, "font-size": 11 }, `the card: ${gib(p.memory_budget)}`);
  for (let i = 0; i <= 6; i++) { // the fixed axis: six ticks up to 1.5x the card
    const b = (axis * i) / 6;
    add("line", { x1: x(b), x2: x(b), y1: top + height, y2: top + height + 5, stroke: "#333" });
    add("text", { x: x(b), y: top + height + 18, "font-size": 10, "text-anchor": "middle" },
      (b / GIB).toFixed(0));
  }
  add("text", { x: left + width / 2, y: top + height + 34, "font-size": 11, "text-anchor": "middle" },
    "GiB on the device: the step's tensors, the allocator's reserve and the CUDA context at the band's low end, the band to its top (hatched)");
  if (high > axis) add("text", { x: left + width + 4, y: top + height / 2 + 4, "font-size": 11 }, "▶");
  let lx = left; // the legend: each part drawn, in its colour
  for (const [name, bytes] of parts) {
    if (bytes <= 0) continue;
    add("rect", { x: lx, y: top + height + 48, width: 10, height: 10, fill: COLOURS[name] || "#999" });
    const label = add("text", { x: lx + 14, y: top + height + 57, "font-size": 10 }, name.replaceAll("_", " "));
    lx += 22 + 6 * label.textContent.length;
  }
}

$("plan-form").addEventListener("submit", plan);
start().catch((err) => {
  $("errors").textContent = `the page could not start Python: ${err}`;
  document.body.dataset.state = "failed";
});
