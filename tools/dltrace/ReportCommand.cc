// dltrace report: one self-contained HTML page about a trace, to look at and to attach to a
// bug: the loss curve with the failure marked, learning rate, heat maps of the digests before
// the failure, step times, the failing sample, the triage verdict with the replay command,
// and every process on a timeline. Inline SVG only: no script, nothing fetched.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"
#include "tools/dltrace/OutputFile.h"
#include "tools/dltrace/ReportData.h"
#include "tools/dltrace/Svg.h"
#include "triage/Classifier.h"
#include "triage/TraceFacts.h"

namespace dlrr::tools {
namespace {

const char* kStyle =
    "body{font:14px/1.45 system-ui,-apple-system,'DejaVu Sans',sans-serif;margin:0;color:#222;background:#fff}"
    "header{background:#23313f;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:20px}"
    "header .cmd{font-family:monospace;font-size:13px;color:#cfe0ee;word-break:break-all}"
    "main{padding:8px 28px 40px;max-width:1000px}h2{font-size:16px;margin:26px 0 8px;border-bottom:1px solid #ddd;"
    "padding-bottom:4px}.verdict{border-left:5px solid #d62728;background:#fdf2f2;padding:10px 16px;margin-top:18px}"
    ".verdict.ok{border-color:#2ca02c;background:#f2fbf2}.verdict b{font-size:15px}"
    "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px 3px 0;text-align:left;vertical-align:top}"
    "th{color:#555;font-weight:600}pre,code{font-family:'DejaVu Sans Mono',monospace;font-size:12.5px}"
    "pre.replay{background:#f4f4f4;padding:8px 12px;border-radius:4px;overflow-x:auto}"
    ".note{color:#666;font-size:12.5px}.sample{display:flex;gap:24px;align-items:flex-start}"
    ".tokens{font-family:monospace;word-break:break-all;max-width:700px}svg{display:block;margin:6px 0}";

std::string pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

std::string replayCommand(const std::string& trace, const ReportData& d) {
  const FailureInfo* f = d.ranks.origin ? &d.ranks.origin->failure : d.summary.failure ? &*d.summary.failure : nullptr;
  if (!f) return "";
  std::string cmd = "dlreplay " + shellQuote(trace) + (f->kind == "nonfinite" ? " --until nan" : " --until crash");
  if (d.ranks.origin) cmd += " --rank " + std::to_string(d.ranks.origin->rank);
  return cmd + " --debug pdb";
}

std::string page(Trace& trace, const ReportData& d, const triage::TriageResult& verdict) {
  const TraceSummary& s = d.summary;
  const FailureInfo* f = d.ranks.origin ? &d.ranks.origin->failure : s.failure ? &*s.failure : nullptr;
  std::string h =
      "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
      "<title>dlrr report: " +
      htmlEscape(trace.path()) + "</title><style>" + kStyle + "</style></head><body>";
  h += "<header><h1>dlrr report: " + htmlEscape(trace.path()) + "</h1><div class=\"cmd\">" +
       htmlEscape(s.command.empty() ? std::string("(no launcher stream: command unknown)") : joinCommand(s.command)) +
       "</div><div>" + htmlEscape(s.host) + " &middot; " + htmlEscape(s.user) + " &middot; " +
       htmlEscape(formatTime(s.createdNs)) + " &middot; exit code " +
       (s.exitCode ? std::to_string(*s.exitCode) : std::string("unknown")) + " &middot; " + std::to_string(s.steps) +
       " steps</div></header><main>";

  // The verdict first: what happened and how to get there again.
  const auto& info = triage::categoryInfo(verdict.category);
  h += std::string("<section class=\"verdict") + (f ? "" : " ok") + "\" id=\"verdict\"><b>" +
       htmlEscape(f ? (d.ranks.origin ? "first non-finite value: " + formatOrigin(*d.ranks.origin) : formatFailure(*f))
                    : std::string("no failure recorded")) +
       "</b><table>";
  auto row = [&](const char* k, const std::string& v) {
    if (!v.empty()) h += std::string("<tr><th>") + k + "</th><td>" + htmlEscape(v) + "</td></tr>";
  };
  row("category", std::string(info.name) + (verdict.category == triage::Category::None
                                                ? std::string()
                                                : std::string(" [") + triage::dimensionName(verdict.dimension) + "]"));
  for (const auto& e : verdict.evidence) row("evidence", e);
  row("where", verdict.where);
  row("location", verdict.location);
  row("lost", verdict.lost);
  row("retry", verdict.retry);
  row("advice", verdict.advice);
  h += "</table>";
  if (std::string cmd = replayCommand(trace.path(), d); !cmd.empty())
    h += "<p>Replay to it, a debugger at the stop (the dataset need not exist):</p><pre class=\"replay\">" +
         htmlEscape(cmd) + "</pre>";
  h += "</section>";

  // Loss curve.
  Series loss, times;
  for (const auto& p : d.steps) {
    if (p.untrained || p.endNs < 0) continue;
    loss.x.push_back(static_cast<double>(p.step));
    loss.y.push_back(p.loss);
    times.x.push_back(static_cast<double>(p.step));
    times.y.push_back(static_cast<double>(p.endNs - p.beginNs) / 1e6);
  }
  const double markX = f && f->step >= 0 ? static_cast<double>(f->step) : NAN;
  const std::string markLabel = f ? f->kind + " at step " + std::to_string(f->step) : "";
  h += "<h2 id=\"loss\">Loss (stream " + htmlEscape(d.mainStream) + ")</h2>";
  if (loss.x.empty())
    h += "<p class=\"note\">No training step completed: no loss was recorded.</p>";
  else
    h += lineChart("loss-chart", loss, "step", "loss", markX, markLabel) +
         "<p class=\"note\">Red crosses on the top edge: steps whose loss was not finite.</p>";

  h += "<h2 id=\"lr\">Learning rate</h2>";
  if (d.lr.empty()) {
    h += "<p class=\"note\">Not recorded: the learning rate is read from the training-state snapshots "
         "(dlrecord --snapshot-every), and this trace holds none with an optimizer.</p>";
  } else if (d.lr.size() == 1) {
    h += "<p class=\"lr-value\">" + pct(d.lr[0].lr) + " at step " + std::to_string(d.lr[0].step) +
         " (the trace's only training-state snapshot; dlrecord --snapshot-every takes more)</p>";
  } else {
    Series lr;
    for (const auto& p : d.lr) lr.x.push_back(static_cast<double>(p.step)), lr.y.push_back(p.lr);
    h += lineChart("lr-chart", lr, "step", "learning rate (first parameter group)", markX, markLabel) +
         "<p class=\"note\">One point per training-state snapshot.</p>";
  }

  for (const HeatMap* m : {&d.gradients, &d.activations}) {
    h += "<h2>" + htmlEscape(m->title) + (f ? ", steps before the failure" : ", last steps") + "</h2>";
    if (m->steps.empty()) {
      h += "<p class=\"note\">No such digests recorded (dlrecord --capture minimal and process record none).</p>";
      continue;
    }
    h += heatMapSvg(m == &d.gradients ? "heatmap gradients" : "heatmap activations", *m, f ? f->step : -1);
    if (m->droppedRows) h += "<p class=\"note\">" + std::to_string(m->droppedRows) + " more rows not shown.</p>";
  }
  h += "<p class=\"note\">From the recorded digests (min and max over each tensor's finite values, and its NaN/inf "
       "counts): the colour is the largest magnitude; magenta marks a tensor holding non-finite values.</p>";

  h += "<h2 id=\"step-times\">Step times</h2>";
  h += times.x.empty() ? std::string("<p class=\"note\">No completed step.</p>")
                       : lineChart("step-time-chart", times, "step", "milliseconds", markX, markLabel);

  h += "<h2 id=\"sample\">The failing step's sample</h2>";
  if (!d.sample) {
    h += std::string("<p class=\"note\">") + (f ? "The failing step's batch is not in the trace." : "No failure.") +
         "</p>";
  } else if (!d.sample->note.empty()) {
    h += "<p class=\"note\">" + htmlEscape(d.sample->note) + "</p>";
  } else {
    const Sample& sm = *d.sample;
    h += "<div class=\"sample\">" + imageSvg(sm) + "<table>";
    row("batch", sm.batchDescription);
    row("field", sm.field);
    row("sample", std::to_string(sm.index) + " of the batch: " + sm.why);
    if (sm.datasetIndex >= 0) row("dataset index", std::to_string(sm.datasetIndex));
    if (!sm.pixels.empty())
      row("image", std::to_string(sm.height) + "x" + std::to_string(sm.width) + ", " + std::to_string(sm.channels) +
                       " channel(s); " + std::to_string(sm.nonFinitePixels) + " non-finite pixel(s), shown magenta");
    h += "</table></div>";
    if (!sm.tokens.empty()) {
      std::string t;
      for (auto id : sm.tokens) t += (t.empty() ? "" : " ") + std::to_string(id);
      h += "<p>Token ids (no vocabulary is recorded):</p><p class=\"tokens\">" + htmlEscape(t) + "</p>";
    }
    if (!sm.values.empty()) {
      std::string t;
      for (double v : sm.values) t += (t.empty() ? "" : " ") + pct(v);
      h += "<p>Its first values:</p><p class=\"tokens sample-values\">" + htmlEscape(t) + "</p>";
    }
    h += "<p class=\"note\">Extract the batch's field (the sample is row " + std::to_string(sm.index) + "): <code>" +
         htmlEscape("dltrace dump " + shellQuote(trace.path()) + " --step " + std::to_string(f ? f->step : 0) +
                    " --batch " + (sm.field == "(the whole batch)" ? "" : sm.field + " ") + "-o sample.npy") +
         "</code></p>";
  }

  // The whole job, then the training window alone when start-up and shutdown dwarf it.
  int64_t t0 = INT64_MAX, t1 = INT64_MIN, s0 = INT64_MAX, s1 = INT64_MIN;
  for (const auto& t : d.timeline) {
    t0 = std::min(t0, t.startNs), t1 = std::max(t1, t.endNs);
    for (const auto& st : t.steps) s0 = std::min(s0, st.ns), s1 = std::max(s1, std::max(st.ns, st.endNs));
    for (const auto& c : t.collectives) s0 = std::min(s0, c.ns), s1 = std::max(s1, c.ns);
  }
  h += "<h2 id=\"processes\">Processes and collectives</h2>" + timelineSvg(d.timeline, t0, t1);
  if (s1 > s0 && (s1 - s0) * 3 < t1 - t0)
    h += "<p>The training steps alone (" + pct(static_cast<double>(s1 - s0) / 1e9) + " s):</p>" +
         timelineSvg(d.timeline, s0 - (s1 - s0) / 50, s1 + (s1 - s0) / 50);
  h +=
      "<p class=\"note\">Grey: start-up and shutdown; light blue: epochs; blue: steps; orange ticks: collectives "
      "(red: non-finite results); red diamonds: failures. Hover for details.</p><table><tr><th>stream</th><th>role</th>"
      "<th>pid</th><th>rank</th><th>steps</th><th>collectives</th><th>exit</th></tr>";
  for (const auto& p : s.processes) {
    int rank = -1;
    size_t coll = 0;
    for (const auto& t : d.timeline)
      if (t.stream == p.name) rank = t.rank, coll = t.collectives.size();
    h += "<tr><td>" + htmlEscape(p.name) + "</td><td>" + htmlEscape(p.role) + "</td><td>" + std::to_string(p.pid) +
         "</td><td>" + (rank >= 0 ? std::to_string(rank) : "-") + "</td><td>" + std::to_string(p.steps) + "</td><td>" +
         std::to_string(coll) + "</td><td>" + (p.exitCode ? std::to_string(*p.exitCode) : "-") + "</td></tr>";
  }
  h += "</table>";
  for (const auto& w : d.warnings) h += "<p class=\"note\">" + htmlEscape(w) + "</p>";
  h += "<p class=\"note\">dltrace report, " + pct(static_cast<double>(s.fileBytes) / 1048576.0) +
       " MiB trace. Self-contained: no script, nothing loaded from the network.</p></main></body></html>\n";
  return h;
}

int run(const Args& args, Output&) {
  auto out = args.value("-o");
  if (!out) throw UsageError("report needs -o FILE.html");
  auto trace = openTraceForTool(args.trace());
  ReportData d = gatherReport(*trace);
  triage::TriageResult verdict = triage::classify(triage::gatherFacts(*trace));
  writeOutputFile(*out, page(*trace, d, verdict));
  return kExitOk;
}

}  // namespace

CommandDef reportCommand() {
  return {"report",
          "one self-contained HTML page: loss, heat maps, failing sample, verdict, timeline",
          "dltrace report TRACE -o FILE.html",
          "Writes one HTML file to look at in a browser and attach to a bug (inline SVG: no script,\n"
          "nothing fetched from the network): the loss curve with the failure marked, the learning\n"
          "rate (from training-state snapshots), heat maps module x step of the gradients' and\n"
          "module outputs' largest magnitudes over the steps before the failure (from the digests;\n"
          "non-finite values marked), step times, the failing step's sample (an image as an image,\n"
          "token ids as text), the triage verdict and the replay command, and every process and\n"
          "rank on one timeline with its collectives.\n"
          "\n"
          "  -o FILE   the page to write (- for stdout)\n",
          {{"-o", OptSpec::Type::Value}},
          run};
}

}  // namespace dlrr::tools
