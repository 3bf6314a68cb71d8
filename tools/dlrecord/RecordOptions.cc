#include "tools/dlrecord/RecordOptions.h"

#include <charconv>
#include <cstdlib>

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

const char* const kRecordUsage =
    "usage: dlrecord [options] [-o TRACE] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD unchanged and records it into TRACE (a directory) for dlreplay and dltrace.\n"
    "\n"
    "options:\n"
    "  -o, --output TRACE   trace directory to create (default: ./dlrr-YYYYmmdd-HHMMSS.trace)\n"
    "  --capture LEVEL      minimal | default | full  (default: default)\n"
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
    "  --ring-steps K       module outputs and losses of the last K steps are kept in full in\n"
    "                       memory and written only when a failure happens (default 2, 0 = off)\n"
    "  --redact LIST        comma-separated name fragments of environment variables whose\n"
    "                       values are never stored; '+LIST' adds to the defaults\n"
    "                       (TOKEN,SECRET,PASSWORD,PASSWD,KEY,CREDENTIAL,AUTH,COOKIE,SESSION)\n"
    "  -q, --quiet          no summary line at the end\n"
    "  -h, --help           this help\n"
    "  --version            print the version\n"
    "\n"
    "Exit status: CMD's own (128+N when it died of signal N); 127 when CMD cannot be found,\n"
    "126 when it cannot be executed, 2 on a usage error. Recording problems never change it.\n";

RecordOptions parseRecordOptions(const std::vector<std::string>& args) {
  using tools::UsageError;
  RecordOptions o;
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
      o.action = RecordOptions::Action::Help;
      return o;
    } else if (a == "--version") {
      o.action = RecordOptions::Action::Version;
      return o;
    } else if (a == "-o" || a == "--output") {
      o.output = value(a);
    } else if (a.rfind("--output=", 0) == 0) {
      o.output = a.substr(9);
    } else if (a == "--capture" || a.rfind("--capture=", 0) == 0) {
      o.capture = a == "--capture" ? value(a) : a.substr(10);
      if (o.capture != "minimal" && o.capture != "default" && o.capture != "full")
        throw UsageError("--capture must be minimal, default or full (got '" + o.capture + "')");
    } else if (a == "--collectives" || a.rfind("--collectives=", 0) == 0) {
      o.collectives = a == "--collectives" ? value(a) : a.substr(14);
      if (o.collectives != "digest" && o.collectives != "full")
        throw UsageError("--collectives must be digest or full (got '" + o.collectives + "')");
    } else if (a == "--snapshot-every" || a.rfind("--snapshot-every=", 0) == 0) {
      o.snapshotEvery = a == "--snapshot-every" ? value(a) : a.substr(17);
      if (!validSnapshotEvery(o.snapshotEvery))
        throw UsageError("--snapshot-every must be auto, off, SECONDS or Nsteps (got '" + o.snapshotEvery + "')");
    } else if (a == "--ring-steps" || a.rfind("--ring-steps=", 0) == 0) {
      std::string v = a == "--ring-steps" ? value(a) : a.substr(13);
      int k = -1;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), k);  // no blanks, no '+'
      if (ec != std::errc() || end != v.data() + v.size() || k < 0 || k > 64)
        throw UsageError("--ring-steps must be an integer from 0 to 64 (got '" + v + "')");
      o.ringSteps = k;
    } else if (a == "--redact" || a.rfind("--redact=", 0) == 0) {
      o.redact = parseRedactPatterns(a == "--redact" ? value(a) : a.substr(9));
    } else if (a == "-q" || a == "--quiet") {
      o.quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "'");
    } else {
      throw UsageError("missing '--' before the command (write: dlrecord [options] -- " + a + " ...)");
    }
  }
  if (!sawDashDash) throw UsageError("missing '--' and the command to record");
  for (; i < args.size(); ++i) o.command.push_back(args[i]);
  if (o.command.empty()) throw UsageError("no command after '--'");
  return o;
}

}  // namespace dlrr
