#include "tools/dlreplay/Recomputation.h"

namespace dlrr {

std::string divergedTensor(const ReplayReport::Divergence& d) {
  const size_t colon = d.detail.find(": ");
  std::string what = colon == std::string::npos ? (d.kind + " " + d.path) : d.detail.substr(0, colon);
  return what + " of step " + std::to_string(d.step);
}

Recomputation compareComputations(const ReplayReport::Divergence& first, const ReplayReport& second, bool secondOk) {
  Recomputation r;
  r.ran = second.attached;
  if (!r.ran) return r;
  if (!second.divergence) {
    // Every value the second computation made matched the recording, the first's value here did
    // not: they differ here. A second run that ended otherwise (an error) shows nothing.
    if (secondOk) r.differsAt = divergedTensor(first);
    return r;
  }
  const ReplayReport::Divergence& b = *second.divergence;
  // Both computations matched the recording up to their first divergence: where one diverged
  // at an earlier step, the other still matched the recording, so that is where they differ.
  const std::string here = divergedTensor(first), there = divergedTensor(b);
  if (b.step != first.step)
    r.differsAt = b.step < first.step ? there : here;
  else if (here != there)  // two places of one step: which came first, the reports do not say
    r.differsAt = here + " in one computation, " + there + " in the other";
  else if (b.detail != first.detail)
    r.differsAt = here;  // the same tensor, two values
  else
    r.agreed = true;
  return r;
}

}  // namespace dlrr
