#include "tools/dlreplay/ReplayOptions.h"

#include <cstdlib>

#include "replayer/ReplayTarget.h"
#include "tools/dlreplay/ReplayPlan.h"
#include "tools/dlreplay/WhatIfChange.h"

namespace dlrr {
namespace {

// debugpy, debugpy:PORT or debugpy:HOST:PORT (the hook listens there; default 127.0.0.1:5678).
bool validDebugpy(const std::string& d) {
  if (d == "debugpy") return true;
  if (d.rfind("debugpy:", 0) != 0) return false;
  std::string port = d.substr(d.rfind(':') + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  return std::stoi(port) <= 65535 && d.find_first_of(" \t\n") == std::string::npos;
}

}  // namespace

const char* const kReplayUsage =
    "usage: dlreplay [options] TRACE [--until TARGET] [--debug pdb|gdb|wait|debugpy] [-- CMD ...]\n"
    "       dlreplay --clean-scratch\n"
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
    "                   debugpy[:[HOST:]PORT]: at the stop, wait for a DAP client (VS Code's\n"
    "                        Python: Remote Attach) on HOST:PORT (default 127.0.0.1:5678; port 0:\n"
    "                        any free one), printing the address; needs python3-debugpy\n"
    "  --check          replay to the recorded failure and say whether it is deterministic:\n"
    "                   'deterministic: reproduced at step N' (exit 0) or 'not reproduced' (13)\n"
    "  --stream NAME    the recorded process to replay (default: the one that trained)\n"
    "  --rank R         distributed trace: replay rank R alone, on this machine, collectives\n"
    "                   served from the trace (needs dlrecord --collectives full)\n"
    "  --all-ranks      distributed trace: relaunch every rank with the recorded launcher\n"
    "                   (torchrun), or each rank as it was started by hand, on this machine;\n"
    "                   each rank replays and verifies its stream\n"
    "                   (default for a distributed trace without kept collective results)\n"
    "  --serve-files WHEN  files the recording read (listings, stat, small files, the bytes\n"
    "                   used of large ones): missing (default) served where the path is\n"
    "                   missing here; always: instead of what is here; never\n"
    "  --serve-code     also serve code the trace holds (.py, .pyc, .pth, .so, zip archives, files\n"
    "                   under PYTHONPATH or library paths); default: never, a trace is data\n"
    "  --serve-budget BYTES  most bytes serving may write (default: 256 MiB + 16x the trace's\n"
    "                   size; runs of zeros are holes and cost nothing)\n"
    "  --scratch DIR    where the replayed job's writes go, new or empty (default: a new\n"
    "                   dlreplay-* directory in $TMPDIR or /tmp); your files are never modified:\n"
    "                   the job runs on an overlay of this machine's files (kernel namespaces)\n"
    "  --net host|none  the job's network: none (default; host with --debug debugpy) is loopback\n"
    "                   only; host is this machine's\n"
    "  --without-data   a bounded trace (dlrecord --window): serve batches recorded by reference\n"
    "                   from the trace's window instead of re-making them from the dataset;\n"
    "                   steps outside the window are refused, with the map (dltrace info)\n"
    "  --yes            consent to run the recorded command of a trace from another host/user\n"
    "  --dry-run        show the command and environment changes, run nothing\n"
    "  --json           print the report as one JSON line on stdout, after the job's output\n"
    "  --what-if CHANGE replay the recorded failure with one change, from the failing step (or\n"
    "                   the --from step) on, unverified, and say whether it recurs: drop-sample=I\n"
    "                   (dataset index I left out of its batches), skip-step (no update at the\n"
    "                   first step), lr-scale=F (each update's learning rate times F),\n"
    "                   clip-grad=F (gradient norm clipped to F before each update), fp32\n"
    "                   (autocast off), anomaly (autograd anomaly detection on)\n"
    "  --steps N        with --what-if: replay N steps with the change (default: to the end)\n"
    "  -q, --quiet      no progress line, no environment warnings\n"
    "  --clean-scratch  (alone) remove the scratch directories dlreplay kept for earlier\n"
    "                   replays that wrote files (those older than 7 days go at every replay);\n"
    "                   never a --scratch DIR, never one a running replay uses\n"
    "  -h, --help       this help;  --version  the version\n"
    "\n"
    "exit status: 0 target reached, every step verified; 10 target not reached; 11 divergence;\n"
    "12 the replayed process never attached; 13 --check: the failure did not reproduce;\n"
    "14 the trace was cut short and the replay reached its end; 15 --what-if: the failure recurred;\n"
    "9 consent needed; 2 usage; 3 I/O error; 4 not a trace; 5 newer trace format;\n"
    "6 corrupt trace; 7 no such step/stream/failure; 8 internal error;\n"
    "126/127 the command cannot be run / found.\n";

ReplayOptions parseReplayOptions(const std::vector<std::string>& argv) {
  using tools::OptSpec;
  using tools::UsageError;
  using T = OptSpec::Type;
  const tools::Args args(argv, {{"--help", T::Final, "-h"}, {"--version", T::Final},     {"--until", T::Value},
                                {"--from", T::Value},       {"--debug", T::Value},       {"--stream", T::Value},
                                {"--rank", T::Value},       {"--serve-files", T::Value}, {"--scratch", T::Value},
                                {"--net", T::Value},        {"--serve-code", T::Flag},   {"--serve-budget", T::Value},
                                {"--all-ranks", T::Flag},   {"--yes", T::Flag},          {"--check", T::Flag},
                                {"--dry-run", T::Flag},     {"--json", T::Flag},         {"--what-if", T::Value},
                                {"--steps", T::Value},      {"--quiet", T::Flag, "-q"},  {"--clean-scratch", T::Flag},
                                {"--without-data", T::Flag}},
                         tools::Args::Layout::Command);
  ReplayOptions o;
  o.until = args.value("--until").value_or("");
  if (auto v = args.value("--from")) {
    o.from = *v;
    if (o.from.empty() || !validJumpFrom(o.from)) throw UsageError("--from takes snapshot, start or step=N");
  }
  o.debug = args.value("--debug").value_or("");
  if (args.has("--debug") && o.debug != "pdb" && o.debug != "gdb" && o.debug != "wait" && !validDebugpy(o.debug))
    throw UsageError("--debug must be pdb, gdb, wait, debugpy or debugpy:[HOST:]PORT (got '" + o.debug + "')");
  o.stream = args.value("--stream").value_or("");
  try {
    if (auto r = args.intValue("--rank", 0, 1 << 24)) o.rank = static_cast<int>(*r);
  } catch (const UsageError&) {
    throw UsageError("--rank must be a rank number (got '" + *args.value("--rank") + "')");
  }
  if (auto v = args.value("--serve-files")) {
    o.serveFiles = *v;
    if (o.serveFiles != "missing" && o.serveFiles != "always" && o.serveFiles != "never")
      throw UsageError("--serve-files must be missing, always or never (got '" + o.serveFiles + "')");
  }
  if (auto v = args.value("--scratch")) {
    o.scratch = *v;
    if (o.scratch.empty()) throw UsageError("--scratch needs a directory");
  }
  if (auto v = args.value("--net")) {
    if (*v != "host" && *v != "none") throw UsageError("--net must be host or none (got '" + *v + "')");
    o.hostNetwork = *v == "host";
  } else if (validDebugpy(o.debug)) {
    o.hostNetwork = true;  // the DAP client attaches from this machine's network, not the sandbox's
  }
  o.serveCode = args.has("--serve-code");
  try {
    if (auto b = args.intValue("--serve-budget", 0, int64_t{1} << 50)) o.serveBudget = static_cast<uint64_t>(*b);
  } catch (const UsageError&) {
    throw UsageError("--serve-budget must be a number of bytes (got '" + *args.value("--serve-budget") + "')");
  }
  o.allRanks = args.has("--all-ranks");
  o.yes = args.has("--yes");
  o.withoutData = args.has("--without-data");
  o.check = args.has("--check");
  o.dryRun = args.has("--dry-run");
  o.json = args.has("--json");
  o.quiet = args.has("--quiet");
  // --help and --version end the parse where they stand: the options before them were checked.
  if (args.final() == "--help") o.action = ReplayOptions::Action::Help;
  if (args.final() == "--version") o.action = ReplayOptions::Action::Version;
  if (o.action != ReplayOptions::Action::Replay) return o;
  if (args.has("--clean-scratch")) {
    if (!args.positional().empty() || args.sawDashDash())
      throw UsageError("--clean-scratch replays nothing: it takes no trace or command");
    o.action = ReplayOptions::Action::CleanScratch;
    return o;
  }
  if (args.positional().size() > 1)
    throw UsageError("unexpected argument '" + args.positional()[1] + "' (a command to run goes after '--')");
  if (!args.positional().empty()) o.trace = args.positional()[0];
  if (args.sawDashDash()) {
    o.command = args.command();
    if (o.command.empty()) throw UsageError("no command after '--'");
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
  if (auto v = args.value("--what-if")) {
    o.whatIf = parseWhatIf(*v).text();
    if (o.check || !o.debug.empty() || o.allRanks || (!o.until.empty() && o.until != "nan"))
      throw UsageError(
          "--what-if replays the recorded non-finite failure alone: no --check, --debug, --all-ranks "
          "or --until other than nan");
    o.until = "nan";
  }
  if (args.has("--steps")) {
    if (o.whatIf.empty()) throw UsageError("--steps goes with --what-if");
    try {
      o.whatIfSteps = args.intValue("--steps", 1, int64_t{1} << 40);
    } catch (const UsageError&) {
      throw UsageError("--steps must be a number of steps, 1 or more (got '" + *args.value("--steps") + "')");
    }
  }
  if (!o.until.empty()) {
    std::string err;
    if (!parseReplayTarget(o.until, err)) throw UsageError(err);
  }
  return o;
}

}  // namespace dlrr
