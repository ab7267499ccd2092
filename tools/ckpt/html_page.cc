#include "html_page.h"

#include <cstdio>
#include <fstream>

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
function addChart(parent, id, config, tall) {
  const box = document.createElement('div');
  box.className = tall ? 'chart tall' : 'chart';
  const canvas = document.createElement('canvas');
  canvas.id = id;
  box.appendChild(canvas);
  parent.appendChild(box);
  const options = config.options || {};
  config.options = Object.assign({
    animation: false, responsive: true, maintainAspectRatio: false,
    normalized: true, interaction: {mode: 'nearest', intersect: false}
  }, options);
  if (config.type !== 'bar') config.options.parsing = false;
  charts[id] = new Chart(canvas, config);
  return charts[id];
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
function bucketed(xs, ys) {
  const pts = [];
  for (let i = 0; i < xs.length; ++i) {
    if (ys[i] !== null && ys[i] !== undefined) pts.push({x: xs[i], y: ys[i]});
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
function bytesText(b) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (b >= 1024 && u + 1 < units.length) { b /= 1024; ++u; }
  return (u === 0 ? b : b.toFixed(1)) + ' ' + units[u];
}
function number(v) {
  return typeof v === 'number' ? Number(v.toPrecision(4)) : v;
}
function timeText(ms) {
  return ms ? new Date(ms).toISOString().replace('.000Z', 'Z') : '-';
}
function bytesAxis(title) {
  return {title: {display: true, text: title},
          ticks: {callback: function (v) { return bytesText(v); }}};
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
                drawn: c.getDatasetMeta(i).data.length};
      })
    };
  }
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

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return IOError("write " + Quote(tmp) + " failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return IOError("rename " + Quote(tmp) + " to " + Quote(path) + " failed");
  }
  return Status();
}

}  // namespace ckpt::cli
