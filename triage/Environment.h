#pragma once
// The recorded environment of a trace, the current machine's, and what differs between them
// and why it matters: for `dltrace env`, `dltrace env-diff` and dlreplay's pre-flight check.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "format/Trace.h"
#include "triage/Facts.h"

namespace dlrr::triage {

// Flat facts, comparable key by key:
//   host user kernel cpu.model cpu.count cwd
//   python torch numpy blas torch.num_threads cuda.compiled cuda.available cuda.device_count
//   cuda.device.N cudnn.version gpu.driver
//   env.NAME      (the variables in comparedEnvVars())
//   package.NAME  (version of a top-level package the job imported)
using EnvFacts = std::map<std::string, std::string>;

struct ProcessEnvironment {
  std::string stream;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> runtime;  // as recorded, in order
  std::vector<PackageRecord> packages;
  std::vector<ResourceRecord> peaks;
};

struct RecordedEnvironment {
  std::string host, user, cwd, cpuModel, kernel, captureMode;
  uint32_t uid = 0;
  uint32_t cpuCount = 0;
  int64_t createdNs = 0;
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;  // redacted values are "<redacted>"
  std::vector<std::string> redactedNames;
  std::vector<std::pair<std::string, std::string>> options;
  std::vector<ProcessEnvironment> processes;  // the main (training) process first
  EnvFacts facts;                             // the above, flattened for comparison
};

RecordedEnvironment recordedEnvironment(Trace& trace);
// The same without another pass over the events: the launcher's header plus the failing (or
// main) process's facts already gathered by gatherFacts() (dlreplay's pre-flight check).
RecordedEnvironment recordedEnvironment(Trace& trace, const TriageInput& facts);

// Environment variables env-diff compares (thread counts, devices, hash seed, search paths,
// locale, allocator settings).
const std::vector<std::string>& comparedEnvVars();

// The string assigned to `__version__` at the start of a line of a Python file (torch/version.py
// of 1.x and 2.x); "" when there is none.
std::string versionAssigned(const std::string& pythonSource);

struct ProbeOptions {
  bool runPython = true;  // ask an interpreter for versions (about a second with torch)
  std::string python;     // which one (--python); "" = chooseInterpreter(), never the trace's
  int timeoutSeconds = 60;
};

// The current machine's facts. Without Python, versions come from the files of the packages
// the recording imported (torch/version.py, NAME-VERSION.dist-info or .egg-info beside them)
// and the interpreter's version from its file name: cheap enough for dlreplay.
EnvFacts currentEnvironment(const RecordedEnvironment& rec, const ProbeOptions& opt, std::vector<std::string>& notes);
// The interpreter env-diff runs unless told otherwise: this machine's /usr/bin/python3, else
// python3 in an absolute PATH directory; "" when none exists. Never the recorded command: a
// trace's command is run only when the user asks (dlreplay's consent, --python).
std::string chooseInterpreter();
// The recorded command's argv[0] found here when it is a Python ("" otherwise): its file name
// gives a version without running it (the no-Python path); it is named, never run.
std::string recordedInterpreter(const RecordedEnvironment& rec);

enum class Impact { Breaks, Matters, Info };
const char* impactId(Impact i);  // "breaks-replay" | "matters" | "info"

struct EnvDifference {
  std::string key;
  std::string recorded;
  std::string current;
  Impact impact = Impact::Info;
  std::string why;
};

// Keys present on one side only are compared as "<unset>" / "<unknown>"; keys the current side
// could not determine ("?") are skipped.
std::vector<EnvDifference> diffEnvironments(const EnvFacts& recorded, const EnvFacts& current);

// Paths the recorded job used or missed, checked here: the working directory, the interpreter
// and script, imported packages' locations, loaded BLAS, missing paths that exist now (the
// failure may not repeat), denied paths that are accessible now, libraries that failed to load.
std::vector<EnvDifference> checkPaths(const RecordedEnvironment& rec, const TriageInput& facts);

// Two version strings name the same release ("1.13.0a0" and "1.13.0a0+gitunknown" do).
bool versionsAgree(const std::string& a, const std::string& b);

}  // namespace dlrr::triage
