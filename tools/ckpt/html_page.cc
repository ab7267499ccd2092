#include "html_page.h"

#include <string>

#include "common.h"
#include "util/names.h"

namespace ckpt::cli {
namespace {

// Text placed inside a <script> element must not close it: "</" becomes
// "<\/", which JavaScript and JSON read as the same two characters.
std::string ScriptSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') {
      out += '\\';
    }
  }
  return out;
}

// JSON placed inside a <script> element: every '<' (which JSON holds only
// inside strings) as \u003c, so that no user's text ("<!--<script>", a
// closing tag) can change how the HTML parser reads the element.
std::string JsonInScript(const nlohmann::json& data) {
  const std::string text = data.dump(-1, ' ', /*ensure_ascii=*/true,
                                     nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Runs before Chart.js: every error and console.error from then on lands
// in #ckpt-errors, where a person (and a test reading the DOM) sees it.
constexpr std::string_view kErrorCapture = R"js(
window.ckptErrors = [];
function ckptNoteError(message) {
  window.ckptErrors.push(String(message));
  var e = document.getElementById('ckpt-errors');
  if (e) { e.textContent = window.ckptErrors.join('\n'); e.hidden = false; }
}
window.addEventListener('error', function (ev) {
  ckptNoteError((ev.message || 'error') + ' at ' + (ev.lineno || '?') + ':' +
                (ev.colno || '?'));
});
window.addEventListener('unhandledrejection', function (ev) {
  ckptNoteError('unhandled rejection: ' + ev.reason);
});
(function () {
  var original = console.error;
  console.error = function () {
    ckptNoteError(Array.prototype.slice.call(arguments).join(' '));
    original.apply(console, arguments);
  };
})();
)js";

// The helpers every page's script uses: sections, charts with the options
// a large report needs (no animation, no parsing), tables, bucketing of
// long series, and the summary written once everything is drawn.
constexpr std::string_view kCommon = R"js(
const D = JSON.parse(document.getElementById('ckpt-data').textContent);
const charts = {};
const summaryExtra = {};
const MAX_POINTS = 1500;
function section(title, help) {
  const s = document.createElement('section');
  const h = document.createElement('h2');
  h.textContent = title;
  s.appendChild(h);
  if (help) {
    const p = document.createElement('p');
    p.className = 'help';
    p.textContent = help;
    s.appendChild(p);
  }
  document.getElementById('ckpt-content').appendChild(s);
  return s;
}
// Lines and points of one chart can coincide (a synchronous save's stall is
// its whole save; one rank is both the slowest and the fastest): each
// series gets its own dash and point style, and a later one, thinner, is
// drawn over an earlier one, so that every series stays visible.
const DASHES = [[], [10, 5], [6, 4], [12, 3, 2, 3]];
const POINT_STYLES = ['circle', 'rect', 'triangle', 'rectRot', 'crossRot', 'star'];
function distinctSeries(datasets) {
  const n = datasets.length;
  datasets.forEach(function (d, i) {
    const own = k => d[k] !== undefined;
    if (!own('borderDash')) d.borderDash = DASHES[i % DASHES.length];
    if (!own('pointStyle')) {
      d.pointStyle = d.showLine ? 'line' : POINT_STYLES[i % POINT_STYLES.length];
    }
    if (!own('borderWidth')) d.borderWidth = n > 1 ? 2.5 + 2 * (n - 1 - i) / (n - 1) : 2;
    if (!own('backgroundColor')) d.backgroundColor = d.borderColor;
    if (!own('order')) d.order = n - i;  // drawn from the highest order up
    if (!own('pointRadius')) d.pointRadius = 4;
  });
}
// A plot squeezed by its legend or axes grows its box; so does a bar
// chart with many bars on its side. Sections then take their charts'
// height: nothing is cut off at any window size.
const MIN_PLOT = 160;
function addChart(parent, id, config, tall) {
  const box = document.createElement('div');
  box.className = tall ? 'chart tall' : 'chart';
  const canvas = document.createElement('canvas');
  canvas.id = id;
  box.appendChild(canvas);
  parent.appendChild(box);
  const options = config.options || {};
  const plugins = options.plugins || {};
  // The legend lists series in the order given, whatever their drawing
  // order, each as it is drawn: a line chart's as a stretch of its line
  // (one stroke: a box's would fill its dash's gaps), a scatter chart's as
  // its point (or its line).
  const labels = {sort: (a, b) => a.datasetIndex - b.datasetIndex,
    // A legend point takes its point's style; a line's is its line's.
    generateLabels: chart => Chart.defaults.plugins.legend.labels.generateLabels(chart).map(function (item) {
      const d = chart.data.datasets[item.datasetIndex];
      if (config.type !== 'line' && !d.showLine) return item;
      return Object.assign(item, {lineDash: d.borderDash, lineWidth: d.borderWidth,
                                  strokeStyle: d.borderColor});
    })};
  if (config.type === 'line') {
    Object.assign(labels, {usePointStyle: true, pointStyle: 'line', pointStyleWidth: 36});
  }
  if (config.type === 'scatter') Object.assign(labels, {usePointStyle: true, boxHeight: 8});
  plugins.legend = Object.assign({labels: labels}, plugins.legend || {});
  options.plugins = plugins;
  config.options = Object.assign({
    animation: false, responsive: true, maintainAspectRatio: false,
    normalized: true, interaction: {mode: 'nearest', intersect: false}
  }, options);
  if (config.type !== 'bar') {
    config.options.parsing = false;
    distinctSeries(config.data.datasets);
  }
  const chart = charts[id] = new Chart(canvas, config);
  let want = MIN_PLOT;
  if (config.type === 'bar' && options.indexAxis === 'y') {
    want = Math.max(want, 22 * config.data.labels.length);
  }
  const plot = chart.chartArea.bottom - chart.chartArea.top;
  if (plot < want) {
    box.style.height = (box.clientHeight + want - plot) + 'px';
    chart.resize();
  }
  return chart;
}
function addTable(parent, headers, rows) {
  const t = document.createElement('table');
  const head = t.createTHead().insertRow();
  for (const h of headers) {
    const th = document.createElement('th');
    th.textContent = h;
    head.appendChild(th);
  }
  const body = t.createTBody();
  for (const r of rows) {
    const tr = body.insertRow();
    for (const v of r) tr.insertCell().textContent = v === null ? '-' : v;
  }
  parent.appendChild(t);
  return t;
}
function note(parent, text) {
  const p = document.createElement('p');
  p.className = 'note';
  p.textContent = text;
  parent.appendChild(p);
}
// At most MAX_POINTS points: contiguous buckets, each drawn as its largest
// value (a spike stays visible). Points with a null y are left out.
// Each point keeps its row of the page's data (`i`) where `rows` is given.
function bucketed(xs, ys, rows) {
  const pts = [];
  for (let i = 0; i < xs.length; ++i) {
    if (ys[i] === null || ys[i] === undefined) continue;
    pts.push(rows ? {x: xs[i], y: ys[i], i: rows[i]} : {x: xs[i], y: ys[i]});
  }
  if (pts.length <= MAX_POINTS) return pts;
  const out = [];
  const per = Math.ceil(pts.length / MAX_POINTS);
  for (let i = 0; i < pts.length; i += per) {
    let best = pts[i];
    for (let k = i + 1; k < Math.min(i + per, pts.length); ++k) {
      if (pts[k].y > best.y) best = pts[k];
    }
    out.push(best);
  }
  return out;
}
// Units of bytes, rates and durations: a value is shown in the largest
// unit it reaches, with at most three significant digits.
const BYTE_UNITS = [['B', 1], ['KiB', 1024], ['MiB', 1048576],
                    ['GiB', 1073741824], ['TiB', 1099511627776]];
const RATE_UNITS = [['B/s', 1], ['KB/s', 1e3], ['MB/s', 1e6], ['GB/s', 1e9],
                    ['TB/s', 1e12]];
const MS_UNITS = [['ms', 1], ['s', 1e3], ['min', 6e4], ['h', 3.6e6]];
function unitOf(values, units) {
  let top = 0;
  for (const v of values) {
    if (typeof v === 'number' && Math.abs(v) > top) top = Math.abs(v);
  }
  let u = units[0];
  for (const c of units) if (top >= c[1]) u = c;
  return {name: u[0], size: u[1]};
}
function unitText(v, units) {
  if (v === null || v === undefined) return null;
  const u = unitOf([v], units);
  return Number((v / u.size).toPrecision(3)) + ' ' + u.name;
}
function bytesText(b) { return unitText(b, BYTE_UNITS); }
function rateText(bytesPerSecond) { return unitText(bytesPerSecond, RATE_UNITS); }
function msText(ms) { return unitText(ms, MS_UNITS); }
// The decimals that write `v` exactly (a tick spacing: 0.25 needs 2).
function decimalsOf(v) {
  for (let d = 0; d < 6; ++d) {
    const scaled = Math.abs(v) * Math.pow(10, d);
    if (Math.abs(scaled - Math.round(scaled)) < 1e-6 * Math.max(1, scaled)) return d;
  }
  return 6;
}
// An axis in one unit for a whole series: its points are given in that
// unit (`scaled`), so Chart.js's round ticks are round in it, and every tick
// is written with the decimals of the spacing: no two labels alike. It
// starts at zero, so that a series of equal values still has a range.
function unitAxis(title, unit, extra) {
  return Object.assign({type: 'linear', beginAtZero: true,
    title: {display: true, text: title},
    ticks: {callback: function (v, i, ticks) {
      const spacing = ticks.length > 1 ? Math.abs(ticks[1].value - ticks[0].value) : 1;
      const zero = Math.abs(v) < spacing / 1e6;  // not 0.0, nor -0.0
      return (zero ? '0' : v.toFixed(decimalsOf(spacing))) + ' ' + unit.name;
    }}}, extra || {});
}
function scaled(points, unit) {
  return points.map(p => Object.assign({}, p, {y: p.y / unit.size}));
}
// Steps are whole numbers: no tick between two.
function stepAxis() {
  return {type: 'linear', title: {display: true, text: 'step'},
          ticks: {precision: 0}};
}
// A tooltip line of a point drawn in `unit`, written in its own unit.
function unitTooltip(units, unit) {
  return {callbacks: {label: function (c) {
    return c.dataset.label + ': ' + unitText(c.raw.y * unit.size, units) +
           ' at step ' + c.raw.x;
  }}};
}
function number(v) {
  return typeof v === 'number' ? Number(v.toPrecision(4)) : v;
}
function timeText(ms) {
  return ms ? new Date(ms).toISOString().replace('.000Z', 'Z') : '-';
}
function axis(title, extra) {
  return Object.assign({title: {display: true, text: title}}, extra || {});
}
function ckptFinish() {
  const summary = {charts: {}};
  for (const id of Object.keys(charts)) {
    const c = charts[id];
    summary.charts[id] = {
      type: c.config.type,
      width: c.width,
      height: c.height,
      datasets: c.data.datasets.map(function (d, i) {
        return {label: d.label, points: d.data.length,
                drawn: c.getDatasetMeta(i).data.length,
                color: d.borderColor || d.backgroundColor,
                dash: d.borderDash || [], point: d.pointStyle || null};
      }),
      // Bottom to top: the last one is drawn over the others.
      drawn_order: c.getSortedVisibleDatasetMetas().reverse()
                       .map(m => c.data.datasets[m.index].label),
      axes: {}
    };
    for (const [key, scale] of Object.entries(c.scales)) {
      summary.charts[id].axes[key] = scale.ticks.map(t => String(t.label));
    }
  }
  // Each section's and chart box's size against its content's: a test
  // (and a person) sees whether anything is cut off.
  summary.sections = Array.from(document.querySelectorAll('section'), function (s) {
    return {title: s.querySelector('h2').textContent,
            notes: Array.from(s.querySelectorAll('.note'), p => p.textContent),
            client: [s.clientWidth, s.clientHeight],
            scroll: [s.scrollWidth, s.scrollHeight],
            boxes: Array.from(s.querySelectorAll('.chart'), b => ({
              id: b.firstChild.id, client: [b.clientWidth, b.clientHeight],
              scroll: [b.scrollWidth, b.scrollHeight]}))};
  });
  summary.page_width = [document.documentElement.clientWidth,
                        document.documentElement.scrollWidth];
  Object.assign(summary, summaryExtra);
  summary.errors = window.ckptErrors.length;
  // From the start of the navigation to every chart drawn: the page's own
  // time, without the browser's start.
  summary.page_ms = Math.round(performance.now());
  window.ckptReport = {data: D, charts: charts, summary: summary};
  const s = document.getElementById('ckpt-summary');
  s.textContent = JSON.stringify(summary);
}
)js";

constexpr std::string_view kStyle = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin: 1.6em 0 0.3em; }
.help { color: #555; margin: 0 0 0.5em; max-width: 60em; }
.note { color: #8a5a00; }
.chart { position: relative; height: 260px; max-width: 1100px; }
.chart.tall { height: 360px; }
table { border-collapse: collapse; font-size: 12px; margin-top: 0.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f3f3f3; }
#ckpt-errors { color: #b00; white-space: pre-wrap; }
)css";

}  // namespace

Status WriteHtmlPage(const std::string& path, std::string_view title,
                     const nlohmann::json& data, std::string_view script) {
  const std::string_view chart_js = ChartJsSource();
  if (chart_js.empty()) {
    return FailedPreconditionError(
        "write " + path +
        ": this ckpt was built without Chart.js (install Debian's "
        "libjs-chart.js, scripts/install-deps.sh, and build again)");
  }
  std::string page;
  page.reserve(chart_js.size() + 4096);
  page += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  page += "<title>" + HtmlEscape(title) + "</title>\n<style>";
  page += kStyle;
  page += "</style>\n<script>";
  page += kErrorCapture;
  page += "</script>\n<script>";
  page += ScriptSafe(chart_js);
  page += "</script>\n</head><body>\n<h1>" + HtmlEscape(title) + "</h1>\n";
  page += "<pre id=\"ckpt-errors\" hidden></pre>\n";
  page += "<div id=\"ckpt-content\"></div>\n";
  page += "<script type=\"application/json\" id=\"ckpt-data\">";
  page += JsonInScript(data);
  page += "</script>\n<pre id=\"ckpt-summary\" hidden></pre>\n<script>";
  page += kCommon;
  page += "try {\n";
  page += ScriptSafe(script);
  page += "\n} catch (e) { ckptNoteError(e && e.stack ? e.stack : e); }\n";
  page += "ckptFinish();\n</script>\n</body></html>\n";

  // Replaced whole (a report is written again and again to one page), or
  // not at all.
  return WriteFileAtomically(path, {page}, /*force=*/true)
      .WithContext("write the page " + Quote(path));
}

}  // namespace ckpt::cli
