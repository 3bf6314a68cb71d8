#pragma once
// Failure triage: names a recorded failure's category and dimension following the taxonomy of
// the ICSE 2020 study of 4,960 failed deep-learning jobs (Zhang et al., "An Empirical Study on
// Program Failures of Deep Learning Jobs"), with the evidence, where in the job it happened,
// how much work it cost, and whether retrying can help. docs/triage.md explains the mapping
// and the evidence rules; every rule here is unit-tested on synthetic records
// (tests/unit/TriageClassifierTest.cc), GPU-only ones included.
#include <span>
#include <string>
#include <vector>

#include "triage/Facts.h"

namespace dlrr::triage {

enum class Dimension { None, Environment, DeepLearning, GeneralCode, Data, Unknown };

enum class Category {
  None,
  // execution environment
  PathNotFound,
  LibraryNotFound,
  PermissionDenied,
  DiskFull,
  DeviceUnavailable,
  CommunicationFailure,
  DistributedHang,
  ExternalSignal,
  // deep-learning specific
  GpuOutOfMemory,
  CpuOutOfMemory,
  TensorMismatch,
  LossNaN,
  FrameworkApiMisuse,
  CollectiveDesync,
  // general code error
  IllegalArgument,
  TypeMismatch,
  KeyNotFound,
  AttributeNotFound,
  NullReference,
  SyntaxError,
  IndexOutOfRange,
  UndefinedName,
  NotImplemented,
  OtherPythonError,
  NativeCrash,
  // data
  CorruptData,
  UnexpectedEncoding,
  Unknown,
};

enum class Determinism { Deterministic, NonDeterministic, Unknown };
enum class Phase { None, Initialisation, Training, Evaluation, Shutdown };

struct CategoryInfo {
  Category category;
  const char* id;    // "path_not_found"
  const char* name;  // "Path not found"
  Dimension dimension;
  Determinism determinism;  // the usual case; classify() refines it
  const char* why;          // what determinism depends on
  const char* advice;
};

const CategoryInfo& categoryInfo(Category c);
std::span<const CategoryInfo> allCategories();
const char* dimensionId(Dimension d);      // "execution_environment"
const char* dimensionName(Dimension d);    // "Execution environment"
const char* determinismId(Determinism d);  // "deterministic" | "nondeterministic" | "unknown"
const char* phaseId(Phase p);              // "initialisation" | "training" | "evaluation" | "shutdown" | "none"

// The category an exception (type, message, traceback) falls in, and a short phrase saying
// why ("Python module 'foo' is not installed"). Pure: only strings in, for the unit tests.
struct ExceptionClass {
  Category category = Category::OtherPythonError;
  std::string detail;
};
ExceptionClass classifyException(const std::string& type, const std::string& message,
                                 const std::vector<Frame>& traceback = {});

struct TriageResult {
  Category category = Category::None;
  Dimension dimension = Dimension::None;
  std::string summary;                // one line: "FileNotFoundError: /mnt/data/val.json"
  std::vector<std::string> evidence;  // most telling first
  Phase phase = Phase::None;
  std::string where;            // "training step 12", "initialisation (before the first step)"
  int64_t step = -1;            // the step in progress, -1 when none
  std::string location;         // "train.py:42 in main: x = cfg['lr']"
  double wallSeconds = -1;      // from the launch to the failure (or the end)
  double initSeconds = -1;      // from the process start to its first step
  double trainingSeconds = -1;  // from the first step to the failure
  int64_t stepsCompleted = 0;
  std::string lost;  // the three above as one phrase
  Determinism determinism = Determinism::Unknown;
  std::string retry;  // what retrying will do
  std::string advice;
};

TriageResult classify(const TriageInput& in);

// Helpers exposed for tests and for env-diff.
// The file-system path an error message names ("... No such file or directory: '/x/y'"), or "".
std::string pathInMessage(const std::string& message);
// Lookups every process makes at start-up (interpreter probes, locale files, crypto-library
// configuration): not evidence of anything.
bool isStartupProbe(const std::string& path, int op);
// A frame of the job's own code (not the standard library, site-packages, or dlrr's hook).
bool isUserFrame(const Frame& f);

}  // namespace dlrr::triage
