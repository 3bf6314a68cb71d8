#include "replayer/LaunchCompare.h"

#include <algorithm>
#include <sstream>

#include "session/LaunchTracker.h"

namespace dlrr {
namespace {

// The gap-free prefix 0, 1, 2, ... of a sequence sorted by seq; true when it is all of it.
size_t contiguousPrefix(const std::vector<KernelLaunch>& v) {
  size_t n = 0;
  while (n < v.size() && v[n].seq == n) ++n;
  return n;
}

std::string dims(const uint32_t d[3]) {
  std::ostringstream o;
  o << "(" << d[0] << "," << d[1] << "," << d[2] << ")";
  return o.str();
}

}  // namespace

std::string describeLaunch(const KernelLaunch& l) {
  std::ostringstream o;
  o << gpu::displayKernelName(l.name);
  if (l.geometryKnown())
    o << " grid " << dims(l.grid) << " block " << dims(l.block) << " smem " << l.sharedMem;
  else
    o << " (grid/block unknown)";
  return o.str();
}

LaunchComparison compareLaunches(int64_t step, std::vector<KernelLaunch> recorded, std::vector<KernelLaunch> replayed,
                                 bool complete) {
  auto bySeq = [](const KernelLaunch& a, const KernelLaunch& b) { return a.seq < b.seq; };
  std::stable_sort(recorded.begin(), recorded.end(), bySeq);
  std::stable_sort(replayed.begin(), replayed.end(), bySeq);
  LaunchComparison c;
  c.recorded = recorded.size();
  c.replayed = replayed.size();
  size_t nr = contiguousPrefix(recorded);
  size_t np = contiguousPrefix(replayed);
  c.truncated = nr < recorded.size() || np < replayed.size();
  size_t n = std::min(nr, np);
  for (size_t i = 0; i < n; ++i) {
    const KernelLaunch& a = recorded[i];
    const KernelLaunch& b = replayed[i];
    bool same = a.name == b.name;
    if (same && a.geometryKnown() && b.geometryKnown())
      same = std::equal(a.grid, a.grid + 3, b.grid) && std::equal(a.block, a.block + 3, b.block) &&
             a.sharedMem == b.sharedMem;
    if (!same) {
      c.match = false;
      c.compared = i + 1;
      c.position = i;
      c.detail = "launch " + std::to_string(i) + " of step " + std::to_string(step) + ": recorded " +
                 describeLaunch(a) + "; replayed " + describeLaunch(b);
      return c;
    }
  }
  c.compared = n;
  if (c.truncated) return c;  // nothing can be said past a gap
  if (complete && nr != np) {
    c.match = false;
    c.position = n;
    std::ostringstream o;
    o << "step " << step << ": recorded " << nr << " kernel launches, replayed " << np << "; first unmatched launch "
      << n << ": ";
    if (nr > np)
      o << "recorded " << describeLaunch(recorded[n]) << ", not replayed";
    else
      o << "replayed " << describeLaunch(replayed[n]) << ", not in the recording";
    c.detail = o.str();
  } else if (!complete && np > nr) {
    c.match = false;
    c.position = n;
    c.detail = "step " + std::to_string(step) + ": replayed launch " + std::to_string(n) + " (" +
               describeLaunch(replayed[n]) + ") is beyond the " + std::to_string(nr) + " recorded";
  }
  return c;
}

}  // namespace dlrr
