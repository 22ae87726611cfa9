/* The interactive attention views of course_utils.viz (lesson 04): head view and model view.
 *
 * viz/interactive.py inlines this file into every view's output, after two variables:
 *   D     the view's data: kind ("head" or "model"), layers, heads, layer (index of the layer shown
 *         first), qt / kt (query and key tokens), colors and dashed (one per head), and
 *         w[layer][head]: a head's [queries x keys] weights, row by row, in thousandths (integers).
 *   VIEW  the id of the element to draw into (data-cu-view="VIEW").
 * No libraries and no network: the output works offline and in a saved HTML page.
 */
var NS = "http://www.w3.org/2000/svg";
var NO_SELECT = "user-select:none;-webkit-user-select:none;";  /* double-clicks must not select text */
var INK = "color:#222;background:#fff;";  /* the view's own colours, whatever the notebook's theme */

function el(tag, attrs, parent, svg) {
  var e = svg ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (var a in attrs) {
    if (a === "text") e.textContent = attrs[a];
    else e.setAttribute(a, attrs[a]);
  }
  if (parent) parent.appendChild(e);
  return e;
}

/* matplotlib's viridis at 10 stops: the same colours as the static pictures */
var VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]];
function viridis(t) {
  t = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
  var i = Math.min(Math.floor(t), VIRIDIS.length - 2), f = t - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return "rgb(" + [0, 1, 2].map(function (c) { return Math.round(a[c] + f * (b[c] - a[c])); }).join(",") + ")";
}

/* dark text on light head colours, white on dark ones: readable either way */
function ink(hex) {
  var n = parseInt(hex.slice(1), 16);
  return 0.299 * (n >> 16 & 255) + 0.587 * (n >> 8 & 255) + 0.114 * (n & 255) > 140 ? "#222" : "#fff";
}

function textWidth(tokens) {
  var m = 0;
  tokens.forEach(function (t) { m = Math.max(m, t.length); });
  return 12 + 7.5 * m;
}

function weight(w, nk, i, j) { return w[i * nk + j] / 1000; }  /* query i, key j */

/* Bipartite lines of the chosen heads of one layer: queries left, keys right.
 * Hovering a token keeps only its lines; with one head shown, the weights appear on the
 * other side (a query's weights next to the keys, a key's weights next to the queries). */
function drawHeads(box, qt, kt, heads, colors, dashed, weights, active) {
  box.innerHTML = "";
  var nq = qt.length, nk = kt.length, rowH = 22, top = 12, numW = 40, gap = 160;
  var wq = numW + textWidth(qt), wk = textWidth(kt);
  var svg = el("svg", {width: wq + gap + wk + numW, height: top + rowH * Math.max(nq, nk) + 4, "class": "cu-svg",
    style: NO_SELECT}, box, true);
  var y = function (i) { return top + rowH * i + rowH / 2; };
  var lines = el("g", {}, svg, true), labels = el("g", {}, svg, true);
  heads.forEach(function (h, hi) {
    if (!active[hi]) return;
    var w = weights[hi], off = (hi - (heads.length - 1) / 2) * Math.min(2, 12 / heads.length);
    for (var i = 0; i < nq; i++) {
      for (var j = 0; j < nk; j++) {
        var v = weight(w, nk, i, j);
        if (v < 0.01) continue;
        var attrs = {x1: wq, y1: y(i) + off, x2: wq + gap, y2: y(j) + off, stroke: colors[hi], "stroke-width": 2.5,
          "stroke-opacity": v, "class": "cu-line", "data-q": i, "data-k": j, "data-head": h};
        if (dashed[hi]) attrs["stroke-dasharray"] = "6 3";
        el("line", attrs, lines, true);
      }
    }
  });
  var nums = {q: [], k: []};  /* the numbers written next to the queries (q) and the keys (k) */
  var locked = null;
  function focus(side, idx) {
    var all = lines.childNodes;
    for (var n = 0; n < all.length; n++) {
      var keep = idx === null || all[n].getAttribute(side === "q" ? "data-q" : "data-k") == idx;
      all[n].style.display = keep ? "" : "none";
    }
    svg.querySelectorAll(".cu-tok").forEach(function (t) {
      var on = idx !== null && t.getAttribute("data-side") === side && t.getAttribute("data-i") == idx;
      t.setAttribute("font-weight", on ? "bold" : "normal");
    });
    nums.q.concat(nums.k).forEach(function (t) { t.textContent = ""; });
    var shown = heads.filter(function (h, hi) { return active[hi]; });
    if (idx === null || shown.length !== 1) return;  /* numbers for one head only: several would overlap */
    var w = weights[heads.indexOf(shown[0])];
    if (side === "q") {
      for (var j = 0; j < nk; j++) nums.k[j].textContent = weight(w, nk, idx, j).toFixed(2);
    } else {
      for (var i = 0; i < nq; i++) nums.q[i].textContent = weight(w, nk, i, idx).toFixed(2);
    }
  }
  function token(side, i, x, anchor, text) {
    var t = el("text", {x: x, y: y(i) + 4, "text-anchor": anchor, "class": "cu-tok", "data-side": side, "data-i": i,
      style: "cursor:pointer", fill: "#222"}, labels, true);
    t.textContent = text;
    t.addEventListener("mouseenter", function () { if (locked === null) focus(side, i); });
    t.addEventListener("mouseleave", function () { if (locked === null) focus(side, null); });
    t.addEventListener("click", function () {
      var same = locked && locked[0] === side && locked[1] === i;
      locked = same ? null : [side, i];
      focus(side, same ? null : i);
    });
  }
  function number(side, i, x, anchor) {
    nums[side].push(el("text", {x: x, y: y(i) + 4, "text-anchor": anchor, "font-size": 11, fill: "#555",
      "class": "cu-num", "data-side": side, "data-i": i}, labels, true));
  }
  for (var i = 0; i < nq; i++) {
    token("q", i, wq - 6, "end", qt[i]);
    number("q", i, 2, "start");
  }
  for (var j = 0; j < nk; j++) {
    token("k", j, wq + gap + 6, "start", kt[j]);
    number("k", j, wq + gap + wk, "start");
  }
  return svg;
}

function headView(live) {
  var layer = D.layer, active = D.heads.map(function () { return true; });
  var bar = el("div", {"class": "cu-controls", style: NO_SELECT + "margin:2px 0 6px 0"}, live);
  if (D.layers.length > 1) {
    el("span", {text: "Layer: "}, bar);
    var sel = el("select", {"class": "cu-layer", style: INK}, bar);
    D.layers.forEach(function (l, li) {
      var o = el("option", {value: li, text: String(l)}, sel);
      if (li === layer) o.selected = true;
    });
    sel.addEventListener("change", function () { layer = +sel.value; draw(); });
  }
  el("span", {text: " Heads: "}, bar);
  var boxes = D.heads.map(function (h, hi) {
    var b = el("span", {"class": "cu-head", "data-head": h, text: String(h),
      title: "head " + h + ": click to show/hide, double-click to show only it",
      style: "display:inline-block;min-width:18px;margin:0 2px;padding:0 3px;text-align:center;cursor:pointer;" +
        "border-radius:3px;color:" + ink(D.colors[hi]) + ";background:" + D.colors[hi] +
        (D.dashed[hi] ? ";outline:2px dashed #222" : "")}, bar);
    b.addEventListener("click", function () { active[hi] = !active[hi]; draw(); });
    b.addEventListener("dblclick", function () {
      active = active.map(function (x, k) { return k === hi; });
      draw();
    });
    return b;
  });
  el("div", {style: "color:#555;font-size:11px", text: "Hover a token to see only its lines (and, with one head " +
    "shown, its weights); click it to keep them. Queries left, keys right; line opacity = weight."}, live);
  var box = el("div", {}, live);
  function draw() {
    boxes.forEach(function (b, hi) { b.style.opacity = active[hi] ? 1 : 0.3; });
    drawHeads(box, D.qt, D.kt, D.heads, D.colors, D.dashed, D.w[layer], active);
  }
  draw();
}

/* A horizontal colour bar: 0 .. vmax (a weight), as in the static picture. */
function colorBar(parent, vmax) {
  var stops = VIRIDIS.map(function (c, s) {
    return "rgb(" + c.join(",") + ") " + Math.round(100 * s / (VIRIDIS.length - 1)) + "%";
  });
  var bar = el("div", {"class": "cu-colorbar", "data-vmax": vmax.toFixed(3),
    style: NO_SELECT + "display:flex;align-items:center;gap:6px;font-size:11px;margin:4px 0"}, parent);
  el("span", {text: "attention weight: 0"}, bar);
  el("span", {style: "display:inline-block;width:160px;height:10px;background:linear-gradient(to right," +
    stops.join(",") + ")"}, bar);
  el("span", {text: vmax.toFixed(2)}, bar);
}

function modelView(live) {
  var nq = D.qt.length, nk = D.kt.length, size = Math.max(36, Math.min(72, Math.floor(760 / D.heads.length) - 8));
  var vmax = 1;  /* colours run from 0 to the largest weight shown (in thousandths), as in the static picture */
  D.w.forEach(function (l) { l.forEach(function (h) { h.forEach(function (v) { if (v > vmax) vmax = v; }); }); });
  el("div", {style: "color:#555;font-size:11px", text: "Rows: layers, columns: heads; each square is one head " +
    "(rows: queries, columns: keys). Hover a square to read a weight, click it to see its lines."}, live);
  colorBar(live, vmax / 1000);
  var hover = el("div", {"class": "cu-hover", style: "font-size:12px;min-height:16px;color:#222",
    text: "\u00a0"}, live);
  /* JupyterLab's theme colours tables (in the dark theme: light text, dark rows): the grid sets its own */
  var table = el("table", {"class": "cu-grid", style: NO_SELECT + "border-collapse:collapse;" + INK}, live);
  var head = el("tr", {style: INK}, table);
  el("td", {style: INK}, head);
  D.heads.forEach(function (h) {
    el("td", {text: "head " + h, style: INK + "font-size:10px;text-align:center;padding:0"}, head);
  });
  var detail = el("div", {"class": "cu-detail", style: "margin-top:8px"}, live);
  var current = null;
  D.layers.forEach(function (l, li) {
    var row = el("tr", {style: INK}, table);
    el("td", {text: "layer " + l, style: INK + "font-size:10px;padding:0 4px 0 0;white-space:nowrap"}, row);
    D.heads.forEach(function (h, hi) {
      var cell = el("td", {style: INK + "padding:1px"}, row);
      var c = el("canvas", {width: size, height: size, title: "layer " + l + ", head " + h, "class": "cu-thumb",
        "data-layer": l, "data-head": h, style: "display:block;cursor:pointer;outline:2px solid transparent"}, cell);
      var ctx = c.getContext("2d"), w = D.w[li][hi];
      for (var i = 0; i < nq; i++) {
        for (var j = 0; j < nk; j++) {
          ctx.fillStyle = viridis(w[i * nk + j] / vmax);
          ctx.fillRect(Math.floor(j * size / nk), Math.floor(i * size / nq), Math.ceil(size / nk), Math.ceil(size / nq));
        }
      }
      c.addEventListener("mousemove", function (e) {  /* which query (row) and key (column) is under the mouse */
        var r = c.getBoundingClientRect();
        var i = Math.min(nq - 1, Math.floor((e.clientY - r.top) / r.height * nq));
        var j = Math.min(nk - 1, Math.floor((e.clientX - r.left) / r.width * nk));
        hover.textContent = "layer " + l + ", head " + h + ": query \u201c" + D.qt[i] + "\u201d \u2192 key \u201c" +
          D.kt[j] + "\u201d = " + weight(w, nk, i, j).toFixed(3);
      });
      c.addEventListener("mouseenter", function () { if (c !== current) c.style.outline = "2px solid #999"; });
      c.addEventListener("mouseleave", function () {
        if (c !== current) c.style.outline = "2px solid transparent";
        hover.textContent = "\u00a0";
      });
      c.addEventListener("click", function () {
        if (current) current.style.outline = "2px solid transparent";
        current = c;
        c.style.outline = "2px solid #d55e00";
        detail.innerHTML = "";
        el("div", {text: "layer " + l + ", head " + h + ": hover a token to see only its lines and weights",
          style: "font-weight:bold"}, detail);
        drawHeads(el("div", {}, detail), D.qt, D.kt, [h], [D.colors[hi]], [D.dashed[hi]], [w], [true]);
      });
    });
  });
}

function init(root) {
  if (!root || root.getAttribute("data-cu-view") !== VIEW || root.getAttribute("data-cu-ready")) return;
  root.setAttribute("data-cu-ready", "1");
  var live = root.querySelector(".cu-live");
  (D.kind === "head" ? headView : modelView)(live);
  root.querySelector(".cu-fallback").style.display = "none";  /* the script runs: show the live view */
  var caption = root.querySelector(".cu-static");  /* "a static picture ...": no longer true */
  if (caption) caption.style.display = "none";
  live.style.display = "block";
}

var me = document.currentScript;
init(me && me.previousElementSibling);
var roots = document.querySelectorAll('[data-cu-view="' + VIEW + '"]');
for (var r = 0; r < roots.length; r++) init(roots[r]);
