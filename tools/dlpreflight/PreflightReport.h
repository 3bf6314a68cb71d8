#pragma once
// What a preflight run did and whether the job passed, from its trace: the `preflight.*`
// runtime facts the hook wrote (pyhook/python/dlrr_hook/preflight.py) and the triage of
// its failure. Pure functions of their inputs, unit-tested (tests/unit/PreflightReportTest.cc).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "triage/Classifier.h"
#include "triage/Facts.h"

namespace dlrr::preflight {

struct Pass {
  int64_t index = 0;  // in the order passes began
  int loader = 0;     // in the order loaders were first iterated
  std::string dataset;
  std::string phase;  // training | evaluation
  int64_t batches = 0;
  int64_t of = -1;  // the pass's full length (-1: unknown)
  bool cut = false;
  int64_t updates = 0;
  uint64_t peakRssKib = 0;
  int64_t batchSize = -1;   // the loader's batch size (-1: none, e.g. batch_size=None)
  int64_t gpuPeak = -1;     // the CUDA allocator's peak so far at the pass's end (-1: no CUDA)
  bool gpuNewPeak = false;  // that peak was reached during the pass (else: not above it)
};

struct EnvRead {
  std::string name;
  bool set = false;
  std::string where;  // file:line of the job's code that read it
};

struct PathUse {
  std::string how;  // read | write | list | mkdir | remove
  std::string path;
};

struct UnusedLoader {
  std::string dataset;
  std::string where;  // file:line of the job's code that made it
};

struct Facts {
  int k = 0;  // 0: the hook never ran in preflight mode
  std::vector<Pass> passes;
  std::vector<std::string> loops;    // "cut: train.py:40 after 2 updates", "not cut: ..."
  std::vector<std::string> saves;    // "torch.save /ckpt/ep0.pt ok (training)"
  std::vector<UnusedLoader> unused;  // DataLoaders made and never iterated
  std::vector<PathUse> paths;
  std::vector<EnvRead> env;
  uint64_t peakRssKib = 0;
  bool cpuFallback = false;  // no GPU here: CUDA devices the job asked for were given the CPU
  int64_t cudaRewrites = 0;  // how many device arguments that moved
  std::string error;         // the hook's own internal error, if any
};

// Parses the `preflight.*` items of a process's runtime facts (items in the order of their
// numbers, whatever the map's order). Malformed items are skipped.
Facts parseFacts(const std::map<std::string, std::string>& runtime);

// One line per loader and phase: passes, batches per pass, peak RSS.
struct PhaseLine {
  int loader = 0;
  std::string dataset;
  std::string phase;
  int64_t passes = 0;
  int64_t minBatches = 0, maxBatches = 0;
  int64_t of = -1;
  bool cut = false;
  uint64_t peakRssKib = 0;
  int64_t batchSize = -1;
  int64_t gpuPeak = -1;     // the highest GPU peak reached in one of these passes (-1: none)
  int64_t gpuCeiling = -1;  // passes that reached no new peak stayed at or below this
};
std::vector<PhaseLine> phaseLines(const Facts& f);

// Peak RSS of a loader's phase at another batch size, on the straight line through two
// preflight runs of the same job at two batch sizes (activation memory grows with the batch
// size; everything else is taken as fixed).
struct MemoryEstimate {
  int loader = 0;
  std::string phase;
  int64_t batchA = 0, batchB = 0;  // the two runs' batch sizes
  uint64_t peakA = 0, peakB = 0;   // KiB
  int64_t target = 0;
  uint64_t estimateKib = 0;
  std::string note;  // why the line could not be used as is, if so
};
std::vector<MemoryEstimate> estimateMemory(const Facts& earlier, const Facts& now, int64_t targetBatch);

struct Report {
  bool passed = false;
  int exitCode = 1;       // dlpreflight's: 0 passed, 1 failed, 3 incomplete (a loader never iterated)
  std::string verdict;    // one line
  std::string cutCaveat;  // a failure right after a cut evaluation pass: it may be the cut's doing
  std::vector<std::string> warnings;
  std::string scratch;    // where the job's writes went ("" with --write-through)
  std::string isolation;  // "kernel: ..." or "libc hooks only (weak): WHY" ("" with --write-through)
  std::vector<std::string> overlayWritten, overlayRemoved;  // from the overlay's upper directory
};

// jobExit: the job's exit code as a shell gives it (128+N for signal N). `triage` is the
// classification of the recorded failure (only read when in.failure or in.nonfinite is set).
Report judge(const Facts& f, const triage::TriageInput& in, const triage::TriageResult& triage, int jobExit);

std::string renderText(const Facts& f, const Report& r, const triage::TriageInput& in,
                       const triage::TriageResult& triage, const std::string& tracePath, double seconds,
                       const std::vector<MemoryEstimate>& estimates = {});
std::string renderJson(const Facts& f, const Report& r, const triage::TriageInput& in,
                       const triage::TriageResult& triage, const std::string& tracePath, double seconds,
                       const std::vector<MemoryEstimate>& estimates = {});

}  // namespace dlrr::preflight
