// The scripts that draw `ckpt report` and `ckpt bench --html` pages from
// their data (the page's #ckpt-data, html_page.h). Chart.js draws; these
// only choose what goes into which chart.
#include "html_page.h"

namespace ckpt::cli {
namespace {

constexpr std::string_view kRoot = R"js(
const S = D.steps;
const n = S.step.length;
document.title = 'ckpt report: ' + D.root;
const durable = i => S.tier[i] !== 'local';
const kept = i => durable(i) && S.state[i] === 'kept';
let inRoot = 0, deletedCount = 0, localCount = 0;
for (let i = 0; i < n; ++i) {
  if (kept(i)) ++inRoot; else if (durable(i)) ++deletedCount; else ++localCount;
}
const head = section('Root ' + D.root,
  'checkpoints in the root: ' + inRoot + (D.catalog ? '; from the catalog ' +
  D.catalog + ', deleted: ' + deletedCount + ', steps of the job\'s local ' +
  'tier: ' + localCount : '') + '. Written ' + timeTextNow() + '.');
function timeTextNow() { return timeText(D.generated_unix_ms); }
if (n > MAX_POINTS) {
  note(head, 'Long series are drawn in ' + MAX_POINTS + ' buckets, each ' +
       'as its largest value; tables list the newest saves.');
}
function pick(filter, ycol) {
  const xs = [], ys = [], rows = [];
  for (let i = 0; i < n; ++i) {
    if (filter(i)) { xs.push(S.step[i]); ys.push(S[ycol][i]); rows.push(i); }
  }
  return bucketed(xs, ys, rows);
}
// What one checkpoint's point stands for, in its tooltip.
function checkpointText(i) {
  return 'step ' + S.step[i] + ': ' + timeText(S.time[i]) + ', ' +
         bytesText(S.bytes[i]) + ' written, ' +
         (S.full[i] ? 'full' : 'incremental') + ', ' + S.tier[i] + ' tier' +
         (durable(i) && !kept(i) ? ', deleted' : '');
}
// 1. Timeline: when each save happened, and what it wrote.
const t0 = n ? Math.min.apply(null, S.time.filter(t => t > 0)) : 0;
S.elapsed_ms = S.time.map(t => t > 0 ? t - t0 : null);
const elapsedUnit = unitOf(S.elapsed_ms, MS_UNITS);
const timeline = section('Timeline',
  'Each point is a checkpoint: its step, and the wall time of its commit ' +
  'after the first one\'s (hover for the time, bytes, tier and kind). ' +
  'A gap means no save; a steep climb, saves far apart.');
addChart(timeline, 'timeline', {type: 'scatter', data: {datasets: [
  {label: 'full', data: pick(i => kept(i) && S.full[i], 'elapsed_ms'), backgroundColor: '#1f77b4'},
  {label: 'incremental', data: pick(i => kept(i) && !S.full[i], 'elapsed_ms'), backgroundColor: '#2ca02c'},
  {label: 'local tier', data: pick(i => !durable(i), 'elapsed_ms'), backgroundColor: '#9467bd'},
  {label: 'deleted', data: pick(i => durable(i) && !kept(i), 'elapsed_ms'), backgroundColor: '#999999'}]
  .map(d => Object.assign(d, {data: scaled(d.data, elapsedUnit)}))},
  options: {scales: {x: stepAxis(), y: unitAxis('after the first save', elapsedUnit)},
            plugins: {tooltip: {callbacks: {label: c => checkpointText(c.raw.i)}}}}});
const sizes = section('Bytes written',
  'What each save wrote to its own step directory (full saves write ' +
  'everything; incremental ones only what changed) and, for incremental ' +
  'ones, the bytes they reference in earlier checkpoints instead.');
const bytesUnit = unitOf(S.bytes.concat(S.referenced), BYTE_UNITS);
addChart(sizes, 'bytes', {type: 'scatter', data: {datasets: [
  {label: 'written (full)', data: pick(i => durable(i) && S.full[i], 'bytes'), backgroundColor: '#1f77b4'},
  {label: 'written (incremental)', data: pick(i => !S.full[i], 'bytes'), backgroundColor: '#2ca02c'},
  {label: 'referenced', data: pick(i => !S.full[i], 'referenced'), backgroundColor: '#ff7f0e'}]
  .map(d => Object.assign(d, {data: scaled(d.data, bytesUnit)}))},
  options: {scales: {x: stepAxis(), y: unitAxis('bytes', bytesUnit)},
            plugins: {tooltip: unitTooltip(BYTE_UNITS, bytesUnit)}}});
const durations = section('Save durations',
  'Recorded by each save in its commit record: the whole save, the commit ' +
  'part of it, and how long the training loop was held (the stall: the ' +
  'whole save for a synchronous one, drawn over it; an asynchronous save ' +
  'holds it only for the copy into staging memory). Saves older than the ' +
  'recording have no points.');
const durationUnit = unitOf(S.save_ms, MS_UNITS);
addChart(durations, 'durations', {type: 'line', data: {datasets: [
  {label: 'save', data: pick(kept, 'save_ms'), borderColor: '#1f77b4', pointRadius: 3},
  {label: 'commit', data: pick(kept, 'commit_ms'), borderColor: '#ff7f0e', pointRadius: 3},
  {label: 'stall', data: pick(kept, 'stall_ms'), borderColor: '#d62728', pointRadius: 3}]
  .map(d => Object.assign(d, {data: scaled(d.data, durationUnit)}))},
  options: {scales: {x: stepAxis(), y: unitAxis('duration', durationUnit)},
            plugins: {tooltip: unitTooltip(MS_UNITS, durationUnit)}}});
const speed = section('Save throughput',
  'What each save wrote over how long it took, in bytes per second (KB/s, ' +
  'MB/s, GB/s: powers of 1000)' + (D.disk ?
  '; the line is the raw write speed of the same disk, as ckpt bench ' +
  'measured it (' + D.disk.file + ').' : '. Pass --bench with the output of ' +
  '`ckpt bench --json` on the same disk to draw its raw write speed beside.') +
  ' Small saves are dominated by their fixed costs (files, fsyncs, commit).');
S.rate = S.gbps.map(g => g === null ? null : g * 1e9);
const diskRate = D.disk ? D.disk.raw_write_gbps * 1e9 : null;
const rateUnit = unitOf(S.rate.concat([diskRate]), RATE_UNITS);
const speedSets = [{label: 'save',
  data: scaled(pick(i => kept(i) && S.rate[i] !== null, 'rate'), rateUnit),
  borderColor: '#1f77b4', pointRadius: 3, showLine: false}];
if (D.disk) {
  const xs = speedSets[0].data.map(p => p.x);
  const lo = xs.length ? Math.min.apply(null, xs) : 0;
  const hi = xs.length ? Math.max.apply(null, xs) : 1;
  speedSets.push({label: 'disk raw write (ckpt bench)',
    data: [{x: lo, y: diskRate / rateUnit.size}, {x: hi, y: diskRate / rateUnit.size}],
    borderColor: '#d62728', pointRadius: 0, showLine: true});
}
addChart(speed, 'throughput', {type: 'scatter', data: {datasets: speedSets},
  options: {scales: {x: stepAxis(), y: unitAxis('write speed', rateUnit)},
            plugins: {tooltip: unitTooltip(RATE_UNITS, rateUnit)}}});
// 2. Lineage: an edge from a checkpoint to each step whose data it uses.
const lineage = section('Incremental lineage',
  'Each checkpoint at (step, chain): full saves on the bottom row, an ' +
  'incremental save one row above its parent. Each line joins a ' +
  'checkpoint to a step whose data objects it references, as its manifest ' +
  'lists them (depends_on); hover a point for the bytes it shares.');
const chainOf = {};
for (let i = 0; i < n; ++i) chainOf[S.step[i]] = S.chain[i];
const newest = n ? S.step[n - 1] : 0;
const windowFrom = n > MAX_POINTS ? S.step[n - MAX_POINTS] : -1;
const edgePts = [], drawnEdges = [];
for (const [from, to, bytes] of D.edges) {
  if (from < windowFrom) continue;
  edgePts.push({x: from, y: chainOf[from] || 0, bytes: bytes});
  edgePts.push({x: to, y: chainOf[to] || 0, bytes: bytes});
  edgePts.push({x: NaN, y: NaN});
  drawnEdges.push([from, to]);
}
if (windowFrom >= 0) {
  note(lineage, 'Drawn: the newest ' + MAX_POINTS + ' checkpoints (steps ' +
       windowFrom + ' to ' + newest + ') and their edges; all ' +
       D.edges.length + ' edges are in the page data.');
}
const nodePts = [];
for (let i = 0; i < n; ++i) {
  if (S.step[i] >= windowFrom) nodePts.push({x: S.step[i], y: S.chain[i]});
}
addChart(lineage, 'lineage', {type: 'scatter', data: {datasets: [
  {label: 'references (edges)', data: edgePts, showLine: true, spanGaps: false,
   borderColor: '#ff7f0e', pointRadius: 0, borderWidth: 1.5},
  {label: 'checkpoints', data: nodePts, backgroundColor: '#1f77b4', pointRadius: 3,
   pointStyle: 'circle'}]},
  options: {normalized: false, scales: {x: stepAxis(), y: axis('incremental saves in a row (chain)',
                                                            {beginAtZero: true, ticks: {precision: 0}})},
            plugins: {tooltip: {callbacks: {label: function (c) {
              const p = c.raw;
              return 'step ' + p.x + (p.bytes !== undefined ? ', ' + bytesText(p.bytes) + ' shared' : '');
            }}}}}});
summaryExtra.edges_drawn = drawnEdges;
if (D.edges.length) {
  addTable(lineage, ['step', 'references step', 'bytes shared'],
           D.edges.slice(-20).map(e => [e[0], e[1], bytesText(e[2])]));
} else {
  note(lineage, 'No checkpoint references another: every save was full.');
}
// 3. Retention.
const retention = section('Retention',
  'Kept: the checkpoint is in the root now. Deleted: the catalog recorded ' +
  'it and retention or a delete removed it since (known only with ' +
  '--catalog). Steps a kept incremental checkpoint references are kept ' +
  'with it.');
const deleted = S.step.filter((s, i) => durable(i) && !kept(i));
addTable(retention, ['state', 'checkpoints', 'steps (the newest 30)'],
         [['kept', inRoot, S.step.filter((s, i) => kept(i)).slice(-30).join(', ')],
          ['deleted', deleted.length, deleted.slice(-30).join(', ') || '-']]);
// 4. Ranks. A job of one rank has no straggler to name: its section shows
// that rank's write and wait alone.
let world = 1;
for (let i = 0; i < n; ++i) if (kept(i) && S.write_max[i] !== null) world = Math.max(world, S.world[i]);
const rankUnit = unitOf(S.write_max.concat(S.wait_max), MS_UNITS);
const rankOptions = {scales: {x: stepAxis(), y: unitAxis('duration', rankUnit)},
                     plugins: {tooltip: unitTooltip(MS_UNITS, rankUnit)}};
if (world > 1) {
  const stragglers = section('Ranks: stragglers',
    'Per save: the slowest and the fastest rank\'s write (its data object ' +
    'and index) and the longest wait before writing (a rank arriving late ' +
    'makes the others wait). A slowest write far above the fastest is a ' +
    'straggler: the bars below name it for the newest save.');
  addChart(stragglers, 'stragglers', {type: 'line', data: {datasets: [
    {label: 'slowest write', data: pick(kept, 'write_max'), borderColor: '#d62728', pointRadius: 3},
    {label: 'fastest write', data: pick(kept, 'write_min'), borderColor: '#2ca02c', pointRadius: 3},
    {label: 'longest wait', data: pick(kept, 'wait_max'), borderColor: '#7f7f7f', pointRadius: 3}]
    .map(d => Object.assign(d, {data: scaled(d.data, rankUnit)}))}, options: rankOptions});
  if (D.ranks && D.ranks.world > 1) {
    note(stragglers, 'Step ' + D.ranks.step + ' (' + D.ranks.world +
         ' ranks): rank ' + D.ranks.slowest + ' wrote slowest.');
    const barUnit = unitOf(D.ranks.write_ms.map((w, k) => w + D.ranks.wait_ms[k]), MS_UNITS);
    addChart(stragglers, 'ranks', {type: 'bar', data: {
      labels: D.ranks.rank.map(r => 'rank ' + r), datasets: [
      {label: 'write', data: D.ranks.write_ms.map(v => v / barUnit.size), backgroundColor: '#1f77b4'},
      {label: 'wait', data: D.ranks.wait_ms.map(v => v / barUnit.size), backgroundColor: '#aaaaaa'}]},
      options: {scales: {x: {stacked: true}, y: unitAxis('duration', barUnit, {stacked: true})},
                plugins: {tooltip: {callbacks: {label: c => c.dataset.label + ': ' + msText(c.raw * barUnit.size)}}}}});
  }
} else {
  const ranks = section('Ranks',
    'Every save of this job had one rank: per save, its write (its data ' +
    'object and index) and its wait before writing. A job of several ranks ' +
    'gets the slowest and the fastest rank\'s write here, and its stragglers.');
  addChart(ranks, 'stragglers', {type: 'line', data: {datasets: [
    {label: 'write', data: pick(kept, 'write_max'), borderColor: '#1f77b4', pointRadius: 3},
    {label: 'wait', data: pick(kept, 'wait_max'), borderColor: '#7f7f7f', pointRadius: 3}]
    .map(d => Object.assign(d, {data: scaled(d.data, rankUnit)}))}, options: rankOptions});
}
// 5. Metrics.
const names = Object.keys(D.metrics);
const metrics = section('Metrics',
  names.length ? 'The metrics each save recorded (SaveOptions::metrics), by step.' :
  'No save recorded metrics.');
names.forEach(function (name, k) {
  const pts = D.metrics[name];
  addChart(metrics, 'metric-' + k, {type: 'line', data: {datasets: [
    {label: name, data: bucketed(pts.map(p => p[0]), pts.map(p => p[1])),
     borderColor: ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd'][k % 5], pointRadius: 3}]},
    options: {scales: {x: stepAxis(), y: axis(name)}}});
});
// 6. The newest saves, as a table.
const table = section('Newest saves', 'The last 25 checkpoints.');
const rows = [];
for (let i = Math.max(0, n - 25); i < n; ++i) {
  rows.push([S.step[i], timeText(S.time[i]), bytesText(S.bytes[i]),
             S.full[i] ? 'full' : 'incremental', S.tier[i], S.state[i],
             S.save_ms[i], S.commit_ms[i], S.stall_ms[i], rateText(S.rate[i]),
             S.async[i] === null ? null : (S.async[i] ? 'async' : 'sync'),
             S.world[i], S.world[i] > 1 ? S.slowest_rank[i] : null]);
}
addTable(table, ['step', 'committed (UTC)', 'written', 'kind', 'tier', 'state',
                 'save ms', 'commit ms', 'stall ms', 'throughput', 'mode',
                 'ranks', 'slowest rank'], rows);
)js";

constexpr std::string_view kCatalog = R"js(
document.title = 'ckpt report: catalog ' + D.catalog;
const jobs = section('Jobs',
  D.jobs.length + ' jobs in ' + D.catalog + ': each with its newest ' +
  'committed checkpoint and, for its first metric, the best one (' +
  (D.goal === 'max' ? 'highest' : 'lowest') + ' value).');
addChart(jobs, 'jobs', {type: 'bar', data: {labels: D.jobs.map(j => j.job_id),
  datasets: [{label: 'committed checkpoints', data: D.jobs.map(j => j.committed), backgroundColor: '#1f77b4'},
             {label: 'deleted checkpoints', data: D.jobs.map(j => j.deleted), backgroundColor: '#bbbbbb'}]},
  options: {scales: {y: axis('checkpoints', {ticks: {precision: 0}})}}});
addTable(jobs, ['job', 'root', 'committed', 'newest step', 'newest at (UTC)', 'best', 'best step', 'best value'],
  D.jobs.map(j => [j.job_id, j.root, j.committed,
    j.newest ? j.newest.step : null, j.newest ? timeText(j.newest.created_unix_ms) : null,
    j.best ? j.best.metric : null, j.best ? j.best.step : null, j.best ? number(j.best.value) : null]));
const curves = section('Metric curves',
  'Every metric the jobs recorded, by step, one line per job.');
const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b'];
Object.keys(D.curves).forEach(function (metric, k) {
  const perJob = D.curves[metric];
  addChart(curves, 'curve-' + k, {type: 'line', data: {datasets: Object.keys(perJob).map(function (job, i) {
    const pts = perJob[job];
    return {label: job, data: bucketed(pts.map(p => p[0]), pts.map(p => p[1])),
            borderColor: colors[i % colors.length], pointRadius: 3};
  })}, options: {plugins: {title: {display: true, text: metric}},
                 scales: {x: stepAxis(), y: axis(metric)}}});
});
)js";

constexpr std::string_view kBench = R"js(
document.title = 'ckpt bench';
const R = D.report;
const F = R.figures;
const head = section('ckpt bench',
  'State: ' + bytesText(R.config.state_bytes) + ' in ' + R.config.tensors +
  ' tensors, ' + R.config.runs + ' rounds, in ' + R.config.dir + '. ckpt\'s ' +
  'save and load beside the raw disk and memory copies of the same bytes ' +
  '(medians; higher is better).');
// The figures are in GB/s; an axis of them is written in the unit each
// tick reaches, at 1, 2 and 5 of each power of ten.
function rateLogAxis() {
  return {type: 'logarithmic', title: {display: true, text: 'bytes per second (logarithmic)'},
          ticks: {callback: function (v) {
            const lead = v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9));
            return [1, 2, 5].some(k => Math.abs(lead - k) < 1e-6) ? rateText(v * 1e9) : '';
          }}};
}
const order = D.order.filter(k => F[k] !== undefined);
const labels = order.map(k => k.replace('_gbps', ''));
const values = order.map(k => F[k]);
const barColors = order.map(k => /^(save|load)/.test(k) ? '#d62728' : '#1f77b4');
if (D.peers) {
  // The peers' saves, each a bar beside ckpt's (their own run: its state
  // size is in the label when it differs).
  const size = D.peers.state_bytes === R.config.state_bytes ? '' :
      ' (' + bytesText(D.peers.state_bytes) + ' state)';
  for (const name of Object.keys(D.peers.gbps)) {
    labels.push('peers: ' + name + ' save' + size);
    values.push(D.peers.gbps[name]);
    barColors.push(name === 'ckpt' ? '#ff9896' : '#2ca02c');
  }
  note(head, 'Green: the peers (bench/peers/peers.py, its own run), saving ' +
       'the same kind of state with fsync.');
}
addChart(head, 'medians', {type: 'bar', data: {labels: labels,
  datasets: [{label: 'median', data: values, backgroundColor: barColors}]},
  options: {indexAxis: 'y', scales: {x: rateLogAxis()},
            plugins: {tooltip: {callbacks: {label: c => 'median: ' + rateText(c.raw * 1e9)}}}}}, true);
const rounds = section('Per round', 'Each round\'s rate: the spread behind each median.');
const keys = Object.keys(D.rounds);
const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b',
                '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
addChart(rounds, 'rounds', {type: 'line', data: {datasets: keys.map(function (k, i) {
  return {label: k, data: D.rounds[k].map((v, r) => ({x: r + 1, y: v})),
          borderColor: colors[i % colors.length], pointRadius: 3};
})}, options: {scales: {x: axis('round', {type: 'linear', ticks: {precision: 0}}),
                       y: rateLogAxis()},
               plugins: {tooltip: {callbacks: {label: c => c.dataset.label + ': ' + rateText(c.raw.y * 1e9)}}}}}, true);
const ratios = section('Ratios and targets', '');
addTable(ratios, ['ratio', 'value'], Object.keys(R.ratios).map(k => [k, number(R.ratios[k])]));
addTable(ratios, ['target', 'met'], Object.keys(R.targets).map(k => [k, String(R.targets[k])]));
)js";

}  // namespace

std::string_view RootReportScript() { return kRoot; }
std::string_view CatalogReportScript() { return kCatalog; }
std::string_view BenchReportScript() { return kBench; }

}  // namespace ckpt::cli
