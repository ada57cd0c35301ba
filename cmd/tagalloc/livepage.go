// The live page of tagalloc serve and run --serve, and /api/live, what it
// draws besides the history: the newest sample's tags, tag budgets,
// heap, libraries and top stacks, in a JSON of its own (the page does not
// depend on the report's layout).
//
// Every name on the page (tags, commands, libraries, frames, paths) comes
// from the measured programs: the script puts it in as text
// (textContent, SVG text nodes), never as markup, and the page's Content
// Security Policy runs no script but its own.

package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/tagalloc/tagalloc/reporter"
)

// liveView is /api/live: the newest sample.
type liveView struct {
	T         int64         `json:"t"` // unix milliseconds
	Processes []liveProcess `json:"processes"`
}

type liveProcess struct {
	PID     int       `json:"pid"`
	Command []string  `json:"command"`
	Ended   string    `json:"ended"`
	Heap    liveHeap  `json:"heap"`
	Tags    []liveTag `json:"tags"`
	// Levels: the tags nested by path (docs/tag-trees.md), what the
	// page's table shows; largest live bytes first at every level.
	Levels []liveLevel `json:"levels"`
	// Budgets: the process's tag budgets, by tag ([] when it set none).
	Budgets []liveBudget `json:"budgets"`
	Stacks  *liveStacks  `json:"stacks"` // null when stacks are off
}

// liveBudget is one tag budget (reporter.Budget, whose JSON names it
// keeps): a limit on the live bytes of the tag or level Tag and every tag
// under it, what is charged against it, and what it did past it.
type liveBudget struct {
	Tag          string `json:"tag"`
	LimitBytes   uint64 `json:"limit_bytes"`
	Policy       string `json:"policy"` // fail, notify, observe
	ChargedBytes uint64 `json:"charged_bytes"`
	Crossings    uint64 `json:"crossings"`
	Refused      uint64 `json:"refused"`
	Over         bool   `json:"over"`
}

// liveLevel is one level of a process's tag tree: one tag (Tag true: its
// own figures and its peak) or a level above tags (the exact sums of the
// tags under it, and no peak: the peak of a sum is not the sum of the
// peaks).
type liveLevel struct {
	Name       string      `json:"name"` // under its parent (tagalloc.TagLevel's Name)
	Path       string      `json:"path"` // the full path; a tag's name
	Tag        bool        `json:"tag"`
	LiveBytes  uint64      `json:"live_bytes"`
	LiveBlocks uint64      `json:"live_blocks"`
	AllocBytes uint64      `json:"alloc_bytes"`
	Peak       string      `json:"peak,omitempty"` // a tag's only, as Tag.Peak
	Children   []liveLevel `json:"children,omitempty"`
}

// newLiveLevels nests a process's tags for the page.
func newLiveLevels(tags []reporter.Tag, levels []*reporter.TagLevel) []liveLevel {
	out := make([]liveLevel, 0, len(levels))
	for _, l := range levels {
		sum := l.Totals(tags)
		ll := liveLevel{Name: l.Name, Path: l.Path, LiveBytes: sum.LiveBytes, LiveBlocks: sum.LiveBlocks, AllocBytes: sum.AllocBytes}
		if i, ok := l.Tag(); ok {
			ll.Tag, ll.Peak = true, tags[i].Peak()
		}
		ll.Children = newLiveLevels(tags, l.Children)
		if len(ll.Children) == 0 {
			ll.Children = nil
		}
		out = append(out, ll)
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].LiveBytes != out[b].LiveBytes {
			return out[a].LiveBytes > out[b].LiveBytes
		}
		return out[a].Path < out[b].Path
	})
	return out
}

type liveHeap struct {
	LiveBytes        uint64 `json:"live_bytes"`
	MappedBytes      uint64 `json:"mapped_bytes"`
	FreeCachedBytes  uint64 `json:"free_cached_bytes"`
	BookkeepingBytes uint64 `json:"bookkeeping_bytes"`
}

type liveTag struct {
	Name       string `json:"name"`
	LiveBytes  uint64 `json:"live_bytes"`
	LiveBlocks uint64 `json:"live_blocks"`
	AllocBytes uint64 `json:"alloc_bytes"`
	// the peak as the report has it: exact when the upper bound equals
	// it, else a lower bound; Peak is how the page shows it
	PeakLiveBytes      uint64  `json:"peak_live_bytes"`
	PeakLiveBytesUpper *uint64 `json:"peak_live_bytes_upper,omitempty"`
	Peak               string  `json:"peak"`
}

// liveStacks: estimates from the sampled stacks.
type liveStacks struct {
	Mode       string        `json:"mode"`
	SampleRate uint64        `json:"sample_rate"`
	Libraries  []liveLibrary `json:"libraries"`
	Top        []liveStack   `json:"top"` // by live bytes, then bytes allocated
	Records    int           `json:"records"`
}

type liveLibrary struct {
	Name       string `json:"name"`
	LiveBytes  uint64 `json:"live_bytes"`
	LiveBlocks uint64 `json:"live_blocks"`
	AllocBytes uint64 `json:"alloc_bytes"`
}

type liveStack struct {
	Tag        string   `json:"tag"`
	Library    string   `json:"library"`
	LiveBytes  uint64   `json:"live_bytes"`
	LiveBlocks uint64   `json:"live_blocks"`
	AllocBytes uint64   `json:"alloc_bytes"`
	Frames     []string `json:"frames"` // innermost first, at most liveFrames
	More       int      `json:"more_frames"`
}

const (
	liveTop    = 10 // stacks per process
	liveFrames = 16 // frames per stack
)

func newLiveView(rep *reporter.Report, now time.Time) *liveView {
	v := &liveView{T: now.UnixMilli(), Processes: []liveProcess{}}
	for _, p := range rep.Processes {
		lp := liveProcess{PID: p.PID, Command: p.Command, Ended: p.Ended, Tags: []liveTag{}, Budgets: []liveBudget{},
			Heap: liveHeap{p.Heap.LiveBytes, p.Heap.MappedBytes, p.Heap.FreeCachedBytes, p.Heap.BookkeepingBytes}}
		if lp.Command == nil {
			lp.Command = []string{}
		}
		names := make([]string, len(p.Tags))
		for i, t := range p.Tags {
			lp.Tags = append(lp.Tags, liveTag{t.Name, t.LiveBytes, t.LiveBlocks, t.AllocBytes, t.PeakLiveBytes, t.PeakLiveBytesUpper, t.Peak()})
			names[i] = t.Name
		}
		lp.Levels = newLiveLevels(p.Tags, reporter.TagTree(names))
		for _, b := range p.Budgets {
			lp.Budgets = append(lp.Budgets, liveBudget{Tag: b.Tag, LimitBytes: b.LimitBytes, Policy: b.Policy,
				ChargedBytes: b.ChargedBytes, Crossings: b.Crossings, Refused: b.Refused, Over: b.Over})
		}
		if st := p.Stacks; st != nil {
			ls := &liveStacks{Mode: st.Mode, SampleRate: st.SampleRate, Libraries: []liveLibrary{}, Top: []liveStack{}, Records: len(st.Records)}
			for _, l := range st.Libraries {
				ls.Libraries = append(ls.Libraries, liveLibrary{l.Name, l.LiveBytes, l.LiveBlocks, l.AllocBytes})
			}
			idx := make([]int, len(st.Records))
			for i := range idx {
				idx[i] = i
			}
			sort.SliceStable(idx, func(a, b int) bool {
				ra, rb := &st.Records[idx[a]], &st.Records[idx[b]]
				if ra.LiveBytes != rb.LiveBytes {
					return ra.LiveBytes > rb.LiveBytes
				}
				return ra.AllocBytes > rb.AllocBytes
			})
			for _, i := range idx[:min(liveTop, len(idx))] {
				r := &st.Records[i]
				s := liveStack{Tag: r.Tag, Library: r.Library, LiveBytes: r.LiveBytes, LiveBlocks: r.LiveBlocks, AllocBytes: r.AllocBytes, Frames: []string{}}
				for j, f := range r.Frames {
					if j == liveFrames {
						s.More = len(r.Frames) - j
						break
					}
					s.Frames = append(s.Frames, f.String())
				}
				ls.Top = append(ls.Top, s)
			}
			lp.Stacks = ls
		}
		v.Processes = append(v.Processes, lp)
	}
	return v
}

// serveLive answers /api/live: the newest sample's view, or one taken
// now before the first sample.
func (s *server) serveLive(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	v := s.latest
	s.mu.Unlock()
	if v == nil {
		rep, err := s.snap()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		v = newLiveView(rep, time.Now())
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// pageCSP lets the page run its own script (by hash) and fetch from its
// own origin, and nothing else: no other script, no inline event handler,
// no image or frame from elsewhere.
var pageCSP = "default-src 'none'; script-src 'sha256-" + scriptHash() + "'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func scriptHash() string {
	h := sha256.Sum256([]byte(pageScript))
	return base64.StdEncoding.EncodeToString(h[:])
}

func servePage(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(pageHead)+len(pageScript)+len(pageTail)))
	_, _ = io.WriteString(w, pageHead)
	_, _ = io.WriteString(w, pageScript)
	_, _ = io.WriteString(w, pageTail)
}

const pageHead = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tagalloc: live heap</title>
<style>
body { font: 14px sans-serif; margin: 20px; color: #222; }
h1 { font-size: 20px; margin: 0 0 6px; } h2 { font-size: 16px; margin: 22px 0 6px; }
nav a, nav button { margin-right: 10px; }
button[aria-pressed="true"] { font-weight: bold; }
#chartbox { position: relative; width: 900px; }
#chart { border: 1px solid #ccc; background: #fff; }
#chart text { font: 11px sans-serif; fill: #444; }
#chart .axis-title { font-weight: bold; }
#chart .grid { stroke: #eee; }
#hover { position: absolute; pointer-events: none; background: rgba(255,255,255,.95); border: 1px solid #999; padding: 4px 8px; font-size: 12px; white-space: nowrap; }
#hover[hidden] { display: none; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 5px; vertical-align: middle; }
#legend { list-style: none; padding: 0; margin: 6px 0; display: flex; flex-wrap: wrap; gap: 4px 18px; max-width: 900px; }
table { border-collapse: collapse; margin-top: 4px; } td, th { padding: 2px 10px; text-align: right; vertical-align: top; white-space: nowrap; }
td.name, th.name { text-align: left; } .note { color: #666; }
button.fold { border: none; background: none; padding: 0 4px 0 0; cursor: pointer; font: inherit; }
tr.level > td.name { font-weight: bold; }
tr.budget.over { color: #b00; font-weight: bold; }
ol.frames { margin: 0; padding-left: 22px; text-align: left; font: 12px monospace; white-space: normal; }
</style></head>
<body>
<h1>tagalloc: live heap</h1>
<div id="procs" class="note"></div>
<nav>
View: <button type="button" id="view-tag" aria-pressed="true">per tag</button><button type="button" id="view-library" aria-pressed="false">per library</button>
· <a id="flamegraph" href="/debug/pprof/ui/">flame graph (pprof)</a>
<a href="/debug/pprof/">/debug/pprof/</a>
<a href="/metrics">/metrics</a>
<a href="/api/report">/api/report</a>
<span id="status" class="note"></span>
</nav>
<p id="viewnote" class="note"></p>
<div id="chartbox"><svg id="chart" width="900" height="340" role="img" aria-label="live bytes over time"></svg><div id="hover" role="tooltip" hidden></div></div>
<ul id="legend"></ul>
<h2 id="tags-title">Tags (exact)</h2>
<p id="tags-note" class="note">Tags nest by path (gfx/webgl/textures): a level in bold holds the sums of the tags under it and has no peak of its own (-); (own) is a tag's own bytes beside the tags under it.</p>
<table id="tags"><thead><tr><th class="name">pid/tag</th><th>live</th><th>live blocks</th><th>peak</th><th>allocated in all</th></tr></thead><tbody></tbody></table>
<section id="budgets-section" hidden>
<h2>Budgets</h2>
<p class="note">A budget limits the live bytes of a tag and every tag under it. Charged: their live bytes plus what each thread reserved above its own (at most 64 KiB a thread). Past the limit, fail refuses the allocation (NULL), notify calls the program back, observe counts.</p>
<table id="budgets"><thead><tr><th class="name">pid/tag</th><th>charged</th><th>limit</th><th>charged/limit</th><th class="name">policy</th><th>refused</th><th>crossings</th><th class="name">now</th></tr></thead><tbody></tbody></table>
</section>
<h2>Heap</h2>
<table id="heap"><thead><tr><th class="name">pid</th><th>live</th><th>mapped</th><th>free, cached</th><th>bookkeeping</th></tr></thead><tbody></tbody></table>
<section id="stacks-section">
<h2>Libraries (estimated from sampled stacks)</h2>
<p id="stacks-note" class="note"></p>
<table id="libraries"><thead><tr><th class="name">pid/library</th><th>live</th><th>live blocks</th><th>allocated in all</th></tr></thead><tbody></tbody></table>
<h2>Top stacks by live bytes (estimated)</h2>
<table id="stacks"><thead><tr><th>#</th><th class="name">pid/tag</th><th class="name">library</th><th>live</th><th>allocated in all</th><th class="name">frames (innermost first)</th></tr></thead><tbody></tbody></table>
</section>
<script>`

const pageTail = `</script></body></html>
`

// pageScript draws /api/history and /api/live. Names are text, always:
// text() and textContent, never innerHTML.
const pageScript = `
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const colors = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf"];
const W = 900, H = 340, M = {l: 80, r: 20, t: 16, b: 46};
const MAXSERIES = 10;
const units = ["B","KiB","MiB","GiB","TiB","PiB"];
let view = new URLSearchParams(location.search).get("view") === "library" ? "library" : "tag";
let hist = [], live = null, hoverT = null, drawn = null;
const folded = new Set(); // "pid\npath" of the levels folded by a click
const colorOf = {tag: new Map(), library: new Map()};

function h(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function s(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.appendChild(document.createTextNode(String(text)));
  return e;
}
function human(b) {
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(b < 10 ? 2 : 1) : String(Math.round(b))) + " " + units[i];
}
function clock(t) {
  const d = new Date(t), p = n => String(n).padStart(2, "0");
  return p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
}
function colorFor(k) {
  const m = colorOf[view];
  if (!m.has(k)) m.set(k, colors[m.size % colors.length]);
  return m.get(k);
}
function swatch(c) { const e = h("span", {class: "swatch"}); e.style.background = c; return e; }
function points() { return hist.map(p => (view === "library" ? p.libraries : p.live) || {}); }

// byteAxis: a top value and a step in a binary unit, about 5 ticks.
function byteAxis(max) {
  let k = 0;
  while (max >= 1024 ** (k + 1) && k < units.length - 1) k++;
  const scale = 1024 ** k, m = Math.max(max / scale, 1e-9), raw = m / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(f => f * p).find(v => v >= raw);
  const top = Math.ceil(m / step - 1e-9) * step;
  let dec = 0;
  while (dec < 3 && Math.abs(step * 10 ** dec - Math.round(step * 10 ** dec)) > 1e-6) dec++;
  const ticks = [];
  for (let v = 0; v <= top + step / 2; v += step) ticks.push({v: v * scale, label: v === 0 ? "0" : (k ? v.toFixed(dec) : String(Math.round(v))) + " " + units[k]});
  return {top: top * scale, ticks: ticks};
}
const timeSteps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200].map(v => v * 1000);
function timeTicks(t0, t1) {
  const step = timeSteps.find(v => (t1 - t0) / v <= 8) || 3600000 * 4;
  const out = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
  return out;
}

function draw() {
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const pts = points(), legend = document.getElementById("legend");
  legend.replaceChildren();
  document.getElementById("view-tag").setAttribute("aria-pressed", String(view === "tag"));
  document.getElementById("view-library").setAttribute("aria-pressed", String(view === "library"));
  const hasLib = hist.some(p => p.libraries);
  document.getElementById("view-library").disabled = !hasLib && view !== "library";
  document.getElementById("viewnote").textContent = view === "library"
    ? (hasLib ? "Live bytes per library (the first frame outside libc and the allocator), estimated from sampled stacks." : "No stacks: per-library figures need tagalloc run --stacks sampled.")
    : "Live bytes per tag, exact (the allocator's books).";
  const x0 = M.l, x1 = W - M.r, y0 = H - M.b, y1 = M.t;
  const now = hist.length ? hist[hist.length - 1].t : Date.now();
  const t0 = hist.length ? hist[0].t : now - 1000, t1 = Math.max(now, t0 + 1000);
  const last = pts.length ? pts[pts.length - 1] : {};
  const peak = {};
  for (const p of pts) for (const k in p) peak[k] = Math.max(peak[k] || 0, p[k]);
  const keys = Object.keys(peak).sort((a, b) => ((last[b] || 0) - (last[a] || 0)) || (peak[b] - peak[a]) || (a < b ? -1 : 1));
  const shown = keys.slice(0, MAXSERIES);
  const ax = byteAxis(Math.max(1, ...shown.map(k => peak[k])));
  const X = t => x0 + (t - t0) / (t1 - t0) * (x1 - x0), Y = v => y0 - v / ax.top * (y0 - y1);
  // axes: grid, ticks with labels, titles
  const yaxis = s("g", {id: "yaxis"}), xaxis = s("g", {id: "xaxis"});
  for (const tk of ax.ticks) {
    yaxis.appendChild(s("line", {class: "grid", x1: x0, x2: x1, y1: Y(tk.v), y2: Y(tk.v)}));
    yaxis.appendChild(s("text", {class: "tick", x: x0 - 6, y: Y(tk.v) + 4, "text-anchor": "end"}, tk.label));
  }
  yaxis.appendChild(s("line", {x1: x0, x2: x0, y1: y0, y2: y1, stroke: "#444"}));
  yaxis.appendChild(s("text", {class: "axis-title", transform: "translate(14," + ((y0 + y1) / 2) + ") rotate(-90)", "text-anchor": "middle"},
    view === "library" ? "live bytes (estimated)" : "live bytes"));
  for (const t of timeTicks(t0, t1)) {
    xaxis.appendChild(s("line", {x1: X(t), x2: X(t), y1: y0, y2: y0 + 5, stroke: "#444"}));
    xaxis.appendChild(s("text", {class: "tick", x: X(t), y: y0 + 18, "text-anchor": "middle"}, clock(t)));
  }
  xaxis.appendChild(s("line", {x1: x0, x2: x1, y1: y0, y2: y0, stroke: "#444"}));
  xaxis.appendChild(s("text", {class: "axis-title", x: (x0 + x1) / 2, y: H - 6, "text-anchor": "middle"}, "time (local, hh:mm:ss)"));
  svg.append(yaxis, xaxis);
  const series = s("g", {id: "series"});
  for (const k of shown) {
    const d = [];
    hist.forEach((p, i) => { if (k in pts[i]) d.push(X(p.t).toFixed(1) + "," + Y(pts[i][k]).toFixed(1)); });
    const pl = s("polyline", {points: d.join(" "), fill: "none", stroke: colorFor(k), "stroke-width": 2, "data-series": k});
    pl.appendChild(s("title", {}, k));
    series.appendChild(pl);
  }
  svg.appendChild(series);
  const cursor = s("g", {id: "cursor", visibility: "hidden"});
  svg.appendChild(cursor);
  const overlay = s("rect", {id: "overlay", x: x0, y: y1, width: x1 - x0, height: y0 - y1, fill: "transparent"});
  svg.appendChild(overlay);
  if (!hist.length) svg.appendChild(s("text", {x: (x0 + x1) / 2, y: (y0 + y1) / 2, "text-anchor": "middle"}, "waiting for the first sample"));
  drawn = {X: X, Y: Y, t0: t0, t1: t1, x0: x0, x1: x1, pts: pts, shown: shown, keys: keys};
  for (const k of shown) {
    const li = h("li", {class: "legend-item"});
    li.append(swatch(colorFor(k)), h("span", {class: "legend-name"}, k), document.createTextNode(" "), h("span", {class: "legend-value"}, human(last[k] || 0)));
    legend.appendChild(li);
  }
  if (keys.length > shown.length) legend.appendChild(h("li", {class: "note"}, (keys.length - shown.length) + " more not drawn (see the tables)"));
  if (!keys.length && hist.length) legend.appendChild(h("li", {class: "note"}, "nothing to draw yet"));
  overlay.addEventListener("mousemove", ev => {
    const r = svg.getBoundingClientRect();
    hoverT = t0 + (ev.clientX - r.left - x0) / (x1 - x0) * (t1 - t0);
    showAt(hoverT, ev.clientX - r.left, ev.clientY - r.top);
  });
  overlay.addEventListener("mouseleave", () => { hoverT = null; showAt(null); });
  showAt(hoverT);
}

// showAt fills the hover box with the values at the sample nearest t (the
// newest when t is null), and shows it with a cursor when t is the pointer's.
function showAt(t, px, py) {
  const box = document.getElementById("hover"), cursor = document.getElementById("cursor");
  if (!drawn || !hist.length) { box.hidden = true; return; }
  let i = hist.length - 1;
  if (t !== null && t !== undefined) {
    let best = Infinity;
    hist.forEach((p, j) => { const d = Math.abs(p.t - t); if (d < best) { best = d; i = j; } });
  }
  const p = hist[i], vals = drawn.pts[i];
  box.replaceChildren(h("div", {class: "hover-time"}, clock(p.t) + (i === hist.length - 1 ? " (newest)" : "")));
  const tbl = h("table");
  for (const k of drawn.shown) {
    const tr = h("tr"), name = h("td", {class: "name"});
    name.append(swatch(colorFor(k)), document.createTextNode(k));
    tr.append(name, h("td", {class: "hover-value"}, k in vals ? human(vals[k]) : "-"));
    tbl.appendChild(tr);
  }
  box.appendChild(tbl);
  cursor.replaceChildren();
  const x = drawn.X(p.t);
  cursor.appendChild(s("line", {x1: x, x2: x, y1: M.t, y2: H - M.b, stroke: "#888", "stroke-dasharray": "3,3"}));
  for (const k of drawn.shown) if (k in vals) cursor.appendChild(s("circle", {cx: x, cy: drawn.Y(vals[k]), r: 3.5, fill: colorFor(k)}));
  const hovering = t !== null && t !== undefined;
  cursor.setAttribute("visibility", hovering ? "visible" : "hidden");
  box.hidden = !hovering;
  if (hovering) {
    box.style.left = Math.min(px + 14, W - 180) + "px";
    box.style.top = Math.max(py - 10, 0) + "px";
  }
}

function row(cells) {
  const tr = h("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : h("td", {}, c));
  return tr;
}
function nameCell(text, color) {
  const td = h("td", {class: "name"});
  if (color) td.appendChild(swatch(color));
  td.appendChild(document.createTextNode(text));
  return td;
}

// levelRows adds a level of the tag tree to rows, then (unless folded)
// its children, indented: a tag's row has its series' colour and peak; a
// level's has a fold button, the sums of the tags under it and no peak.
function levelRows(rows, pid, l, depth) {
  const td = h("td", {class: "name"});
  if (depth) td.style.paddingLeft = (10 + 18 * depth) + "px";
  const key = pid + "\n" + l.path;
  if (l.children) {
    const open = !folded.has(key);
    const b = h("button", {type: "button", class: "fold", "aria-expanded": String(open), title: open ? "fold" : "unfold"}, open ? "\u25be" : "\u25b8");
    b.addEventListener("click", () => { if (open) folded.add(key); else folded.delete(key); tables(); });
    td.appendChild(b);
  }
  const series = pid + "/" + l.path;
  if (l.tag && colorOf.tag.get(series)) td.appendChild(swatch(colorOf.tag.get(series)));
  td.appendChild(document.createTextNode(depth ? l.name : pid + "/" + l.name));
  const tr = row([td, human(l.live_bytes), String(l.live_blocks), l.tag ? l.peak : "-", human(l.alloc_bytes)]);
  tr.setAttribute("class", l.tag ? "tag" : "level");
  tr.setAttribute("data-depth", String(depth));
  tr.setAttribute("title", pid + "/" + l.path);
  rows.push(tr);
  if (l.children && !folded.has(key)) for (const c of l.children) levelRows(rows, pid, c, depth + 1);
}

function tables() {
  const procs = live ? live.processes : [];
  const pd = document.getElementById("procs");
  pd.replaceChildren();
  for (const p of procs) pd.appendChild(h("div", {class: "proc"}, "pid " + p.pid + ": " + p.command.join(" ") + " (" + p.ended + ")"));
  const tops = [];
  for (const p of procs) for (const l of p.levels || []) tops.push([p.pid, l]);
  tops.sort((a, b) => b[1].live_bytes - a[1].live_bytes);
  const tagRows = [];
  for (const [pid, l] of tops) levelRows(tagRows, pid, l, 0);
  document.querySelector("#tags tbody").replaceChildren(...tagRows);
  // budgets: a row per budget, the tag's name as text (nameCell); the
  // section shows only when a process has one
  const budgetRows = [];
  for (const p of procs) for (const b of p.budgets || []) {
    const share = b.limit_bytes ? (100 * b.charged_bytes / b.limit_bytes).toFixed(1) + "%" : "-";
    const tr = row([nameCell(p.pid + "/" + b.tag), human(b.charged_bytes), human(b.limit_bytes), share, nameCell(b.policy),
      String(b.refused), String(b.crossings), nameCell(b.over ? (b.policy === "fail" ? "OVER: refusing" : "OVER") : "under")]);
    tr.setAttribute("class", b.over ? "budget over" : "budget");
    budgetRows.push(tr);
  }
  document.querySelector("#budgets tbody").replaceChildren(...budgetRows);
  document.getElementById("budgets-section").hidden = !budgetRows.length;
  document.querySelector("#heap tbody").replaceChildren(...procs.map(p =>
    row([nameCell(String(p.pid)), human(p.heap.live_bytes), human(p.heap.mapped_bytes), human(p.heap.free_cached_bytes), human(p.heap.bookkeeping_bytes)])));
  const withStacks = procs.filter(p => p.stacks);
  document.getElementById("stacks-note").textContent = withStacks.length
    ? "Sampled " + withStacks.map(p => "pid " + p.pid + ": one sample per " + human(p.stacks.sample_rate) + " on average, " + p.stacks.records + " stacks").join("; ") + ". The flame graph shows them all."
    : "Stacks are off: run tagalloc run --stacks sampled --serve ADDRESS -- PROG for libraries, stacks and the flame graph.";
  const libRows = [];
  for (const p of withStacks) for (const l of p.stacks.libraries) libRows.push([p.pid + "/" + l.name, l]);
  libRows.sort((a, b) => b[1].live_bytes - a[1].live_bytes);
  document.querySelector("#libraries tbody").replaceChildren(...libRows.map(([k, l]) =>
    row([nameCell(k, colorOf.library.get(k)), human(l.live_bytes), String(l.live_blocks), human(l.alloc_bytes)])));
  const stackRows = [];
  for (const p of withStacks) for (const st of p.stacks.top) stackRows.push([p.pid, st]);
  stackRows.sort((a, b) => (b[1].live_bytes - a[1].live_bytes) || (b[1].alloc_bytes - a[1].alloc_bytes));
  document.querySelector("#stacks tbody").replaceChildren(...stackRows.map(([pid, st], i) => {
    const frames = h("td", {class: "name"}), ol = h("ol", {class: "frames"});
    for (const f of st.frames) ol.appendChild(h("li", {class: "frame"}, f));
    if (st.more_frames) ol.appendChild(h("li", {class: "note"}, st.more_frames + " more"));
    frames.appendChild(ol);
    return row([String(i + 1), nameCell(pid + "/" + st.tag), nameCell(st.library), human(st.live_bytes), human(st.alloc_bytes), frames]);
  }));
}

async function refresh() {
  try {
    const [hr, lr] = await Promise.all([fetch("/api/history"), fetch("/api/live")]);
    if (!hr.ok || !lr.ok) throw new Error("HTTP " + (hr.ok ? lr.status : hr.status));
    hist = await hr.json(); live = await lr.json();
    document.getElementById("status").textContent = "updated " + clock(Date.now());
  } catch (e) {
    document.getElementById("status").textContent = "not updated: " + e.message;
  }
  draw();
  tables();
}
function setView(v) {
  view = v;
  const u = new URL(location.href);
  if (v === "library") u.searchParams.set("view", "library"); else u.searchParams.delete("view");
  history.replaceState(null, "", u);
  draw(); tables();
}
document.getElementById("view-tag").addEventListener("click", () => setView("tag"));
document.getElementById("view-library").addEventListener("click", () => setView("library"));
refresh(); setInterval(refresh, 1000);
`
