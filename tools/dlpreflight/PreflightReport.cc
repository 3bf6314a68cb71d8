#include "tools/dlpreflight/PreflightReport.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>

#include "tools/common/ExitCodes.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"

namespace dlrr::preflight {
namespace {

constexpr const char* kPrefix = "preflight.";
constexpr size_t kShownPaths = 20;

bool parseInt(std::string_view s, int64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// "key=value key=value ..." (values without blanks) -> map.
std::map<std::string, std::string> fields(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

int64_t intField(const std::map<std::string, std::string>& m, const char* key, int64_t otherwise) {
  auto it = m.find(key);
  int64_t v = 0;
  return it != m.end() && parseInt(it->second, v) ? v : otherwise;
}

std::string mib(uint64_t kib) { return tools::humanBytes(kib * 1024); }

bool failed(const triage::TriageInput& in) { return in.failure.has_value() || in.nonfinite.has_value(); }

// Failed lookups worth listing: not start-up probes, not inside the Python installation (the
// import system's and package metadata scans, dlrr's own included, look up many files there
// that never exist; the touched paths leave the installation out too).
std::set<std::string> shownMissing(const triage::TriageInput& in) {
  std::set<std::string> out;
  for (const auto& m : in.missingPaths) {
    if (triage::isStartupProbe(m.path, m.op)) continue;
    if (m.path.find("-packages/") != std::string::npos || m.path.find("/lib/python3") != std::string::npos) continue;
    out.insert(m.path);
  }
  return out;
}

std::string unusedLine(const UnusedLoader& u) {
  return "a DataLoader of " + u.dataset + " made at " + u.where + " was never iterated";
}

}  // namespace

Facts parseFacts(const std::map<std::string, std::string>& runtime) {
  Facts f;
  // kind -> number -> value, so that "pass.10" comes after "pass.9".
  std::map<std::string, std::map<int64_t, std::string>> numbered;
  for (const auto& [key, value] : runtime) {
    if (key.rfind(kPrefix, 0) != 0) continue;
    std::string rest = key.substr(std::char_traits<char>::length(kPrefix));
    if (rest == "k") {
      int64_t k = 0;
      if (parseInt(value, k) && k > 0 && k < (1 << 30)) f.k = static_cast<int>(k);
      continue;
    }
    if (rest == "peak_rss_kib") {
      int64_t v = 0;
      if (parseInt(value, v) && v >= 0) f.peakRssKib = static_cast<uint64_t>(v);
      continue;
    }
    if (rest == "cpu") {
      f.cpuFallback = true;
      continue;
    }
    if (rest == "cuda_rewrites") {
      int64_t v = 0;
      if (parseInt(value, v) && v >= 0) f.cudaRewrites = v;
      continue;
    }
    if (rest == "error") {
      f.error = value;
      continue;
    }
    size_t dot = rest.find('.');
    int64_t n = 0;
    if (dot == std::string::npos || !parseInt(std::string_view(rest).substr(dot + 1), n)) continue;
    numbered[rest.substr(0, dot)][n] = value;
  }
  for (const auto& [n, v] : numbered["pass"]) {
    auto m = fields(v);
    Pass p;
    p.index = n;
    p.loader = static_cast<int>(intField(m, "loader", 0));
    p.dataset = m["dataset"];
    p.phase = m["phase"] == "training" ? "training" : "evaluation";
    p.batches = intField(m, "batches", 0);
    p.of = intField(m, "of", -1);
    p.cut = intField(m, "cut", 0) != 0;
    p.updates = intField(m, "updates", 0);
    p.peakRssKib = static_cast<uint64_t>(std::max<int64_t>(0, intField(m, "peak_rss_kib", 0)));
    p.batchSize = intField(m, "batch_size", -1);
    p.gpuPeak = intField(m, "gpu_peak", -1);
    p.gpuNewPeak = intField(m, "gpu_new_peak", 0) != 0;
    f.passes.push_back(std::move(p));
  }
  for (const auto& [n, v] : numbered["unused"]) {
    auto m = fields(v);
    f.unused.push_back({m["dataset"], m["where"]});
  }
  for (const auto& [n, v] : numbered["loop"]) f.loops.push_back(v);
  for (const auto& [n, v] : numbered["save"]) f.saves.push_back(v);
  for (const auto& [n, v] : numbered["path"]) {
    size_t sp = v.find(' ');
    if (sp != std::string::npos) f.paths.push_back({v.substr(0, sp), v.substr(sp + 1)});
  }
  for (const auto& [n, v] : numbered["env"]) {
    std::istringstream in(v);
    EnvRead e;
    std::string state;
    if (in >> e.name >> state) {
      e.set = state == "set";
      in >> e.where;
      f.env.push_back(std::move(e));
    }
  }
  return f;
}

std::vector<PhaseLine> phaseLines(const Facts& f) {
  std::vector<PhaseLine> lines;
  for (const auto& p : f.passes) {
    auto it = std::find_if(lines.begin(), lines.end(),
                           [&](const PhaseLine& l) { return l.loader == p.loader && l.phase == p.phase; });
    if (it == lines.end()) {
      PhaseLine l;
      l.loader = p.loader;
      l.dataset = p.dataset;
      l.phase = p.phase;
      l.minBatches = l.maxBatches = p.batches;
      lines.push_back(l);
      it = lines.end() - 1;
    }
    it->passes++;
    it->minBatches = std::min(it->minBatches, p.batches);
    it->maxBatches = std::max(it->maxBatches, p.batches);
    it->of = std::max(it->of, p.of);
    it->cut = it->cut || p.cut;
    it->peakRssKib = std::max(it->peakRssKib, p.peakRssKib);
    it->batchSize = std::max(it->batchSize, p.batchSize);
    if (p.gpuPeak >= 0) {
      if (p.gpuNewPeak)
        it->gpuPeak = std::max(it->gpuPeak, p.gpuPeak);
      else
        it->gpuCeiling = std::max(it->gpuCeiling, p.gpuPeak);
    }
  }
  return lines;
}

std::vector<MemoryEstimate> estimateMemory(const Facts& earlier, const Facts& now, int64_t targetBatch) {
  std::vector<MemoryEstimate> out;
  auto before = phaseLines(earlier);
  for (const auto& b : phaseLines(now)) {
    auto a = std::find_if(before.begin(), before.end(),
                          [&](const PhaseLine& l) { return l.loader == b.loader && l.phase == b.phase; });
    if (a == before.end()) continue;
    MemoryEstimate e;
    e.loader = b.loader;
    e.phase = b.phase;
    e.batchA = a->batchSize;
    e.batchB = b.batchSize;
    e.peakA = a->peakRssKib;
    e.peakB = b.peakRssKib;
    e.target = targetBatch;
    uint64_t larger = std::max(e.peakA, e.peakB);
    if (e.batchA <= 0 || e.batchB <= 0) {
      e.note = "the loader has no batch size";
      e.estimateKib = larger;
    } else if (e.batchA == e.batchB) {
      e.note = "both runs used batch size " + std::to_string(e.batchA) + ": no line through one point";
      e.estimateKib = larger;
    } else {
      double slope =
          (static_cast<double>(e.peakB) - static_cast<double>(e.peakA)) / static_cast<double>(e.batchB - e.batchA);
      double at = static_cast<double>(e.peakB) + slope * static_cast<double>(targetBatch - e.batchB);
      if (slope < 0) {
        e.note =
            "peak RSS did not grow with the batch size (measurement noise or memory the allocator kept): "
            "the larger peak is given";
        at = static_cast<double>(larger);
      }
      e.estimateKib = at > 0 ? static_cast<uint64_t>(at) : 0;
    }
    out.push_back(std::move(e));
  }
  return out;
}

Report judge(const Facts& f, const triage::TriageInput& in, const triage::TriageResult& t, int jobExit) {
  Report r;
  if (f.k == 0)
    r.warnings.push_back(
        "the job was not run in miniature: dlrr's Python hook never started in it (not a Python job, or "
        "torch never imported); it ran whole");
  if (!f.error.empty()) r.warnings.push_back("preflight stopped gathering facts after an internal error: " + f.error);
  for (const auto& l : f.loops)
    if (l.rfind("not cut", 0) == 0) r.warnings.push_back("a loop without a DataLoader was " + l);
  if (jobExit == 0 && !failed(in)) {
    if (!f.unused.empty()) {
      // A phase the full job reaches later (validation every N steps, N above what K passes
      // give) never ran: the miniature says nothing about it, so it did not pass.
      r.passed = false;
      r.exitCode = kExitNotReached;  // as dlreplay: the job ended before a phase was reached
      r.verdict = "INCOMPLETE: the job exited 0, but " + unusedLine(f.unused.front()) +
                  (f.unused.size() > 1 ? " (and " + std::to_string(f.unused.size() - 1) + " more)" : "") +
                  ": the phase that uses it did not run in the miniature";
      return r;
    }
    r.passed = true;
    r.exitCode = 0;
    r.verdict = "PASSED: every phase ran to the end and the job exited 0";
    return r;
  }
  r.passed = false;
  r.exitCode = 1;
  // The failure came after a cut evaluation pass, with no pass begun since: code that needs the
  // whole pass (a per-class metric over a sorted test set) may fail only because of the cut.
  auto last = std::max_element(f.passes.begin(), f.passes.end(),
                               [](const Pass& a, const Pass& b) { return a.index < b.index; });
  if (last != f.passes.end() && last->cut && last->phase == "evaluation") {
    r.cutCaveat = "may be caused by the cut: the evaluation saw " + std::to_string(last->batches) + " of " +
                  (last->of >= 0 ? std::to_string(last->of) : std::string("?")) + " batches (loader " +
                  std::to_string(last->loader) + ", " + last->dataset + ")";
  }
  if (failed(in)) {
    r.verdict = "FAILED: " + t.summary;
    if (!t.where.empty()) r.verdict += " (" + t.where + ")";
  } else {
    r.verdict = "FAILED: the job exited with status " + std::to_string(jobExit);
  }
  return r;
}

std::string renderText(const Facts& f, const Report& r, const triage::TriageInput& in, const triage::TriageResult& t,
                       const std::string& tracePath, double seconds, const std::vector<MemoryEstimate>& estimates) {
  using tools::printable;
  std::ostringstream o;
  o << "dlpreflight: " << printable(r.verdict) << "\n";
  char took[64];
  std::snprintf(took, sizeof took, "%.1f s", seconds);
  o << "  ran in " << took;
  if (f.k > 0)
    o << ", every DataLoader pass cut to " << f.k << " batches, every loop without one to " << f.k << " updates";
  o << "\n";
  if (f.cpuFallback && f.cudaRewrites > 0)
    o << "  no GPU here: the job asked for CUDA " << f.cudaRewrites << (f.cudaRewrites == 1 ? " time" : " times")
      << "; it ran on the CPU\n";
  auto lines = phaseLines(f);
  if (!lines.empty()) o << "  phases:\n";
  for (const auto& l : lines) {
    o << "    " << (l.phase == "training" ? "training  " : "evaluation") << "  loader " << l.loader << " ("
      << printable(l.dataset) << "): " << l.passes << (l.passes == 1 ? " pass" : " passes") << ", " << l.minBatches;
    if (l.maxBatches != l.minBatches) o << "-" << l.maxBatches;
    if (l.of >= 0) o << " of " << l.of;
    o << " batches" << (l.cut ? " (cut)" : "") << ", peak RSS " << mib(l.peakRssKib);
    if (l.gpuPeak >= 0) o << ", GPU allocator peak " << tools::humanBytes(static_cast<uint64_t>(l.gpuPeak));
    if (l.gpuPeak < 0 && l.gpuCeiling >= 0)
      o << ", GPU at most " << tools::humanBytes(static_cast<uint64_t>(l.gpuCeiling)) << " (no new allocator peak)";
    o << "\n";
  }
  for (const auto& u : f.unused)
    o << "    never iterated: a DataLoader of " << printable(u.dataset) << " made at " << printable(u.where) << "\n";
  for (const auto& l : f.loops) o << "    loop without a DataLoader: " << printable(l) << "\n";
  if (!f.saves.empty()) o << "  checkpoints and exports:\n";
  for (const auto& s : f.saves) o << "    " << printable(s) << "\n";
  if (failed(in)) {
    o << "  failure: " << triage::categoryInfo(t.category).name << " [" << triage::dimensionName(t.dimension)
      << "]: " << printable(t.summary) << "\n";
    if (!t.where.empty()) o << "    when:  " << printable(t.where) << "\n";
    if (!t.location.empty()) o << "    where: " << printable(t.location) << "\n";
    for (size_t i = 0; i < t.evidence.size() && i < 3; ++i) o << "    - " << printable(t.evidence[i]) << "\n";
    if (!t.advice.empty()) o << "    advice: " << printable(t.advice) << "\n";
  }
  if (!r.cutCaveat.empty()) o << "    note: " << printable(r.cutCaveat) << "\n";
  std::set<std::string> missing = shownMissing(in);
  std::vector<std::string> touched;
  size_t listed = 0, paths = 0;
  for (const auto& p : f.paths) {
    if (missing.count(p.path)) continue;  // listed below as missing
    ++paths;
    if (listed++ < kShownPaths)
      touched.push_back(p.how + std::string(p.how.size() < 6 ? 6 - p.how.size() : 0, ' ') + "  " + printable(p.path));
  }
  if (paths > kShownPaths)
    touched.push_back("... " + std::to_string(paths - kShownPaths) + " more (dlpreflight --json lists them all)");
  for (const auto& m : missing) touched.push_back("missing " + printable(m));
  for (const auto& e : f.env)
    touched.push_back("env     " + printable(e.name) + (e.set ? " (set here" : " (unset here") + "; read at " +
                      printable(e.where) + ")");
  if (!touched.empty()) o << "  what it touched that may not exist on the cluster:\n";
  if (!r.scratch.empty() && !f.paths.empty())
    o << "    (its writes went to " << printable(r.scratch) << "; the paths below are the job's)\n";
  for (const auto& line : touched) o << "    " << line << "\n";
  if (!r.isolation.empty()) o << "  isolation: " << printable(r.isolation) << "\n";
  auto overlayLine = [&](const char* what, const std::vector<std::string>& paths) {
    if (paths.empty()) return;
    o << "  " << what << " (in the preflight only; your files were not modified): ";
    for (size_t i = 0; i < paths.size() && i < kShownPaths; ++i) o << (i ? ", " : "") << printable(paths[i]);
    if (paths.size() > kShownPaths) o << ", ... " << paths.size() - kShownPaths << " more";
    o << "\n";
  };
  overlayLine("wrote", r.overlayWritten);
  overlayLine("removed", r.overlayRemoved);
  o << "  peak memory: RSS " << mib(f.peakRssKib);
  if (in.processPeak)
    for (const auto& g : in.processPeak->gpus)
      o << "; cuda:" << g.device << " allocated " << tools::humanBytes(g.maxAllocated) << ", reserved "
        << tools::humanBytes(g.maxReserved) << " of " << tools::humanBytes(g.total);
  o << "\n";
  if (!estimates.empty())
    o << "  peak RSS at batch size " << estimates.front().target
      << " (straight line through the two runs; assumes memory grows linearly with the batch size and "
         "nothing else changes):\n";
  for (const auto& e : estimates) {
    o << "    " << (e.phase == "training" ? "training  " : "evaluation") << "  loader " << e.loader << ": "
      << mib(e.estimateKib) << " (batch " << e.batchA << ": " << mib(e.peakA) << ", batch " << e.batchB << ": "
      << mib(e.peakB) << ")";
    if (!e.note.empty()) o << "; " << printable(e.note);
    o << "\n";
  }
  for (const auto& w : r.warnings) o << "  warning: " << printable(w) << "\n";
  o << "  trace: " << printable(tracePath) << " (dltrace info / triage; dlreplay";
  o << (failed(in) ? " --until crash)" : ")") << "\n";
  return o.str();
}

std::string renderJson(const Facts& f, const Report& r, const triage::TriageInput& in, const triage::TriageResult& t,
                       const std::string& tracePath, double seconds, const std::vector<MemoryEstimate>& estimates) {
  std::string buf;
  tools::JsonWriter j(buf, 0);  // one line: the last line of stdout
  j.beginObject();
  j.field("passed", r.passed);
  j.field("verdict", r.verdict);
  j.field("trace", tracePath);
  j.field("scratch", r.scratch);
  j.field("isolation", r.isolation);
  j.key("overlay_written").beginArray();
  for (const auto& p : r.overlayWritten) j.value(p);
  j.endArray();
  j.key("overlay_removed").beginArray();
  for (const auto& p : r.overlayRemoved) j.value(p);
  j.endArray();
  j.field("seconds", seconds);
  j.field("k", f.k);
  j.key("exit_code");
  if (in.exitCode)
    j.value(*in.exitCode);
  else
    j.null();
  j.key("passes").beginArray();
  for (const auto& p : f.passes) {
    j.beginObject();
    j.field("loader", p.loader);
    j.field("dataset", p.dataset);
    j.field("phase", p.phase);
    j.field("batches", p.batches);
    j.field("of", p.of);
    j.field("cut", p.cut);
    j.field("updates", p.updates);
    j.field("peak_rss_bytes", p.peakRssKib * 1024);
    j.field("batch_size", p.batchSize);
    j.field("gpu_peak_bytes", p.gpuPeak);
    j.field("gpu_new_peak", p.gpuNewPeak);
    j.endObject();
  }
  j.endArray();
  j.key("loops").beginArray();
  for (const auto& l : f.loops) j.value(l);
  j.endArray();
  j.key("saves").beginArray();
  for (const auto& s : f.saves) j.value(s);
  j.endArray();
  j.key("paths").beginArray();
  for (const auto& p : f.paths) {
    j.beginObject();
    j.field("how", p.how);
    j.field("path", p.path);
    j.endObject();
  }
  j.endArray();
  j.key("missing_paths").beginArray();
  for (const auto& m : shownMissing(in)) j.value(m);
  j.endArray();
  j.key("unused_loaders").beginArray();
  for (const auto& u : f.unused) {
    j.beginObject();
    j.field("dataset", u.dataset);
    j.field("where", u.where);
    j.endObject();
  }
  j.endArray();
  j.field("cut_caveat", r.cutCaveat);
  j.key("env").beginArray();
  for (const auto& e : f.env) {
    j.beginObject();
    j.field("name", e.name);
    j.field("set", e.set);
    j.field("where", e.where);
    j.endObject();
  }
  j.endArray();
  j.field("peak_rss_bytes", f.peakRssKib * 1024);
  j.key("memory_estimates").beginArray();
  for (const auto& e : estimates) {
    j.beginObject();
    j.field("loader", e.loader);
    j.field("phase", e.phase);
    j.field("target_batch_size", e.target);
    j.field("estimate_rss_bytes", e.estimateKib * 1024);
    // The two measured runs the estimate extrapolates from, as numbers.
    j.key("batch_sizes").beginArray().value(e.batchA).value(e.batchB).endArray();
    j.key("peaks_rss_bytes").beginArray().value(e.peakA * 1024).value(e.peakB * 1024).endArray();
    j.field("note", e.note);
    j.endObject();
  }
  j.endArray();
  j.field("cpu_fallback", f.cpuFallback);
  j.field("cuda_rewrites", f.cudaRewrites);
  j.key("failure");
  if (failed(in)) {
    j.beginObject();
    j.field("category", std::string(triage::categoryInfo(t.category).id));
    j.field("dimension", std::string(triage::dimensionId(t.dimension)));
    j.field("summary", t.summary);
    j.field("phase", std::string(triage::phaseId(t.phase)));
    j.field("where", t.where);
    j.field("location", t.location);
    j.key("evidence").beginArray();
    for (const auto& e : t.evidence) j.value(e);
    j.endArray();
    j.endObject();
  } else {
    j.null();
  }
  j.key("warnings").beginArray();
  for (const auto& w : r.warnings) j.value(w);
  j.endArray();
  j.endObject();
  buf += "\n";
  return buf;
}

}  // namespace dlrr::preflight
