// redetermined web UI: charts (uPlot) with a colour per series that stays apart from the others
// at 200 series, and a legend that hides, shows and highlights each one. No build step.
"use strict";

const PALETTE = ["#2f6feb", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#a61e4d", "#5c940d", "#d9480f", "#364fc7"];
const MANY = 16; // from this many series on: thinner lines, no point markers, stronger dimming

// OKLCH (perceptual lightness, chroma, hue in degrees) as sRGB hex; chroma is lowered until the
// colour fits in sRGB.
function oklchHex(L, C, h) {
  const enc = (c) => Math.round(255 * Math.min(1, Math.max(0, c <= 0.0031308 ? 12.92 * c : 1.055 * Math.pow(c, 1 / 2.4) - 0.055)));
  for (let c = C; ; c -= 0.005) {
    const a = c * Math.cos((h * Math.PI) / 180);
    const b = c * Math.sin((h * Math.PI) / 180);
    const l = (L + 0.3963377774 * a + 0.2158037573 * b) ** 3;
    const m = (L - 0.1055613458 * a - 0.0638541728 * b) ** 3;
    const s = (L - 0.0894841775 * a - 1.291485548 * b) ** 3;
    const rgb = [4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s, -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s, -0.0041960863 * l - 0.7034186147 * m + 1.707614701 * s];
    if (c <= 0 || rgb.every((v) => v >= -1e-4 && v <= 1.0001)) return "#" + rgb.map((v) => enc(v).toString(16).padStart(2, "0")).join("");
  }
}

// n distinct colours. Up to 10: a hand-picked palette. More: hues evenly spaced in OKLCH (where
// equal steps look equal) on each of 2 to 4 lightness levels; series next to each other in the
// list get different levels and hues far apart. The closest two of 64 colours are ~9 CIELAB ΔE apart,
// of 200 ~3 (still distinct; the legend and the hover highlight single one out).
function seriesColors(n) {
  if (n <= PALETTE.length) return PALETTE.slice(0, n);
  const levels = n <= 24 ? [0.5, 0.7] : n <= 80 ? [0.45, 0.6, 0.75] : [0.4, 0.52, 0.64, 0.76];
  const k = levels.length;
  const per = Math.ceil(n / k);
  const gcd = (a, b) => (b ? gcd(b, a % b) : a);
  let stride = Math.max(1, Math.round(per * 0.382)); // about the golden ratio round the hue circle
  while (gcd(stride, per) !== 1) stride++;
  return Array.from({ length: n }, (_, i) => {
    const slot = (Math.floor(i / k) * stride) % per;
    return oklchHex(levels[i % k], 0.15, 25 + (slot * 360) / per + (i % k) * 137.5);
  });
}

// Debiased exponential moving average, as TensorBoard's smoothing slider does.
function smooth(points, weight) {
  if (!weight) return points;
  let last = 0;
  let n = 0;
  return points.map(([x, y]) => {
    last = last * weight + (1 - weight) * y;
    n++;
    return [x, last / (1 - Math.pow(weight, n))];
  });
}

// Scatter plots get a margin so points at the ends are not cut in half.
function padRange(u, min, max) {
  const d = max - min || Math.abs(min) || 1;
  return [min - d * 0.08, max + d * 0.08];
}

// Align [[x, y], ...] series on one sorted x axis (null where a series has no point).
function align(seriesPoints) {
  const xs = [...new Set(seriesPoints.flatMap((pts) => pts.map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = seriesPoints.map((pts) => {
    const col = new Array(xs.length).fill(null);
    for (const [x, y] of pts) col[index.get(x)] = y;
    return col;
  });
  return [xs, ...ys];
}

/**
 * Draw (or redraw) a chart in `container`.
 * series: [{label, points: [[x, y]], info?: string}]; options: {xLabel, yLabel, logY, pointsOnly,
 * empty, best?: labels best first (adds a "best 10" button to the legend)}.
 * The plotted points are written to container.dataset.series (JSON {label: [[x, y]]}) and to
 * window.detCharts[container.id], the colours to container.dataset.colors ({label: "#rrggbb"}),
 * so people and tests can read exactly what is drawn. Series hidden in the legend stay hidden
 * across redraws (container._hidden).
 */
function drawChart(container, series, options = {}) {
  const logY = !!options.logY;
  const colors = seriesColors(series.length);
  const shown = series.map((s, i) => ({ ...s, color: colors[i], points: logY ? s.points.filter((p) => p[1] > 0) : s.points }));
  const record = Object.fromEntries(shown.map((s) => [s.label, s.points]));
  container.dataset.series = JSON.stringify(record);
  container.dataset.colors = JSON.stringify(Object.fromEntries(shown.map((s) => [s.label, s.color])));
  window.detCharts = window.detCharts || {};
  window.detCharts[container.id] = record;
  container._hidden = container._hidden || new Set();
  const scrolled = (container.querySelector(".legend-items") || {}).scrollTop || 0;
  if (container._plot) {
    container._plot.destroy();
    container._plot = null;
  }
  container.querySelectorAll(".empty, .tip, .legend").forEach((n) => n.remove());
  if (!shown.some((s) => s.points.length)) {
    container.append(el("div", { class: "empty muted" }, options.empty || "No data yet."));
    return;
  }
  const many = shown.length >= MANY;
  const opts = {
    width: Math.max(320, container.clientWidth || 600),
    height: options.height || 280,
    scales: { x: options.pointsOnly ? { time: false, range: padRange } : { time: false }, y: logY ? { distr: 3 } : {} },
    axes: [{ label: options.xLabel || "batches" }, { label: options.yLabel || "", size: 60 }],
    legend: { show: false },
    cursor: { focus: { prox: 24 } },
    focus: { alpha: many ? 0.12 : 0.3 },
    series: [
      { label: options.xLabel || "batches" },
      ...shown.map((s) => ({
        label: s.label,
        show: !container._hidden.has(s.label),
        stroke: s.color,
        width: many ? 1.2 : 1.6,
        spanGaps: true,
        points: { show: options.pointsOnly || (!many && s.points.length < 30), size: options.pointsOnly ? 8 : 5 },
        paths: options.pointsOnly ? () => null : undefined,
      })),
    ],
    hooks: { setCursor: [(u) => hoverTip(u, container, shown)], setSeries: [(u, idx, o) => o && o.focus !== undefined && markFocus(container, o.focus ? idx : null)] },
  };
  container._plot = new uPlot(opts, align(shown.map((s) => s.points)), container);
  if (shown.length < 2) return;
  container.append(legend(container, shown, options.best));
  container.querySelector(".legend-items").scrollTop = scrolled;
  const focused = shown.findIndex((s) => s.label === container._focused);
  if (focused >= 0) container._plot.setSeries(focused + 1, { focus: true });
}

// The legend: a button per series (click hides or shows it; hovering it highlights its line and
// dims the others), and "all", "none" and, given the best-first labels, "best 10".
function legend(container, shown, best) {
  const u = container._plot;
  const hidden = container._hidden;
  const setShown = (labels) => {
    u.batch(() =>
      shown.forEach((s, i) => {
        const on = labels.has(s.label);
        if (on === !hidden.has(s.label)) return;
        if (on) hidden.delete(s.label);
        else hidden.add(s.label);
        u.setSeries(i + 1, { show: on });
        items[i].classList.toggle("off", !on);
      })
    );
  };
  const all = shown.map((s) => s.label);
  const items = shown.map((s, i) =>
    el(
      "button",
      {
        class: "legend-item" + (hidden.has(s.label) ? " off" : ""),
        "data-series": s.label,
        title: s.info ? `${s.label}\n${s.info}` : s.label,
        onclick: () => setShown(new Set(all.filter((l) => (l === s.label ? hidden.has(l) : !hidden.has(l))))),
        onmouseenter: () => {
          if (hidden.has(s.label)) return;
          container._focused = s.label; // kept across redraws while the pointer stays
          u.setSeries(i + 1, { focus: true });
        },
        onmouseleave: () => {
          container._focused = null;
          u.setSeries(null, { focus: false });
        },
      },
      el("span", { class: "swatch", style: `background:${s.color}` }),
      s.label
    )
  );
  const pick = (what, labels) => el("button", { class: "legend-pick", "data-pick": what, onclick: () => setShown(new Set(labels)) }, what);
  const picks = [pick("all", all), pick("none", [])];
  if (best && best.length > 10) picks.push(pick("best 10", best.slice(0, 10)));
  return el("div", { class: "legend" }, el("div", { class: "legend-picks muted" }, `${shown.length} series: `, picks), el("div", { class: "legend-items" + (shown.length >= MANY ? " many" : "") }, items));
}

// The focused line (hovered in the chart or in the legend) is drawn wider and its legend entry
// marked; idx null means none.
function markFocus(container, idx) {
  const u = container._plot;
  if (!u) return;
  const base = u.series.length - 1 >= MANY ? 1.2 : 1.6;
  u.series.forEach((s, i) => i > 0 && (s.width = i === idx ? 3 : base));
  container.querySelectorAll(".legend-item").forEach((item, i) => item.classList.toggle("focus", i + 1 === idx));
  u.redraw(false);
}

// Show the shown series nearest the cursor with its `info` (hyperparameters) in a tooltip.
function hoverTip(u, container, series) {
  let tip = container.querySelector(".tip");
  if (!tip) {
    tip = el("div", { class: "tip" });
    container.append(tip);
  }
  const idx = u.cursor.idx;
  if (idx === null || idx === undefined || u.cursor.top < 0) {
    tip.style.display = "none";
    return;
  }
  let best = -1;
  let bestDist = Infinity;
  series.forEach((s, i) => {
    const y = u.data[i + 1][idx];
    if (y === null || y === undefined || !u.series[i + 1].show) return;
    const d = Math.abs(u.valToPos(y, "y") - u.cursor.top);
    if (d < bestDist) {
      bestDist = d;
      best = i;
    }
  });
  if (best < 0 || bestDist > 40) {
    tip.style.display = "none";
    return;
  }
  const s = series[best];
  tip.textContent = `${s.label}\n${u.series[0].label} ${u.data[0][idx]}: ${fmtNum(u.data[best + 1][idx])}` + (s.info ? "\n" + s.info : "");
  tip.style.display = "block";
  tip.style.left = u.cursor.left + u.over.offsetLeft + 14 + "px";
  tip.style.top = u.cursor.top + u.over.offsetTop + 14 + "px";
}

// Charts follow the width of their cards.
window.addEventListener("resize", () => {
  for (const c of document.querySelectorAll(".chart")) {
    if (c._plot) c._plot.setSize({ width: Math.max(320, c.clientWidth), height: c._plot.height });
  }
});
