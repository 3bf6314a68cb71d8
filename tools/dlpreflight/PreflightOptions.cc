#include "tools/dlpreflight/PreflightOptions.h"

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
    "                       the trace, and the user's files are left as they are: the job runs\n"
    "                       on an overlay of this machine's files, in kernel namespaces)\n"
    "  --net host|none      the job's network: none (default) is loopback only; host is\n"
    "                       this machine's\n"
    "\n"
    "Exit status: 0 the job passed (every phase ran and it exited 0); 1 it failed (the report\n"
    "says where); 2 usage error; 3 incomplete: the job exited 0 but a DataLoader it made was\n"
    "never iterated (a phase the miniature did not reach); 127 CMD not found, 126 not executable.\n";

PreflightOptions parsePreflightOptions(const std::vector<std::string>& argv) {
  using tools::OptSpec;
  using tools::UsageError;
  using T = OptSpec::Type;
  const tools::Args args(argv,
                         {{"--help", T::Final, "-h"},
                          {"--version", T::Final},
                          {"--batches", T::Value, "-k"},
                          {"--output", T::Value, "-o"},
                          {"--compare", T::Value},
                          {"--memory-at", T::Value},
                          {"--write-through", T::Flag},
                          {"--net", T::Value},
                          {"--json", T::Flag}},
                         tools::Args::Layout::Command);
  PreflightOptions o;
  o.batches = static_cast<int>(args.intValue("--batches", 1, 1000000).value_or(o.batches));
  o.output = args.value("--output").value_or("");
  if (args.has("--output") && o.output.empty()) throw UsageError("--output needs a path");
  o.compare = args.value("--compare").value_or("");
  if (args.has("--compare") && o.compare.empty()) throw UsageError("--compare needs a trace");
  try {
    o.targetBatch = args.intValue("--memory-at", 1, int64_t{1} << 40).value_or(0);
  } catch (const UsageError&) {
    throw UsageError("--memory-at must be a positive batch size (got '" + *args.value("--memory-at") + "')");
  }
  o.writeThrough = args.has("--write-through");
  if (auto v = args.value("--net")) {
    if (*v != "host" && *v != "none") throw UsageError("--net must be host or none (got '" + *v + "')");
    o.hostNetwork = *v == "host";
  }
  o.json = args.has("--json");
  // --help and --version end the parse where they stand: the options before them were checked.
  if (args.final() == "--help") o.action = PreflightOptions::Action::Help;
  if (args.final() == "--version") o.action = PreflightOptions::Action::Version;
  if (o.action != PreflightOptions::Action::Run) return o;
  if (!args.positional().empty())
    throw UsageError("missing '--' before the command (write: dlpreflight [options] -- " + args.positional()[0] +
                     " ...)");
  if (!args.sawDashDash()) throw UsageError("missing '--' and the command to run");
  if ((o.targetBatch > 0) != !o.compare.empty())
    throw UsageError(
        "--compare and --memory-at go together (an earlier run at another batch size, and the batch "
        "size to estimate for)");
  o.command = args.command();
  if (o.command.empty()) throw UsageError("no command after '--'");
  return o;
}

}  // namespace dlrr
