#pragma once
// What `dltrace report` and `dltrace export` show, read from a trace once: the training
// curve, per-module digest figures of the steps before the failure, the failing sample, and
// every recorded process on one clock (CLOCK_REALTIME at stream start + the event's offset).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "triage/Ranks.h"

namespace dlrr::tools {

// How many steps before (and including) the failing step the heat maps show.
constexpr int64_t kHeatSteps = 40;
// Rows (modules or parameters) a heat map shows at most.
constexpr size_t kHeatRows = 48;

struct StepPoint {
  int64_t step = -1;
  double loss = 0;  // NaN when none or non-finite
  bool untrained = false;
  uint64_t nonFinite = 0;
  int64_t beginNs = -1;  // trace clock (ns since the epoch); -1 when unknown
  int64_t endNs = -1;
  int64_t epoch = -1;
};

// One cell of a heat map: the largest finite magnitude a digest saw, and whether any value
// was non-finite.
struct HeatCell {
  double maxAbs = -1;  // -1: no finite value
  uint64_t nonFinite = 0;
};

struct HeatMap {
  std::string title;
  std::vector<std::string> rows;  // first-seen order
  std::vector<int64_t> steps;     // ascending
  std::map<std::pair<size_t, int64_t>, HeatCell> cells;
  size_t droppedRows = 0;
};

// One span or instant on a stream's row of the timeline.
struct TimelineMark {
  int64_t ns = 0;
  int64_t endNs = -1;  // -1: an instant
  std::string name;
  std::string detail;
};

struct StreamTimeline {
  std::string stream;
  std::string role;
  int pid = 0;
  int rank = -1;
  int64_t startNs = 0;
  int64_t endNs = 0;
  std::vector<TimelineMark> steps;        // step spans
  std::vector<TimelineMark> phases;       // init, epochs, shutdown
  std::vector<TimelineMark> collectives;  // instants: when the collective was recorded
  std::vector<TimelineMark> failures;     // instants
};

// The failing step's sample (or its batch's first field when it holds no image).
struct Sample {
  std::string batchDescription;  // "tuple(tensor float32[32,1,28,28], tensor int64[32])"
  std::string field;             // path of the shown field ("0")
  int64_t index = -1;            // index within the batch
  int64_t datasetIndex = -1;     // DataLoader sample index, -1 unknown
  std::string why;               // "the sample with non-finite values", "the batch's first sample"
  // An image: height x width x channels (1 or 3) of doubles (NaN/inf kept).
  int height = 0, width = 0, channels = 0;
  std::vector<double> pixels;
  uint64_t nonFinitePixels = 0;
  std::vector<int64_t> tokens;  // integer sequences (no vocabulary is recorded: ids)
  std::vector<double> values;   // any other tensor: the sample's first values
  std::string note;             // why nothing is shown
};

struct LrPoint {
  int64_t step = -1;
  double lr = 0;
};

struct ReportData {
  TraceSummary summary;
  RankReport ranks;
  std::string mainStream;
  std::vector<StepPoint> steps;
  std::vector<LrPoint> lr;
  HeatMap gradients;
  HeatMap activations;
  std::optional<Sample> sample;
  std::vector<StreamTimeline> timeline;
  std::vector<std::string> warnings;  // what could not be read
};

ReportData gatherReport(Trace& trace);

}  // namespace dlrr::tools
