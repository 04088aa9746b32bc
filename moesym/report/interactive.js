// moesym report --interactive: the page's runtime (moesym/report/interactive.py inlines it after the
// generated models and their data D). The report's rules of moesym.numbers.metrics on the models'
// outputs, the command of a point, ports of moesym.numeric.special's functions, and the charts as
// plain SVG (as moesym/report/svg.py draws them). Hand-written; no library, nothing fetched.
const RES = ["compute", "memory", "communication", "overhead"];
const COLOUR = {compute: "#4477aa", memory: "#ee6677", communication: "#228833",
                overhead: "#ccbb44", none: "#bbbbbb"};
const PAL = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb"];
const SERVE = D.phase === "serve", FN = {};
for (const v of D.structures) for (const name of Object.values(v.fn)) FN[name] = eval(name);

function variant(mb, state) {  // the pre-generated structure of (micro-batches, schedule, A2A)
  const i = D.variants[`${mb}/${state.overlap}/${state.a2a}`];
  if (i === undefined)
    throw new Error(`--overlap ${state.overlap} with --a2a ${state.a2a} does not run ${mb} ` +
      "micro-batch(es) here (predict refuses it): pick another schedule or micro-batch count");
  return D.structures[i];
}

function hwValues(state) {  // symbol -> SI number from the hardware inputs
  const out = {};
  for (const h of D.hardware) for (const s of h.symbols) out[s] = state.hw[h.id] * h.scale;
  return out;
}

// ---- the CLI's checks of the inputs, in its order: D.rules holds each rule's numbers and the message
// moesym predict prints for it, written by the CLI's own Python when the page was made
// (interactive.py's _rules); the first that fails is shown in place of the numbers
const WHOLE = x => Number.isInteger(x) && x > 0 && x <= 2 ** 53;  // cli.common.positive_int
function fill(template, v) {  // {name} and {name:.Nf} of a template, as Python's format writes them
  return template.replace(/\{(\w+)(?::\.(\d+)f)?\}/g,
    (m, k, d) => d === undefined ? String(v[k]) : Number(v[k]).toFixed(Number(d)));
}
const RULES = {  // the predicates of moesym.specs.deployment's TOPOLOGY and VALIDITY, by name
  tp_divides_gpus: (v, M) => v.stage % v.tp === 0,
  ep_divides_gpus: (v, M) => v.stage % v.ep === 0,
  whole_nodes: (v, M) => v.stage <= M.gpusPerNode || v.stage % M.gpusPerNode === 0,
  tp_divides_heads: (v, M) => M.heads % v.tp === 0,
  tp_divides_output_groups: (v, M) => !M.o_groups || M.o_groups % v.tp === 0,
  ep_divides_experts: (v, M) => !M.moe || (M.experts + M.redundant) % v.ep === 0,
  deepep_spans_every_gpu: (v, M) => !M.moe || !D.rules.deepep.includes(v.a2a) || v.ep === v.stage,
  expert_tp_divides_intermediate: (v, M) => !M.moe || M.inter % v.expert_tp === 0,
};

function check(state) {  // the CLI's one-line message for the inputs, or null where it runs them
  const R = D.rules, M = R.model, raw = state.raw || {};
  const [gpus, ep, tp] = state.gpus !== undefined ? [state.gpus, state.ep, state.tp]
    : D.combos[state.combo];
  const given = [[FLAG, "work", state.work]].concat(SERVE ? [["--isl", "isl", state.isl],
    ["--osl", "osl", state.osl]] : [["--context", "context", state.context]],
    [["--gpus", "gpus", gpus], ["--ep", "ep", ep], ["--tp", "tp", tp], ["--micro-batches", "mb", state.mb]]);
  for (const [flag, id, x] of given)  // argparse: each flag's value a positive whole number
    if (!WHOLE(x)) return fill(R.positive[flag], {value: raw[id] !== undefined ? raw[id] : String(x)});
  for (const h of D.hardware) {  // the hardware numbers: finite, positive (latencies: not negative)
    const x = state.hw[h.id], lat = h.id.startsWith("lat");
    if (!(Number.isFinite(x) && (lat ? x >= 0 : x > 0)))
      return `${h.label} (${h.unit}) must be a ${lat ? "non-negative" : "positive"} number, got ` +
        `'${raw[h.id] !== undefined ? raw[h.id] : String(x)}'`;
  }
  const v = {gpus: gpus, ep: ep, tp: tp, stage: Math.floor(gpus / M.pp),
             expert_tp: Math.floor(Math.floor(gpus / M.pp) / ep), a2a: state.a2a, heads: M.heads,
             o_groups: M.o_groups, experts: M.experts, inter: M.inter};
  for (const [name, message] of R.topology.concat(R.validity)) {
    const ok = RULES[name];
    if (ok === undefined) return `this page has no check for the CLI's rule ${name}: generate it again`;
    if (!ok(v, M)) return fill(message, v);
  }
  if (D.phase === "prefill" && D.chunk && D.chunk > state.context && R.chunkMessage)
    return fill(R.chunkMessage, {chunk: D.chunk, context: state.context});
  if (R.positions) {  // checks.check_lengths: the longest sequence against the model's positions
    const longest = SERVE ? state.isl + state.osl : state.context;
    if (longest > R.positions)
      return fill(R.positionsMessage, {context: state.context, isl: state.isl, osl: state.osl, longest: longest});
  }
  const combo = D.combos.findIndex(c => c[0] === gpus && c[1] === ep && c[2] === tp);
  if (combo < 0)
    return `${gpus} GPUs, EP ${ep}, TP ${tp} runs (moesym predict answers it) but is not among this ` +
      "page's pre-generated GPUs/EP/TP: generate a page of that deployment";
  const at = Object.assign({}, state, {combo: combo});
  const mb = SERVE ? state.mb : Math.min(state.mb, state.work);  // clamp_micro_batches
  const key = `${mb}/${state.overlap}/${state.a2a}`;
  if (D.refused[key] !== undefined) return D.refused[key];  // Deployment.check_overlap, as printed
  const mem = memoryOfOne(at, variant(mb, at));
  if (!(mem.memory_bytes <= D.capacity))  // derive's does_not_fit: one request does not fit
    return fill(R.unfit, {weights: mem.weights / 1e9, used: mem.memory_bytes / 1e9});
  return null;
}

function commonValues(state, mb) {  // the symbols of the deployment and the hardware inputs
  const [gpus, ep, tp] = D.combos[state.combo];
  const common = Object.assign({N_gpu: gpus, e_p: ep, t_p: tp, n_mb: Number(mb)}, hwValues(state));
  if (D.rho[ep] !== undefined) common.rho_G = D.rho[ep];
  return common;
}

function prefillValues(work, L) {  // (step values, memory values) of a prefill point
  const chunk = D.chunk ? Math.min(D.chunk, L) : Math.min(work, L);
  return [{T: work, L: L, C: chunk},
          {T: work / D.cp, L: L, C: chunk, B: Math.max(1, Math.ceil(work / L)) / D.cp}];
}

function memoryOfOne(state, V) {  // memory per GPU with one request (prefill: the point's prompt)
  const mb = SERVE ? state.mb : Math.min(state.mb, state.work);
  const wlMem = SERVE ? {B: 1, L: state.isl + Math.floor(state.osl / 2), T_pf: D.serve.chunks[state.combo]}
    : D.phase === "prefill" ? prefillValues(state.work, state.context)[1] : {B: 1, L: state.context};
  return FN[V.fn.memory](Object.assign({}, V.memory, commonValues(state, mb), wlMem));
}

function evaluate(state, full = true) {  // predict's numbers at a point (metrics.report_from_numbers);
  if (SERVE) return evaluateServe(state, full);  // not full: the times alone (no memory, no bounds)
  const prefill = D.phase === "prefill";
  const [gpus, ep, tp] = D.combos[state.combo];
  const work = state.work, L = state.context;
  const mb = String(Math.min(state.mb, work));  // clamp_micro_batches
  const V = variant(mb, state);
  const common = commonValues(state, mb);
  let wl, wlMem;
  if (prefill) [wl, wlMem] = prefillValues(work, L);
  else { wl = {B: work, L: L}; wlMem = {B: work, L: L}; }
  const sv = Object.assign({}, V.step, common, wl);
  const nums = FN[V.fn.step](sv), t = nums.step_time_s;
  const r = {step_time_s: t, nums: nums, mb: Number(mb), layout: V.timeline};
  if (prefill) {
    r.tokens_per_gpu_s = work / (tp * D.pp * D.cp) / t;
    r.latency_s = t * Math.max(1.0, L / Math.min(wl.C, work));
  } else { r.tokens_per_gpu_s = work / (tp * D.pp) / t; r.latency_s = t; }
  if (!full) return r;
  r.mem = FN[V.fn.memory](Object.assign({}, V.memory, common, wlMem));
  r.memory_bytes = r.mem.memory_bytes; r.fits = r.memory_bytes <= D.capacity;
  return Object.assign(r, bounds(nums, sv, Number(mb)));
}

function evaluateServe(state, full) {  // predictor.predict_serve: metrics' serving steady state
  const [gpus, ep, tp] = D.combos[state.combo], V = variant(state.mb, state);
  const chunk = D.serve.chunks[state.combo], isl = state.isl, osl = state.osl, B = state.work;
  const common = Object.assign({N_gpu: gpus, e_p: ep, t_p: tp, n_mb: state.mb}, hwValues(state));
  if (D.rho[ep] !== undefined) common.rho_G = D.rho[ep];
  // serve_point (one token accepted per step: speculative decoding is refused)
  const steps = osl, hit = V.mix.F_hit || 0, fresh = Math.max(isl * (1 - hit), 1);
  const decoding = Math.min(B * steps / (steps + Math.max(1, fresh / chunk)), chunk * steps / fresh);
  const prefill = decoding * fresh / steps;
  const share = Math.max(prefill / chunk, 1 - Math.exp(-decoding / steps));
  const kv = isl + Math.floor(osl / 2);  // serve_kv_tokens
  const dec = FN[V.fn.step](Object.assign({}, V.step, common, {B: decoding, L: kv}));
  const mixValues = Object.assign({}, V.mix, common,
    {B: decoding, L: kv, T: prefill / share, L_in: isl, C: chunk});
  const mix = FN[V.fn.mix](mixValues);
  const t = share * mix.step_time_s + (1 - share) * dec.step_time_s;  // serve_rates
  if (!full) return {step_time_s: t, tokens_per_gpu_s: decoding / (tp * D.pp) / t, latency_s: t};
  const mem = FN[V.fn.memory](Object.assign({}, V.memory, common, {B: B, L: kv, T_pf: chunk}));
  const mixed = bounds(mix, V.mix, state.mb), decode = bounds(dec, V.step, state.mb);
  const mixedBusy = share * mix.step_time_s;  // serve_report: the step that takes most time
  return {step_time_s: t, nums: mix, mem: mem, memory_bytes: mem.memory_bytes, mb: state.mb,
    tokens_per_gpu_s: decoding / (tp * D.pp) / t, latency_s: t,
    ttft_s: Math.ceil(fresh / chunk) * mix.step_time_s, fits: mem.memory_bytes <= D.capacity,
    bound: (mixedBusy >= t - mixedBusy ? mixed : decode).bound, roofline: mixed.roofline,
    layout: {note: "serving alternates decode steps and mixed steps (a prefill chunk beside " +
      "the decodes), so no one layer stands for it: the page of --phase decode or --phase " +
      "prefill draws each"}};
}

const PARTS = new Map();  // output name -> [key, index, field] of part/KEY/I/FIELD, else null
function kernels(nums) {  // {key: [{field: s}]} from part/KEY/I/FIELD
  const out = {};
  for (const name in nums) {
    let k = PARTS.get(name);
    if (k === undefined) {
      k = name.startsWith("part/") ? name.split("/").slice(1) : null;
      if (k) k[1] = Number(k[1]);
      PARTS.set(name, k);
    }
    if (k === null) continue;
    const list = out[k[0]] || (out[k[0]] = []);
    while (list.length <= k[1]) list.push({});
    list[k[1]][k[2]] = nums[name];
  }
  return out;
}

function keyRooflines(nums) {  // metrics._key_rooflines
  const ks = kernels(nums), out = {};
  for (let [key, parts] of Object.entries(ks)) {
    if (key === "moe_routed") continue;
    const sh = {compute: 0, memory: 0, communication: 0, overhead: 0};
    let c = 0, m = 0;
    if (key === "moe_weight_load") {
      const routed = ks.moe_routed || [];
      c = routed.reduce((a, q) => a + q.compute_s, 0);
      m = Math.max(parts.reduce((a, q) => a + q.memory_s, 0), routed.reduce((a, q) => a + q.memory_s, 0));
      sh[c >= m ? "compute" : "memory"] += Math.max(c, m);
      parts = routed.concat(parts);
    } else {
      for (const p of parts) {
        sh[p.compute_s >= p.memory_s ? "compute" : "memory"] += Math.max(p.compute_s, p.memory_s);
        c += p.compute_s; m += p.memory_s;
      }
    }
    for (const p of parts) { sh.communication += p.comm_s; sh.overhead += p.overhead_s; }
    out[key === "moe_weight_load" ? "routed_experts" : key] = [c, m, sh];
  }
  return out;
}

function bounds(nums, values, n) {  // metrics.bound_shares, the step's bound and each key's
  const kr = keyRooflines(nums), shares = {compute: 0, memory: 0, communication: 0, overhead: 0};
  for (const [key, [, , s]] of Object.entries(kr))
    if (key !== "dispatch" && key !== "combine") for (const r of RES) shares[r] += s[r] * n * D.layers;
  shares.communication += Math.max(nums.layer_s - nums.layer_compute_s, 0) * D.layers;
  const host = values.tau_s || 0;
  shares.overhead += (D.hostOverlapped ? 0 : host) + (values.tau_l || 0) * D.layers;
  const serving = values.eta_sv === undefined ? 1.0 : values.eta_sv;
  shares.overhead += RES.reduce((a, r) => a + shares[r], 0) * (1 / serving - 1);
  if (D.hostOverlapped)
    shares.overhead += Math.max(nums.step_time_s - RES.reduce((a, r) => a + shares[r], 0), 0);
  let bound = RES[0];
  for (const r of RES) if (shares[r] > shares[bound]) bound = r;
  const roof = {};
  for (const [key, [c, m, s]] of Object.entries(kr)) {  // the roofline side, else the top resource
    let top = "none";
    for (const r of RES) if (s[r] > 0 && (top === "none" || s[r] > s[top])) top = r;
    roof[key] = (c || m) ? (c >= m ? "compute" : "memory") : top;
  }
  return {bound: bound, roofline: roof};
}

// ---- one steady-state layer: moesym.schedules.simulate on the step's operation times
const STEADY_LAYERS = 4;
function order(lay, layers) {  // schedules.Layout.order: (micro-batch, layer, stage) in stream order
  const per = [];
  for (let mb = 0; mb < lay.mb; mb++) {
    const q = [];
    for (let l = 0; l < layers; l++) for (let s = 0; s < lay.stages.length; s++) q.push([mb, l, s]);
    per.push(q);
  }
  if (lay.mb === 1) return per[0];
  const [a, b] = per, d = lay.delta;
  let out = a.slice(0, d);
  for (let i = 0; i < a.length - d; i++) out.push(a[d + i], b[i]);
  return out.concat(b.slice(a.length - d));
}

const COMPUTE_OPS = ["attn_prep", "attn_core", "router", "shared", "experts", "output"];
function simulate(lay, ops, tr, phi, layers) {  // schedules.simulate: (layer ends, events)
  let t = 0.0, link = 0.0;
  const arrive = {}, ends = new Array(layers).fill(0.0), events = [], last = lay.stages.length - 1;
  for (const [mb, layer, s] of order(lay, layers)) {
    for (const op of lay.stages[s]) {
      if (COMPUTE_OPS.includes(op)) {
        const start = t; t = t + (ops[op] || 0.0);
        events.push({name: op, stream: "compute", micro_batch: mb, layer: layer, start: start, end: t});
      } else if (op.endsWith("_send")) {
        const kind = op.slice(0, -5), start = Math.max(t, link);
        link = arrive[mb + "/" + kind] = start + tr[kind];
        events.push({name: kind, stream: "network", micro_batch: mb, layer: layer, start: start, end: link});
      } else {
        const kind = op.slice(0, -5), start = t;
        t = Math.max(arrive[mb + "/" + kind], t + phi * tr[kind]);
        events.push({name: op, stream: "compute", micro_batch: mb, layer: layer, start: start, end: t});
      }
    }
    if (s === last && mb === lay.mb - 1) ends[layer] = t;
  }
  return [ends, events];
}

function timeline(r) {  // StepModel.timeline: one period, times from the end of layer 2
  const lay = r.layout;
  if (lay.note) return null;
  let tag = "tl", phi = r.nums["tl/phi"];
  if (lay.capped && phi) { tag = "tlc"; phi = 0.0; }  // FP8 GEMMs on the SMs the transfers leave
  const ops = {}, tr = {};
  for (const [k, v] of Object.entries(r.nums)) {
    if (k.startsWith(tag + "/op/")) ops[k.slice(tag.length + 4)] = v;
    else if (k.startsWith(tag + "/tr/")) tr[k.slice(tag.length + 4)] = v;
  }
  const [ends, events] = simulate(lay, ops, tr, phi, STEADY_LAYERS), t0 = ends[1], t1 = ends[2];
  return events.filter(e => (t0 <= e.start && e.start < t1) || (e.start < t0 && t0 < e.end))
    .map(e => ({name: e.name, stream: e.stream, micro_batch: e.micro_batch, layer: e.layer - 2,
                start_s: e.start - t0, end_s: e.end - t0}));
}

function gantt(events, title) {  // as moesym.report.svg.gantt
  const width = 720, left = 130, row = 26, span = width - left - 20;
  const keys = [...new Set(events.map(e => e.stream + "\u0000" + e.micro_batch))].sort();
  const t1 = Math.max(0, ...events.map(e => e.end_s)) || 1.0, h = 40 + row * keys.length + 24;
  const names = [...new Set(events.map(e => e.name))].sort(), colour = {};
  names.forEach((n, i) => { colour[n] = PAL[i % (PAL.length - 1)]; });
  const body = [`<text x="${left}" y="16" ${FONT} font-weight="bold">${esc(title)}</text>`];
  keys.forEach((k, i) => {
    const [stream, mb] = k.split("\u0000"), y = 28 + i * row;
    body.push(`<text x="${left - 6}" y="${y + 16}" text-anchor="end" ${FONT}>${esc(stream)} mb${mb}</text>`);
    for (const e of events) {
      if (e.stream !== stream || String(e.micro_batch) !== mb || e.end_s <= e.start_s) continue;
      const x = left + span * e.start_s / t1, w = span * (e.end_s - e.start_s) / t1;
      body.push(`<rect x="${x.toFixed(2)}" y="${y + 2}" width="${w.toFixed(2)}" height="${row - 6}" fill="${colour[e.name]}" stroke="#fff"><title>${esc(e.name)}: ${(e.start_s * 1e6).toFixed(1)} - ${(e.end_s * 1e6).toFixed(1)} us (${((e.end_s - e.start_s) * 1e6).toFixed(1)} us)</title></rect>`);
      if (w > 60) body.push(`<text x="${(x + 3).toFixed(2)}" y="${y + 16}" ${FONT} fill="#fff">${esc(e.name)}</text>`);
    }
  });
  body.push(`<text x="${left}" y="${h - 6}" ${FONT}>0 us</text>`,
    `<text x="${width - 20}" y="${h - 6}" text-anchor="end" ${FONT}>${(t1 * 1e6).toFixed(1)} us</text>`);
  return svg(width, h, body, title);
}

// ---- sensitivities: d ln t / d ln x of the step time to each hardware number, by a central
// difference of the generated step function in log x (step 1e-5: truncation ~1e-11, rounding
// ~1e-10); a maximum within 1e-5 of its switch gives the mean of its two sides' slopes
const LOG_STEP = 1e-5;
function sensitivities(state) {
  const out = {};
  for (const h of D.hardware) {
    const at = f => evaluate(Object.assign({}, state, {hw: Object.assign({}, state.hw,
      {[h.id]: state.hw[h.id] * Math.exp(f * LOG_STEP)})}), false).step_time_s;
    out[h.id] = state.hw[h.id] === 0 ? 0 : (Math.log(at(1)) - Math.log(at(-1))) / (2 * LOG_STEP);
  }
  return out;
}

function fmtS(x) { return x >= 1e-3 ? (x * 1e3).toFixed(3) + " ms" : (x * 1e6).toFixed(1) + " us"; }
function fmt(v) { const a = Math.abs(v); return v === 0 ? "0" : (a >= 1e4 || a < 1e-2) ? v.toPrecision(3) : String(Number(v.toPrecision(4))); }
function esc(s) { return String(s).replace(/[&<>"']/g, c => "&#" + c.charCodeAt(0) + ";"); }

function svg(w, h, body, title) {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title>${body.join("")}</svg>`;
}
const FONT = 'font-family="sans-serif" font-size="12"';

function bars(items, unit, title) {  // as moesym.report.svg.bars
  const row = 22, left = 230, width = 720, span = width - left - 90;
  const top = Math.max(0, ...items.map(i => i[1])) || 1;
  const body = [`<text x="${left}" y="16" ${FONT} font-weight="bold">${esc(title)}</text>`];
  items.forEach(([label, v, colour], i) => {
    const y = 26 + i * row, w = span * v / top;
    body.push(`<text x="${left - 6}" y="${y + 14}" text-anchor="end" ${FONT}>${esc(label)}</text>`,
      `<rect x="${left}" y="${y + 2}" width="${w.toFixed(2)}" height="${row - 6}" fill="${colour}"><title>${esc(label)}: ${fmt(v)} ${unit}</title></rect>`,
      `<text x="${(left + w + 4).toFixed(2)}" y="${y + 14}" ${FONT}>${fmt(v)} ${unit}</text>`);
  });
  return svg(width, row * items.length + 40, body, title);
}

function lines(xs, ys, mark, xlabel, ylabel, title) {  // log-x line chart, as moesym.report.svg.lines
  const width = 720, height = 300, left = 70, right = 20, top = 30, bottom = 45;
  const fin = ys.filter(Number.isFinite), x0 = xs[0], x1 = xs[xs.length - 1];
  const y1 = (Math.max(...fin, 0) * 1.05) || 1;
  const px = v => left + (Math.log(v) - Math.log(x0)) / ((Math.log(x1) - Math.log(x0)) || 1) * (width - left - right);
  const py = v => height - bottom - v / y1 * (height - top - bottom);
  const body = [`<text x="${left}" y="18" ${FONT} font-weight="bold">${esc(title)}</text>`,
    `<line x1="${left}" y1="${height - bottom}" x2="${width - right}" y2="${height - bottom}" stroke="#444"/>`,
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${height - bottom}" stroke="#444"/>`];
  for (let e = Math.ceil(Math.log10(x0)); 10 ** e <= x1; e++)
    body.push(`<text x="${px(10 ** e).toFixed(1)}" y="${height - bottom + 16}" text-anchor="middle" ${FONT}>${fmt(10 ** e)}</text>`);
  for (let i = 0; i <= 4; i++) {
    const v = y1 * i / 4;
    body.push(`<text x="${left - 6}" y="${(py(v) + 4).toFixed(1)}" text-anchor="end" ${FONT}>${fmt(v)}</text>`,
      `<line x1="${left}" y1="${py(v).toFixed(1)}" x2="${width - right}" y2="${py(v).toFixed(1)}" stroke="#ddd"/>`);
  }
  body.push(`<text x="${(left + width - right) / 2}" y="${height - 8}" text-anchor="middle" ${FONT}>${esc(xlabel)}</text>`,
    `<text x="14" y="${(top + height - bottom) / 2}" text-anchor="middle" ${FONT} transform="rotate(-90 14 ${(top + height - bottom) / 2})">${esc(ylabel)}</text>`);
  const pts = xs.map((x, i) => [x, ys[i]]).filter(p => Number.isFinite(p[1]));
  body.push(`<polyline points="${pts.map(p => px(p[0]).toFixed(1) + "," + py(p[1]).toFixed(1)).join(" ")}" fill="none" stroke="${PAL[0]}" stroke-width="2"/>`);
  for (const [v, label, colour] of mark) if (v >= x0 && v <= x1)
    body.push(`<line x1="${px(v).toFixed(1)}" y1="${top}" x2="${px(v).toFixed(1)}" y2="${height - bottom}" stroke="${colour}" stroke-dasharray="4 3"><title>${esc(label)}</title></line>`,
      `<text x="${(px(v) + 4).toFixed(1)}" y="${top + 12}" ${FONT} fill="${colour}">${esc(label)}</text>`);
  return svg(width, height, body, title);
}

function stack(items, unit, title) {  // as moesym.report.svg.stack
  const width = 720, left = 10, span = width - 20;
  const total = items.reduce((a, i) => a + Math.max(i[1], 0), 0) || 1;
  const body = [`<text x="${left}" y="16" ${FONT} font-weight="bold">${esc(title)}</text>`];
  let x = left;
  for (const [label, v, colour] of items) {
    const w = span * Math.max(v, 0) / total;
    body.push(`<rect x="${x.toFixed(2)}" y="26" width="${w.toFixed(2)}" height="28" fill="${colour}"><title>${esc(label)}: ${fmt(v)} ${unit}</title></rect>`);
    x += w;
  }
  items.forEach(([label, v, colour], i) => {
    const lx = left + (i % 3) * (span / 3), ly = 72 + Math.floor(i / 3) * 18;
    body.push(`<rect x="${lx.toFixed(1)}" y="${ly - 10}" width="10" height="10" fill="${colour}"/>`,
      `<text x="${(lx + 14).toFixed(1)}" y="${ly}" ${FONT}>${esc(label)} ${fmt(v)} ${unit}</text>`);
  });
  return svg(width, 80 + 18 * Math.floor((items.length + 2) / 3), body, title);
}

function attempt(state, full) {  // evaluate, or null where the structure does not run (predict refuses)
  try { return evaluate(state, full); } catch (e) { return null; }
}

function routedComputeBound(state, work) {  // the routed experts' roofline at another work size
  const r = attempt(Object.assign({}, state, {work: work}), false);
  if (r === null) return false;
  const [c, m] = keyRooflines(r.nums).routed_experts;  // bounds' roofline side of the key
  return (c || m) > 0 && c >= m;
}

let CROSS = [null, null];  // the last crossover and the inputs it was found at (all but the work)
function crossover(state) {  // smallest work where the routed experts turn compute-bound
  if (!D.isMoe || D.phase !== "decode") return null;
  const key = JSON.stringify(Object.assign({}, state, {work: 0}));
  if (CROSS[1] !== key) CROSS = [search(state), key];  // the work does not move it
  return CROSS[0];
}

function search(state) {
  let lo = 1, hi = 1 << 20;
  if (routedComputeBound(state, lo) || !routedComputeBound(state, hi)) return null;
  while (hi - lo > 1) { const mid = Math.floor((lo + hi) / 2); if (routedComputeBound(state, mid)) hi = mid; else lo = mid; }
  return hi;
}

function command(state) {  // the moesym predict line of this point
  const [gpus, ep, tp] = D.combos[state.combo];
  let hwArg = D.hwName, pre = "";
  const changed = D.hardware.filter(h => state.hw[h.id] !== h.value);
  if (changed.length && D.hwToml !== null) {
    let text = D.hwToml;
    for (const h of changed) text = setToml(text, h.toml[0], h.toml[1], state.hw[h.id]);
    hwArg = "hardware-what-if.toml";
    pre = "cat > hardware-what-if.toml <<'EOF'\n" + text.replace(/\n*$/, "\n") + "EOF\n";
  }
  const lengths = SERVE ? ["--isl", String(state.isl), "--osl", String(state.osl)]
    : ["--context", String(state.context)];
  const argv = ["moesym", ...D.base, "--hardware", hwArg, "--phase", D.phase,
    FLAG, String(state.work), ...lengths, "--gpus", String(gpus),
    "--ep", String(ep), "--tp", String(tp), "--micro-batches", String(state.mb),
    "--overlap", state.overlap, "--a2a", state.a2a];
  const chunk = SERVE ? D.serve.chunkGiven : D.chunk;
  if (chunk) argv.push("--chunk", String(chunk));
  return pre + argv.map(quote).join(" ");
}

function quote(a) { return /^[\w@%+=:,./-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\"'\"'") + "'"; }

function setToml(text, section, key, value) {  // replace KEY = ... in [section] ("": the top)
  const lines = text.split("\n");
  let cur = "";
  for (let i = 0; i < lines.length; i++) {
    const m = lines[i].match(/^\s*\[([^\]]+)\]/);
    if (m) { cur = m[1].trim(); continue; }
    const k = lines[i].match(/^(\s*)([\w.-]+)(\s*=\s*)([^#]*?)(\s*(#.*)?)$/);
    if (k && cur === section && k[2] === key) { lines[i] = k[1] + key + k[3] + String(value) + (k[5] || ""); return lines.join("\n"); }
  }
  throw new Error("hardware file has no " + key + " in [" + section + "]");
}

function readState() {
  const num = id => Number(document.getElementById(id).value);
  const hw = {};
  for (const h of D.hardware) hw[h.id] = num(h.id);
  const lengths = SERVE ? {isl: num("isl"), osl: num("osl")} : {context: num("context")};
  const text = id => document.getElementById(id).value, raw = {};
  for (const id of ["work", ...Object.keys(lengths), ...Object.keys(hw)]) raw[id] = text(id);
  return Object.assign({work: num("work"), combo: num("combo"), mb: num("mb"), hw: hw,
    overlap: text("overlap"), a2a: text("a2a"), raw: raw}, lengths);
}

function redraw() {
  const t0 = performance.now();
  const state = readState(), put = (id, v, text) => {
    const o = document.getElementById(id); o.dataset.value = String(v); o.textContent = text; };
  document.getElementById("cmd").textContent = command(state);
  const refuse = message => {  // what the CLI says in place of the numbers; nothing drawn
    document.getElementById("error").textContent = message;
    for (const id of ["step_time_s", "tokens_per_gpu_s", "latency_s", "bound", "memory_bytes"]) put(id, "", "-");
    for (const id of ["breakdown", "sweep", "timeline", "memory", "sensitivity"]) document.getElementById(id).innerHTML = "";
    put("redraw_ms", performance.now() - t0, (performance.now() - t0).toFixed(1));
  };
  let r;
  try {
    const message = check(state);
    if (message !== null) return refuse(message);
    r = evaluate(state);
  } catch (e) { return refuse(e.message); }  // a structure predict refuses: say why
  if (![r.step_time_s, r.tokens_per_gpu_s, r.latency_s, r.memory_bytes].every(x => Number.isFinite(x) && x >= 0))
    return refuse("the model gives no finite, non-negative prediction at these inputs; " +
      "run the command below for the CLI's answer");
  document.getElementById("error").textContent = "";
  put("step_time_s", r.step_time_s, fmtS(r.step_time_s));
  put("tokens_per_gpu_s", r.tokens_per_gpu_s, r.tokens_per_gpu_s.toFixed(1));
  put("latency_s", r.latency_s, fmtS(r.latency_s));
  put("bound", r.bound, r.bound + (r.mb < state.mb ? ` (runs ${r.mb} micro-batch: too little work to split)` : ""));
  put("memory_bytes", r.memory_bytes, (r.memory_bytes / 1e9).toFixed(2) + " GB, fits: " + (r.fits ? "True" : "False"));
  const items = [];
  for (const [name, v] of Object.entries(r.nums)) {
    if (!name.startsWith("per_layer_s/")) continue;
    const k = name.slice(12), b = (k === "moe_routed" || k === "moe_weight_load") ? "routed_experts" : k;
    const kind = r.roofline[b] || "none";
    items.push([`${k} (${kind})`, v * 1e6, COLOUR[kind]]);
  }
  document.getElementById("breakdown").innerHTML = bars(items, "us", "Busy time per layer, whole per-GPU batch, before overlap") +
    `<p class="note">Colour: what bounds the term (${RES.concat(["none"]).map(k => `<span style="color:${COLOUR[k]}">&#9632;</span> ${k}`).join(", ")}). Layer time with the overlap schedule: ${fmtS(r.nums.layer_s)}.</p>`;
  const events = timeline(r);
  document.getElementById("timeline").innerHTML = events === null ? `<p class="note">No timeline: ${esc(r.layout.note)}.</p>` :
    gantt(events, `Timeline of one layer (overlap schedule ${r.layout.name}), per stream and micro-batch`) +
    '<p class="note">Hover a bar for its start, end and length.</p>';
  const el = sensitivities(state), of = D.phase === "prefill" ? "TTFT" : "TPOT";
  const rows = D.hardware.map(h => [`${h.label}`, Math.abs(el[h.id]), el[h.id] > 0 ? PAL[0] : PAL[1], el[h.id]]);
  const sens = document.getElementById("sensitivity");
  sens.innerHTML = bars(rows, "", `|d ln ${of} / d ln x| of each hardware number (blue: raises it, red: lowers it)`) +
    '<p class="note">A central difference of the generated step model in log x (step 1e-5), so within ~1e-9 of <code>moesym derive sensitivity</code>\'s exact values (summed over the symbols a number sets) away from a switch of a maximum.</p>';
  sens.dataset.value = JSON.stringify(el);
  const lo = D.phase === "prefill" ? Math.min(256, state.work) : 1;
  const hi = Math.max(4 * state.work, D.phase === "prefill" ? 65536 : 512);
  const xs = [], thr = [], lat = [];
  for (let i = 0; i < 18; i++) {
    const x = Math.round(lo * (hi / lo) ** (i / 17));
    if (xs.length && x === xs[xs.length - 1]) continue;
    const p = attempt(Object.assign({}, state, {work: x}), false);  // none where predict refuses
    xs.push(x); thr.push(p ? p.tokens_per_gpu_s : NaN); lat.push(p ? p.latency_s * 1e3 : NaN);
  }
  const c = crossover(state), marks = [[state.work, "this point", "#000000"]];
  if (c !== null) marks.push([c, "crossover " + c, "#aa3377"]);
  const xl = D.phase === "prefill" ? "prompt tokens per attention-DP rank per step" : "requests per attention-DP rank";
  document.getElementById("sweep").innerHTML = lines(xs, thr, marks, xl, "tokens / GPU / s", "Throughput") +
    lines(xs, lat, marks, xl, D.phase === "prefill" ? "TTFT (ms)" : "TPOT (ms)", "Latency") +
    (c !== null ? `<p class="note">Routed experts turn compute-bound at <b id="crossover">${c}</b> requests per rank.</p>` : "");
  const parts = ["weights", "kv", "activations", "workspaces", "comm buffers", "runtime reserve"]
    .map((k, i) => [k === "kv" ? "KV cache" : k, r.mem[k] / 1e9, PAL[i]]);
  parts.push(["free", Math.max(D.capacity - r.memory_bytes, 0) / 1e9, PAL[6]]);
  document.getElementById("memory").innerHTML = stack(parts, "GB", "Memory per GPU");
  put("redraw_ms", performance.now() - t0, (performance.now() - t0).toFixed(1));
}

function init() {
  const pairs = ["work", ...(SERVE ? ["isl", "osl"] : ["context"]), ...D.hardware.map(h => h.id)];
  for (const id of pairs) {
    const box = document.getElementById(id), range = document.getElementById(id + "_r");
    range.addEventListener("input", () => { box.value = range.value; redraw(); });
    box.addEventListener("input", () => { if (box.value !== "") { range.value = box.value; redraw(); } });
  }
  for (const id of ["combo", "mb", "overlap", "a2a"]) document.getElementById(id).addEventListener("change", redraw);
  document.getElementById("copy").addEventListener("click", () => {
    const text = document.getElementById("cmd").textContent;
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).catch(() => {});
    const sel = window.getSelection(), range = document.createRange();
    range.selectNodeContents(document.getElementById("cmd")); sel.removeAllRanges(); sel.addRange(range);
  });
  redraw();
}

// ---- ports of moesym.numeric.special (scalars), same windows and branches as the NumPy code
const SIGMAS = 10.0, MAX_WIDTH = 4096, EXACT_MAX_MEAN = 64.0;
const LANCZOS = [0.99999999999980993, 676.5203681218851, -1259.1392167224028,
  771.32342877765313, -176.61502916214059, 12.507343278686905, -0.13857109526572012,
  9.9843695780195716e-6, 1.5056327351493116e-7];  // Lanczos g = 7, n = 9 (Godfrey's table)
function lgamma(x) {  // log|Gamma(x)|, x > 0 here (counts and moment-matched trials)
  if (x < 0.5) return Math.log(Math.PI / Math.abs(Math.sin(Math.PI * x))) - lgamma(1 - x);
  if (x === 1 || x === 2) return 0;
  x -= 1;
  let a = LANCZOS[0];
  const t = x + 7.5;
  for (let i = 1; i < 9; i++) a += LANCZOS[i] / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}
function loggamma(x) {  // special_numeric's loggamma: math.lgamma, a pole giving Infinity
  return (x <= 0 && Number.isInteger(x)) ? Infinity : lgamma(x);
}
function normalQuantile(q) {  // Wichura's AS241 (PPND16), Appl. Statist. 37 (1988) 477-484
  const r0 = q - 0.5;
  if (Math.abs(r0) <= 0.425) {
    const r = 0.180625 - r0 * r0;
    return r0 * (((((((2509.0809287301226727 * r + 33430.575583588128105) * r + 67265.770927008700853) * r
      + 45921.953931549871457) * r + 13731.693765509461125) * r + 1971.5909503065514427) * r
      + 133.14166789178437745) * r + 3.387132872796366608)
      / (((((((5226.495278852545925 * r + 28729.085735721942674) * r + 39307.89580009271061) * r
      + 21213.794301586595867) * r + 5394.1960214247511077) * r + 687.1870074920579083) * r
      + 42.313330701600911252) * r + 1.0);
  }
  let r = Math.sqrt(-Math.log(r0 <= 0 ? q : 1 - q)), x;
  if (r <= 5.0) {
    r -= 1.6;
    x = (((((((7.7454501427834140764e-4 * r + 0.0227238449892691845833) * r + 0.24178072517745061177) * r
      + 1.27045825245236838258) * r + 3.64784832476320460504) * r + 5.7694972214606914055) * r
      + 4.6303378461565452959) * r + 1.42343711074968357734)
      / (((((((1.05075007164441684324e-9 * r + 5.475938084995344946e-4) * r + 0.0151986665636164571966) * r
      + 0.14810397642748007459) * r + 0.68976733498510000455) * r + 1.6763848301838038494) * r
      + 2.05319162663775882187) * r + 1.0);
  } else {
    r -= 5.0;
    x = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 0.0012426609473880784386) * r
      + 0.026532189526576123093) * r + 0.29656057182850489123) * r + 1.7848265399172913358) * r
      + 5.4637849111641143699) * r + 6.6579046435011037772)
      / (((((((2.04426310338993978564e-15 * r + 1.4215117583164458887e-7) * r + 1.8463183175100546818e-5) * r
      + 7.868691311456132591e-4) * r + 0.0148753612908506148525) * r + 0.13692988092273580531) * r
      + 0.59983220655588793769) * r + 1.0);
  }
  return r0 < 0 ? -x : x;
}
function erfinv(v) {
  if (v > -1 && v < 1) return normalQuantile((v + 1) / 2) / Math.SQRT2;
  return Math.abs(v) === 1 ? Math.sign(v) * Infinity : NaN;
}
function LogInterp(x, ...k) {  // np.interp in log x through (log x_i, y_i), flat beyond the ends
  const lx = Math.log(x), n = k.length / 2;
  if (lx <= k[0]) return k[1];
  if (lx >= k[2 * n - 2]) return k[2 * n - 1];
  for (let i = 1; i < n; i++) if (lx <= k[2 * i])
    return k[2 * i - 1] + (k[2 * i + 1] - k[2 * i - 1]) * (lx - k[2 * i - 2]) / (k[2 * i] - k[2 * i - 2]);
  return k[2 * n - 1];
}
function windowTerms(lo, width, mean, p, n) {  // sum of 1 - F(j)^n over the window (_window_cdf)
  const bin = p > 1e-12, poi = Math.abs(p) <= 1e-12, neg = p < -1e-12;
  const trials = bin ? mean / p : 1.0, size = neg ? mean / -p : 1.0, pi = 1.0 / (1.0 - (neg ? p : 0.0));
  const pb = bin ? p : 0.5, pc = bin ? Math.min(p, 1 - 1e-16) : 0.5;
  const l1 = Math.log1p(-pi + (pi === 1.0 ? 1 : 0));
  let logm;
  if (bin) logm = lgamma(trials + 1.0) - lgamma(lo + 1.0) - lgamma(Math.max(trials - lo + 1.0, 1e-300))
    + lo * Math.log(pb) + (trials - lo) * Math.log1p(-pc);
  else if (poi) logm = -mean + lo * Math.log(Math.max(mean, 1e-300)) - lgamma(lo + 1.0);
  else logm = lgamma(size + lo) - lgamma(lo + 1.0) - lgamma(size) + size * Math.log(pi) + lo * l1;
  let cum = 0, total = 0;
  for (let w = 0; w < width; w++) {
    const j = lo + w;
    if (w > 0) {
      const jj = j - 1;
      logm += bin ? Math.log(Math.max(trials - jj, 0.0)) - Math.log(jj + 1.0) + Math.log(pb) - Math.log1p(-pc)
        : poi ? Math.log(Math.max(mean, 1e-300)) - Math.log(jj + 1.0)
        : Math.log(size + jj) - Math.log(jj + 1.0) + l1;
    }
    cum += Math.exp(logm);
    const F = (bin && j >= trials) ? 1.0 : (j < 0 ? 0.0 : Math.min(cum, 1.0));
    total += 1.0 - Math.pow(F, n);
  }
  return total;
}
function MaxBinomialMean(mean, p, n) {  // special_numeric.max_binomial_mean
  p = Math.min(p, 1.0); n = Math.max(n, 1.0);
  const sd = Math.sqrt(Math.max(mean * (1.0 - p), 0.0));
  const spread = SIGMAS + Math.sqrt(2.0 * Math.log(n + 1.0));
  const lo = Math.max(Math.floor(mean - SIGMAS * sd) - 2.0, 0.0);
  let hi = Math.ceil(mean + spread * sd) + 2.0;
  const q = Math.min(Math.max(-p / Math.max(1.0 - p, 1e-300), 1e-300), 1.0 - 1e-12);
  if (p < 0) hi += Math.ceil(40.0 / -Math.log(q));
  const top = p > 0 ? mean / Math.max(p, 1e-300) : Infinity;
  hi = Math.min(hi, Math.ceil(top) + 1.0);
  const width = Math.max(hi - lo, 0.0);
  if (p >= 1.0 - 1e-15) return mean;
  if (width <= MAX_WIDTH && mean < EXACT_MAX_MEAN) return lo + windowTerms(lo, Math.floor(width) + 1, mean, p, n);
  return mean + sd * Math.SQRT2 * erfinv(2.0 * (n - 0.375) / (n + 0.25) - 1.0);
}
if (typeof document !== "undefined") init();
