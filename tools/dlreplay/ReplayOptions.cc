#include "tools/dlreplay/ReplayOptions.h"

#include <charconv>
#include <cstdlib>

#include "replayer/ReplayTarget.h"
#include "tools/dlreplay/ReplayPlan.h"

namespace dlrr {

const char* const kReplayUsage =
    "usage: dlreplay [options] TRACE [--until TARGET] [--debug pdb|gdb|wait] [-- CMD ...]\n"
    "\n"
    "Replays a dlrecord trace bit for bit: entropy, DataLoader batches and RNG states come from\n"
    "the trace (the dataset need not exist), every step is checked against the recording, and\n"
    "the job stops at TARGET.\n"
    "\n"
    "options:\n"
    "  --until TARGET   nan      right before the module whose output was the first non-finite\n"
    "                            value (the default when the trace has one)\n"
    "                   step=N   at the start of step N, its batch in hand, before the forward\n"
    "                   crash    at the recorded exception or fatal signal (default when one)\n"
    "                   end      run to the end, verifying every step (default otherwise)\n"
    "  --from WHERE     where verification starts (jump replay). Default: the latest periodic\n"
    "                   snapshot at or before the target's step (none: step 0); the steps\n"
    "                   before it are fast-forwarded, not verified. snapshot: the latest\n"
    "                   snapshot, the failure one included; start: step 0; step=N: the\n"
    "                   snapshot of step N\n"
    "  --debug MODE     pdb: an interactive pdb in your frame at the stop\n"
    "                   gdb: run under gdb, stopping in dlrr_replay_stopped (report written)\n"
    "                        or at a fatal signal (batch mode when stdin is not a terminal:\n"
    "                        prints the stack and ends)\n"
    "                   wait: pause at the stop, print the PID and attach commands; resumes\n"
    "                        when the debugger detaches or on SIGCONT/SIGUSR1\n"
    "  --check          replay to the recorded failure and say whether it is deterministic:\n"
    "                   'deterministic: reproduced at step N' (exit 0) or 'not reproduced' (13)\n"
    "  --stream NAME    the recorded process to replay (default: the one that trained)\n"
    "  --rank R         distributed trace: replay rank R alone, on this machine, collectives\n"
    "                   served from the trace (needs dlrecord --collectives full)\n"
    "  --all-ranks      distributed trace: relaunch every rank with the recorded launcher\n"
    "                   (torchrun) on this machine; each rank replays and verifies its stream\n"
    "                   (default for a distributed trace without kept collective results)\n"
    "  --serve-files WHEN  files the recording read (listings, stat, small files, the bytes\n"
    "                   used of large ones): missing (default) served where the path is\n"
    "                   missing here; always: instead of what is here; never\n"
    "  --scratch DIR    where the replayed job's writes go (default: a new dlreplay-* directory\n"
    "                   in $TMPDIR or /tmp); your files are never modified\n"
    "  --yes            consent to run the recorded command of a trace from another host/user\n"
    "  --dry-run        show the command and environment changes, run nothing\n"
    "  --json           print the report as one JSON line on stdout, after the job's output\n"
    "  -q, --quiet      no progress line, no environment warnings\n"
    "  -h, --help       this help;  --version  the version\n"
    "\n"
    "exit status: 0 target reached, every step verified; 10 target not reached; 11 divergence;\n"
    "12 the replayed process never attached; 13 --check: the failure did not reproduce;\n"
    "9 consent needed; 2 usage; 3 I/O error; 4 not a trace; 5 newer trace format;\n"
    "6 corrupt trace; 7 no such step/stream/failure; 8 internal error;\n"
    "126/127 the command cannot be run / found.\n";

ReplayOptions parseReplayOptions(const std::vector<std::string>& args) {
  using tools::UsageError;
  ReplayOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& flag) -> std::string {
      auto eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos) return a.substr(eq + 1);
      if (i + 1 >= args.size()) throw UsageError("option " + flag + " needs a value");
      return args[++i];
    };
    auto is = [&](const char* flag) { return a == flag || a.rfind(std::string(flag) + "=", 0) == 0; };
    if (a == "--") {
      for (++i; i < args.size(); ++i) o.command.push_back(args[i]);
      if (o.command.empty()) throw UsageError("no command after '--'");
      break;
    } else if (a == "-h" || a == "--help") {
      o.action = ReplayOptions::Action::Help;
      return o;
    } else if (a == "--version") {
      o.action = ReplayOptions::Action::Version;
      return o;
    } else if (is("--until")) {
      o.until = value("--until");
    } else if (is("--from")) {
      o.from = value("--from");
      if (o.from.empty() || !validJumpFrom(o.from)) throw UsageError("--from takes snapshot, start or step=N");
    } else if (is("--debug")) {
      o.debug = value("--debug");
      if (o.debug != "pdb" && o.debug != "gdb" && o.debug != "wait")
        throw UsageError("--debug must be pdb, gdb or wait (got '" + o.debug + "')");
    } else if (is("--stream")) {
      o.stream = value("--stream");
    } else if (is("--rank")) {
      std::string v = value("--rank");
      int r = -1;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), r);  // no blanks, no '+'
      if (ec != std::errc() || end != v.data() + v.size() || r < 0 || r > (1 << 24))
        throw UsageError("--rank must be a rank number (got '" + v + "')");
      o.rank = r;
    } else if (is("--serve-files")) {
      o.serveFiles = value("--serve-files");
      if (o.serveFiles != "missing" && o.serveFiles != "always" && o.serveFiles != "never")
        throw UsageError("--serve-files must be missing, always or never (got '" + o.serveFiles + "')");
    } else if (is("--scratch")) {
      o.scratch = value("--scratch");
      if (o.scratch.empty()) throw UsageError("--scratch needs a directory");
    } else if (a == "--all-ranks") {
      o.allRanks = true;
    } else if (a == "--yes") {
      o.yes = true;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--dry-run") {
      o.dryRun = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-q" || a == "--quiet") {
      o.quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "'");
    } else if (o.trace.empty()) {
      o.trace = a;
    } else {
      throw UsageError("unexpected argument '" + a + "' (a command to run goes after '--')");
    }
  }
  if (o.trace.empty()) throw UsageError("missing TRACE");
  if (o.check && !o.until.empty()) throw UsageError("--check replays to the recorded failure; it takes no --until");
  if (o.check && !o.debug.empty()) throw UsageError("--check runs without a debugger");
  if (o.rank && o.allRanks) throw UsageError("--rank and --all-ranks exclude each other");
  if ((o.rank || o.allRanks) && !o.stream.empty())
    throw UsageError("--stream names a process; --rank/--all-ranks pick ranks");
  if (o.allRanks && !o.debug.empty())
    throw UsageError("--all-ranks runs without a debugger (replay one rank with --rank R --debug ...)");
  if (o.allRanks && o.check) throw UsageError("--check replays one process; use --rank R --check");
  if (!o.until.empty()) {
    std::string err;
    if (!parseReplayTarget(o.until, err)) throw UsageError(err);
  }
  return o;
}

}  // namespace dlrr
