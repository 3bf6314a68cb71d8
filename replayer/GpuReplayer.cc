#include "replayer/GpuReplayer.h"

namespace dlrr {

void GpuReplayer::stepBegan(int64_t step) noexcept { tracker_.beginStep(step); }

void GpuReplayer::stepEnding(int64_t step) noexcept {
  tracker_.endStep(step);
  deliver();
}

void GpuReplayer::flush() noexcept { deliver(); }

void GpuReplayer::deliver() noexcept {
  try {
    std::lock_guard<std::mutex> lk(mu_);
    tracker_.drain(*this);
    for (auto& [step, launches] : pending_)
      if (step >= 0) session_.addReplayedLaunches(step, std::move(launches));
    pending_.clear();
  } catch (...) {  // best effort: launches not delivered: the GPU comparison reports them missing
  }
}

void GpuReplayer::name(uint32_t id, std::string_view text) { names_[id] = std::string(text); }

void GpuReplayer::launch(const gpu::LaunchEvent& e) {
  KernelLaunch l;
  l.seq = e.seq;
  l.nameId = e.nameId;
  auto it = names_.find(e.nameId);
  l.name = it == names_.end() ? "<unknown>" : it->second;
  l.grid[0] = e.grid.x, l.grid[1] = e.grid.y, l.grid[2] = e.grid.z;
  l.block[0] = e.block.x, l.block[1] = e.block.y, l.block[2] = e.block.z;
  l.sharedMem = e.sharedMem;
  l.device = e.device;
  l.flags = e.flags;
  pending_[e.step].push_back(std::move(l));
}

}  // namespace dlrr
