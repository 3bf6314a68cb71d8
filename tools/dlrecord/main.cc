// dlrecord [options] [-o TRACE] -- CMD [ARGS...]
//
// Runs CMD under the interposer and writes the launcher stream (command, redacted
// environment, exit status). The job is never harmed: if recording cannot start, CMD runs
// plainly and dlrecord says why; CMD's exit status is passed through (signal N -> 128+N).
// The phases: options, the launcher stream (LauncherStream.h), the job's environment
// (ChildEnvironment.h), the run with its status pipe (StatusPipe.h), what is said at the end
// (RecordSummary.h).
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "format/StreamWriter.h"
#include "format/TraceError.h"
#include "format/Version.h"
#include "recorder/ResourceUsage.h"
#include "tools/common/ChildProcess.h"
#include "tools/common/ExitCodes.h"
#include "tools/common/Text.h"
#include "tools/dlrecord/ChildEnvironment.h"
#include "tools/dlrecord/InstallPaths.h"
#include "tools/dlrecord/LauncherStream.h"
#include "tools/dlrecord/RecordOptions.h"
#include "tools/dlrecord/RecordSummary.h"
#include "tools/dlrecord/StatusPipe.h"

namespace dlrr {
namespace {

std::string defaultTraceName() {
  time_t t = time(nullptr);
  struct tm tm {};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "dlrr-%Y%m%d-%H%M%S.trace", &tm);
  return buf;
}

std::string absolutePath(const std::string& p) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

int run(int argc, char** argv) {
  RecordOptions o;
  try {
    o = parseRecordOptions(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tools::UsageError& e) {
    tools::printUsageError("dlrecord", e);
    return kExitUsage;
  }
  if (o.action == RecordOptions::Action::Help) {
    std::fputs(kRecordUsage, stdout);
    return 0;
  }
  if (o.action == RecordOptions::Action::Version) {
    std::printf("dlrecord %s (trace format %u.%u)\n", kDlrrVersion, kFormatMajor, kFormatMinor);
    return 0;
  }
  std::string trace = absolutePath(o.output.empty() ? defaultTraceName() : o.output);
  if (o.budget == 0) o.budget = defaultBudget(trace);  // from the free space, before the job writes any
  std::vector<std::string> problems;
  std::vector<std::string> leftOut;  // secrets kept out of the launcher stream, for the summary

  std::unique_ptr<StreamWriter> launcher;
  std::optional<InstallPaths> paths;
  try {
    paths = findInstallPaths();
    launcher = openLauncherStream(o, trace, &leftOut);
  } catch (const TraceError& e) {
    // A bad -o (missing parent, a file, no permission, an existing trace) is the user's to fix
    // before the job runs; only a broken installation still runs the job unrecorded.
    if (e.kind() == ErrorKind::Usage) {
      std::fprintf(stderr, "dlrecord: %s\n", tools::printable(e.what()).c_str());
      return kExitUsage;
    }
    problems.push_back(std::string("cannot record: ") + e.what() + "; running the job without recording");
  }
  const bool recording = launcher != nullptr;
  const int64_t launchNs = realNs();
  const int64_t oomKillsBefore = cgroupOomKills();  // to tell an OOM kill of the job afterwards

  std::optional<StatusPipe> status;
  if (recording) status.emplace();
  tools::LaunchSpec spec;
  spec.argv = o.command;
  spec.env = processEnvironment();
  if (recording) {
    std::string gpuOff;
    spec.env = childEnvironment(spec.env, o, trace, *paths, status->environmentValue(), gpuOff);
    if (!gpuOff.empty()) {
      problems.push_back("GPU capture off: " + gpuOff);
      appendRecorderProblem(*launcher, problems.back());
    }
    if (status->valid()) spec.inheritFds.push_back(status->childFd());  // the job's library reports through it
  }
  tools::ChildResult child;
  try {
    child = tools::launch(spec);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "dlrecord: cannot start the job: %s\n", e.what());
    return kExitNegative;
  }
  if (status) status->closeWriteEnd();
  if (child.execError != 0) {
    std::fprintf(stderr, "dlrecord: cannot run '%s': %s\n", o.command[0].c_str(), std::strerror(child.execError));
    if (launcher) {
      launcher->close();
      launcher.reset();
    }
    std::error_code ec;
    std::filesystem::remove_all(trace, ec);  // nothing was recorded: leave nothing behind
    return child.execError == ENOENT ? kExitCannotRun : kExitNotExecutable;
  }
  const int exitCode = tools::shellExitCode(child.waitStatus);

  if (launcher) {
    // What the job's library reported (e.g. a full disk stopped its stream) is kept in the
    // launcher stream too, so `dltrace info` shows the trace is incomplete and why.
    if (status)  // always here: made when recording
      for (auto& line : status->readLines()) {
        appendRecorderProblem(*launcher, line);
        problems.push_back(std::move(line));
      }
    appendProcessExit(*launcher, child.pid, child.waitStatus, exitCode, realNs() - launchNs);
    appendJobResources(*launcher, child.usage, oomKillsBefore, realNs() - launchNs);
    launcher->close();
    if (launcher->failed()) problems.push_back("launcher stream incomplete: " + launcher->error());
  }

  for (const auto& p : problems) std::fprintf(stderr, "dlrecord: %s\n", p.c_str());
  if (recording && !o.quiet) {
    for (const auto& line : recordSummary(trace, problems)) std::fprintf(stderr, "%s\n", line.c_str());
    for (const auto& line : leftOut)
      std::fprintf(stderr, "dlrecord: left out of the trace: %s\n", tools::printable(line).c_str());
  }
  return exitCode;
}

}  // namespace
}  // namespace dlrr

int main(int argc, char** argv) { return dlrr::run(argc, argv); }
