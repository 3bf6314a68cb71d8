#include "tools/dlpreflight/PreflightOptions.h"

#include <charconv>

namespace dlrr {

const char* const kPreflightUsage =
    "usage: dlpreflight [options] -- CMD [ARGS...]\n"
    "\n"
    "Runs the unchanged job in miniature before you submit it: every DataLoader pass is cut to\n"
    "K batches and (Python 3.11, 3.13) every loop that trains without a DataLoader to K updates, so every\n"
    "epoch, evaluation pass, checkpoint save and final export runs in seconds. The run is\n"
    "recorded like any dlrecord run. Then one report: which phases ran, what failed and where\n"
    "(with dltrace triage's category and evidence), what the job touched that may not exist\n"
    "on the cluster (paths read, written, listed or created; environment variables its code\n"
    "read; paths it missed), and peak memory per phase.\n"
    "\n"
    "options:\n"
    "  -k, --batches K      batches per DataLoader pass, updates per loop without one\n"
    "                       (default 2)\n"
    "  -o, --output TRACE   where to write the preflight trace (default: a new directory\n"
    "                       dlpreflight-XXXXXX/trace under $TMPDIR or /tmp; kept)\n"
    "  --json               the report as one line of JSON on stdout, after the job's output\n"
    "                       (the text report goes to stderr either way)\n"
    "  --compare TRACE      an earlier preflight trace of the same job run with another\n"
    "                       batch size; with --memory-at, peak RSS per phase is estimated\n"
    "  --memory-at N        ...at batch size N, on the straight line through the two runs\n"
    "  -h, --help           this help\n"
    "  --version            print the version\n"
    "\n"
    "  --write-through      let the job write its files where it writes them (default: its\n"
    "                       writes, renames and removals go to a scratch directory next to\n"
    "                       the trace, and the user's files are left as they are)\n"
    "\n"
    "Exit status: 0 the job passed (every phase ran and it exited 0); 1 it failed (the report\n"
    "says where); 2 usage error; 127 CMD not found, 126 not executable.\n";

PreflightOptions parsePreflightOptions(const std::vector<std::string>& args) {
  using tools::UsageError;
  PreflightOptions o;
  size_t i = 0;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= args.size()) throw UsageError("option " + flag + " needs a value");
    return args[++i];
  };
  bool sawDashDash = false;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      sawDashDash = true;
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      o.action = PreflightOptions::Action::Help;
      return o;
    } else if (a == "--version") {
      o.action = PreflightOptions::Action::Version;
      return o;
    } else if (a == "-k" || a == "--batches" || a.rfind("--batches=", 0) == 0) {
      std::string v = a.rfind("--batches=", 0) == 0 ? a.substr(10) : value(a);
      int k = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), k);  // digits only
      if (ec != std::errc() || end != v.data() + v.size() || k < 1 || k > 1000000)
        throw UsageError("--batches must be an integer from 1 to 1000000 (got '" + v + "')");
      o.batches = k;
    } else if (a == "-o" || a == "--output") {
      o.output = value(a);
      if (o.output.empty()) throw UsageError("--output needs a path");
    } else if (a.rfind("--output=", 0) == 0) {
      o.output = a.substr(9);
      if (o.output.empty()) throw UsageError("--output needs a path");
    } else if (a == "--compare" || a.rfind("--compare=", 0) == 0) {
      o.compare = a == "--compare" ? value(a) : a.substr(10);
      if (o.compare.empty()) throw UsageError("--compare needs a trace");
    } else if (a == "--memory-at" || a.rfind("--memory-at=", 0) == 0) {
      std::string v = a == "--memory-at" ? value(a) : a.substr(12);
      int64_t n = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > (int64_t{1} << 40))
        throw UsageError("--memory-at must be a positive batch size (got '" + v + "')");
      o.targetBatch = n;
    } else if (a == "--write-through") {
      o.writeThrough = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "'");
    } else {
      throw UsageError("missing '--' before the command (write: dlpreflight [options] -- " + a + " ...)");
    }
  }
  if (!sawDashDash) throw UsageError("missing '--' and the command to run");
  if ((o.targetBatch > 0) != !o.compare.empty())
    throw UsageError(
        "--compare and --memory-at go together (an earlier run at another batch size, and the batch "
        "size to estimate for)");
  for (; i < args.size(); ++i) o.command.push_back(args[i]);
  if (o.command.empty()) throw UsageError("no command after '--'");
  return o;
}

}  // namespace dlrr
