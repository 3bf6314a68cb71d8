// dlpreflight [options] -- CMD [ARGS...]
//
// The job in miniature (docs/preflight.md): runs `dlrecord -o TRACE -- CMD` with
// DLRR_PREFLIGHT=K, which makes the Python hook cut every DataLoader pass and every loop
// without one to K, then reads the trace and reports (PreflightReport).
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "format/Trace.h"
#include "format/TraceError.h"
#include "format/Version.h"
#include "tools/common/ChildProcess.h"
#include "tools/common/ExitCodes.h"
#include "tools/common/Sandbox.h"
#include "tools/common/Text.h"
#include "tools/dlpreflight/PreflightOptions.h"
#include "tools/dlpreflight/PreflightReport.h"
#include "triage/TraceFacts.h"

namespace dlrr {
namespace {

double monotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// A new private directory under $TMPDIR (or /tmp) for the trace and the scratch directory.
std::string newWorkDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlpreflight-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw std::system_error(errno, std::generic_category(), "cannot create a directory under " + pattern);
  return std::string(buf.data());
}

int run(int argc, char** argv) {
  PreflightOptions o;
  try {
    o = parsePreflightOptions(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tools::UsageError& e) {
    tools::printUsageError("dlpreflight", e);
    return kExitUsage;
  }
  if (o.action == PreflightOptions::Action::Help) {
    std::fputs(kPreflightUsage, stdout);
    return 0;
  }
  if (o.action == PreflightOptions::Action::Version) {
    std::printf("dlpreflight %s (trace format %u.%u)\n", kDlrrVersion, kFormatMajor, kFormatMinor);
    return 0;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dlrecord = fs::read_symlink("/proc/self/exe", ec).parent_path() / "dlrecord";
  if (ec || !fs::exists(dlrecord, ec)) {
    std::fprintf(stderr, "dlpreflight: dlrecord is missing next to dlpreflight (%s)\n", dlrecord.c_str());
    return kExitNegative;
  }
  std::string trace, work, scratch;
  try {
    if (o.output.empty() || !o.writeThrough) work = newWorkDir();
    trace = o.output.empty() ? work + "/trace" : o.output;
    if (!o.writeThrough) {
      scratch = work + "/scratch";
      if (::mkdir(scratch.c_str(), 0700) != 0)
        throw std::system_error(errno, std::generic_category(), "cannot create " + scratch);
    }
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "dlpreflight: %s\n", e.what());
    return kExitNegative;
  }

  // The job (and the dlrecord that records it) in a sandbox (tools/common/Sandbox.h): its
  // writes land in the overlay whatever path they take; the trace's directory is written
  // through.
  std::unique_ptr<tools::Sandbox> sandbox;
  std::string isolation;
  if (!o.writeThrough) {
    std::string why = std::getenv("DLRR_NO_SANDBOX") ? "DLRR_NO_SANDBOX is set" : "";
    if (why.empty()) try {
        tools::SandboxSpec spec;
        spec.dir = work + "/overlay";
        spec.writable = {work};
        if (!o.output.empty()) {
          if (::mkdir(trace.c_str(), 0700) != 0 && errno != EEXIST)
            throw std::system_error(errno, std::generic_category(), "cannot create " + trace);
          spec.writable.push_back(trace);
        }
        spec.hostNetwork = o.hostNetwork;
        auto box = std::make_unique<tools::Sandbox>(spec);
        why = box->probe();
        if (why.empty()) sandbox = std::move(box);
      } catch (const std::exception& e) {
        why = e.what();
      }
    isolation = sandbox
                    ? std::string("kernel: the job's own mount") + (o.hostNetwork ? " and PID" : ", PID and network") +
                          " namespaces over an overlay of this machine's files"
                    : "libc hooks only (weak): " + why;
  }

  std::vector<std::string> args = {dlrecord.string(), "-q", "-o", trace, "--"};
  args.insert(args.end(), o.command.begin(), o.command.end());
  double start = monotonicSeconds();
  tools::ChildResult child;
  try {
    std::vector<std::pair<std::string, std::string>> env = {{"DLRR_PREFLIGHT", std::to_string(o.batches)}};
    if (!scratch.empty()) env.emplace_back("DLRR_SCRATCH", scratch);  // the job's writes land there
    if (sandbox) env.emplace_back("DLRR_ISOLATION", "kernel");        // ...on the overlay, by the kernel
    tools::LaunchSpec spec;
    spec.argv = args;
    spec.env = tools::environmentWith(env);
    spec.sandbox = sandbox.get();
    child = tools::launch(spec);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "dlpreflight: cannot start dlrecord: %s\n", e.what());
    return kExitNegative;
  }
  double seconds = monotonicSeconds() - start;
  if (child.execError != 0) {
    std::fprintf(stderr, "dlpreflight: cannot run %s: %s\n", dlrecord.c_str(), std::strerror(child.execError));
    return kExitNegative;
  }
  int jobExit = tools::shellExitCode(child.waitStatus);
  if (!fs::exists(fs::path(trace) / "launcher.dlrr", ec) && !fs::exists(trace, ec)) {
    // dlrecord refused (usage error) or CMD could not run: it said why; same exit code.
    if (!work.empty()) fs::remove_all(work, ec);
    return jobExit == kExitNotExecutable || jobExit == kExitCannotRun || jobExit == kExitUsage ? jobExit
                                                                                               : kExitNegative;
  }
  try {
    auto t = Trace::open(trace, OpenMode::Tolerant);
    triage::TriageInput in = triage::gatherFacts(*t);
    triage::TriageResult tr = triage::classify(in);
    preflight::Facts facts = preflight::parseFacts(in.runtime);
    preflight::Report report = preflight::judge(facts, in, tr, jobExit);
    report.scratch = scratch;
    report.isolation = isolation;
    if (sandbox) {
      tools::OverlayChanges c = tools::readOverlayChanges(sandbox->layers());
      report.overlayWritten = c.written;
      report.overlayRemoved = c.removed;
    }
    std::vector<preflight::MemoryEstimate> estimates;
    if (!o.compare.empty()) {
      try {
        auto earlier = Trace::open(o.compare, OpenMode::Tolerant);
        estimates = preflight::estimateMemory(preflight::parseFacts(triage::gatherFacts(*earlier).runtime), facts,
                                              o.targetBatch);
        if (estimates.empty())
          report.warnings.push_back("--compare: " + o.compare + " has no pass of the same loaders and phases");
      } catch (const TraceError& e) {
        report.warnings.push_back("--compare: " + o.compare + " is not readable: " + e.what());
      }
    }
    std::string text = preflight::renderText(facts, report, in, tr, trace, seconds, estimates);
    std::fputs(text.c_str(), stderr);
    if (o.json) std::fputs(preflight::renderJson(facts, report, in, tr, trace, seconds, estimates).c_str(), stdout);
    return report.exitCode;
  } catch (const TraceError& e) {
    std::fprintf(stderr, "dlpreflight: the preflight trace %s is not readable: %s\n", trace.c_str(), e.what());
    std::fprintf(stderr, "dlpreflight: FAILED: the job exited with status %d\n", jobExit);
    return kExitNegative;
  }
}

}  // namespace
}  // namespace dlrr

int main(int argc, char** argv) { return dlrr::run(argc, argv); }
