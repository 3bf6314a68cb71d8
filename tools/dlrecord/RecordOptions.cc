#include "tools/dlrecord/RecordOptions.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace dlrr {

// auto | off | SECONDS (a positive decimal) | Nsteps (N >= 1): what snapshots.py parses.
bool validSnapshotEvery(const std::string& v) {
  if (v == "auto" || v == "off") return true;
  std::string n = v.size() > 5 && v.compare(v.size() - 5, 5, "steps") == 0 ? v.substr(0, v.size() - 5) : v;
  bool steps = n.size() != v.size();
  if (n.empty() || n.size() > 12) return false;
  int dots = 0;
  for (char c : n) {
    if (c == '.' && !steps)
      ++dots;
    else if (c < '0' || c > '9')
      return false;
  }
  return dots <= 1 && n != "." && std::strtod(n.c_str(), nullptr) > 0;
}

std::optional<uint64_t> parseSize(const std::string& text) {
  size_t i = 0;
  uint64_t n = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    if (n > (UINT64_MAX - 9) / 10) return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  if (i == 0) return std::nullopt;
  std::string unit = text.substr(i);
  int shift = 0;
  if (!unit.empty()) {
    switch (unit[0]) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      case 'T':
      case 't':
        shift = 40;
        break;
      case 'B':
      case 'b':
        shift = -1;
        break;
      default:
        return std::nullopt;
    }
    std::string rest = unit.substr(1);
    if (shift < 0) {
      if (!rest.empty()) return std::nullopt;
      shift = 0;
    } else if (!rest.empty() && rest != "B" && rest != "b" && rest != "iB" && rest != "ib") {
      return std::nullopt;
    }
  }
  if (n == 0 || (shift && n > (UINT64_MAX >> shift))) return std::nullopt;
  return n << shift;
}

uint64_t defaultBudget(const std::string& trace) {
  constexpr uint64_t kFloor = 64ull << 20;
  std::filesystem::path parent = std::filesystem::path(trace).parent_path();
  struct statvfs st {};
  if (parent.empty() || ::statvfs(parent.c_str(), &st) != 0) return kFloor;
  uint64_t freeBytes = static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
  return std::max(freeBytes / 2, kFloor);
}

const char* const kRecordUsage =
    "usage: dlrecord [options] [-o TRACE] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD unchanged and records it into TRACE (a directory) for dlreplay and dltrace.\n"
    "\n"
    "options:\n"
    "  -o, --output TRACE   trace directory to create (default: ./dlrr-YYYYmmdd-HHMMSS.trace)\n"
    "  --capture LEVEL      process | minimal | default | full  (default: default)\n"
    "                         process: entropy, files, processes, exceptions; no steps\n"
    "                         minimal: entropy, batches, RNG states, loss, failures\n"
    "                         default: + digests of module outputs, gradients, parameters\n"
    "                         full:    + every module output tensor of every step\n"
    "  --collectives MODE  torch.distributed jobs: digest | full  (default: digest)\n"
    "                         digest: op, shapes and bit-exact digests of what each rank sent\n"
    "                                 and received; results of the last K steps kept for a failure\n"
    "                         full:   + every collective's results, so that one rank can be\n"
    "                                 replayed alone (dlreplay --rank R)\n"
    "  --snapshot-every WHEN  training-state snapshots for jump replay (dlreplay --from):\n"
    "                       auto (default: by time, ~1% of the job's time), SECONDS, Nsteps\n"
    "                       (e.g. 1000steps) or off (a failure snapshot is still taken)\n"
    "  --batches all|window DataLoader batches: all (default) keeps every batch's bytes; window\n"
    "                       keeps, for batches of map-style datasets, only sample indices, RNG\n"
    "                       states and digests (replay re-makes them from the dataset), and the\n"
    "                       bytes of the last K steps in memory, written at failure or exit\n"
    "  --window K           steps whose batch bytes are held (implies --batches window;\n"
    "                       default 16, 1..4096)\n"
    "  --budget SIZE        the most the whole trace may take on disk (K, M, G, T: powers of\n"
    "                       1024; default: half the space free on the trace's file system when\n"
    "                       dlrecord starts); old periodic snapshots are dropped first, never\n"
    "                       what every step records or the latest snapshot; if even that does\n"
    "                       not fit, recording stops there and dlrecord says so (the job goes on)\n"
    "  --ring-steps K       module outputs and losses of the last K steps are kept in full in\n"
    "                       memory and written only when a failure happens (default 2, 0 = off)\n"
    "  --hang-after SECONDS torch.distributed jobs: a rank in one collective (or with none\n"
    "                       since its last) for longer writes where it waits and its Python\n"
    "                       stacks, for dltrace triage (default 60, 0 = off)\n"
    "  --redact LIST        comma-separated name fragments of environment variables whose\n"
    "                       values are never stored, added to the defaults (TOKEN,SECRET,\n"
    "                       PASSWORD,PASSWD,KEY,CREDENTIAL,AUTH,COOKIE,SESSION,WEBHOOK); values\n"
    "                       and arguments shaped like tokens (ghp_, hf_, sk-, AKIA, xox?-, long\n"
    "                       random strings) and URL user-info are redacted whatever the name;\n"
    "                       credential files the job reads (~/.netrc, ~/.aws/, .env, *.pem,\n"
    "                       ...) keep only their stat\n"
    "  -q, --quiet          no summary line at the end\n"
    "  -h, --help           this help\n"
    "  --version            print the version\n"
    "\n"
    "Exit status: CMD's own (128+N when it died of signal N); 127 when CMD cannot be found,\n"
    "126 when it cannot be executed, 2 on a usage error. Recording problems never change it.\n";

RecordOptions parseRecordOptions(const std::vector<std::string>& argv) {
  using tools::OptSpec;
  using tools::UsageError;
  using T = OptSpec::Type;
  const tools::Args args(argv,
                         {{"--help", T::Final, "-h"},
                          {"--version", T::Final},
                          {"--output", T::Value, "-o"},
                          {"--capture", T::Value},
                          {"--collectives", T::Value},
                          {"--ring-steps", T::Value},
                          {"--redact", T::Value},
                          {"--hang-after", T::Value},
                          {"--snapshot-every", T::Value},
                          {"--batches", T::Value},
                          {"--window", T::Value},
                          {"--budget", T::Value},
                          {"--quiet", T::Flag, "-q"}},
                         tools::Args::Layout::Command);
  RecordOptions o;
  o.output = args.value("--output").value_or("");
  o.capture = args.value("--capture").value_or(o.capture);
  if (o.capture != "process" && o.capture != "minimal" && o.capture != "default" && o.capture != "full")
    throw UsageError("--capture must be process, minimal, default or full (got '" + o.capture + "')");
  o.collectives = args.value("--collectives").value_or(o.collectives);
  if (o.collectives != "digest" && o.collectives != "full")
    throw UsageError("--collectives must be digest or full (got '" + o.collectives + "')");
  o.ringSteps = static_cast<int>(args.intValue("--ring-steps", 0, 64).value_or(o.ringSteps));
  if (auto h = args.value("--hang-after")) {
    char* end = nullptr;
    double v = std::strtod(h->c_str(), &end);
    if (h->empty() || *end || !(v >= 0) || v > 1e7)
      throw UsageError("--hang-after must be a number of seconds >= 0 (got '" + *h + "')");
    o.hangAfter = *h;
  }
  if (auto r = args.value("--redact")) o.redact = parseRedactPatterns(*r);
  o.snapshotEvery = args.value("--snapshot-every").value_or(o.snapshotEvery);
  if (!validSnapshotEvery(o.snapshotEvery))
    throw UsageError("--snapshot-every must be auto, off, SECONDS or Nsteps (got '" + o.snapshotEvery + "')");
  o.batches = args.value("--batches").value_or(o.batches);
  if (o.batches != "all" && o.batches != "window")
    throw UsageError("--batches must be all or window (got '" + o.batches + "')");
  if (auto k = args.intValue("--window", 1, 4096)) {
    o.window = static_cast<int>(*k);
    if (!args.value("--batches")) o.batches = "window";
    if (o.batches != "window") throw UsageError("--window needs --batches window (got --batches all)");
  }
  if (auto b = args.value("--budget")) {
    auto n = parseSize(*b);
    if (!n) throw UsageError("--budget must be a size in bytes, with K, M, G or T (e.g. 500M, 20G) (got '" + *b + "')");
    o.budget = *n;
  }
  o.quiet = args.has("--quiet");
  // --help and --version end the parse where they stand: the options before them were checked.
  if (args.final() == "--help") o.action = RecordOptions::Action::Help;
  if (args.final() == "--version") o.action = RecordOptions::Action::Version;
  if (o.action != RecordOptions::Action::Record) return o;
  if (!args.positional().empty())
    throw UsageError("missing '--' before the command (write: dlrecord [options] -- " + args.positional()[0] + " ...)");
  if (!args.sawDashDash()) throw UsageError("missing '--' and the command to record");
  o.command = args.command();
  if (o.command.empty()) throw UsageError("no command after '--'");
  return o;
}

}  // namespace dlrr
