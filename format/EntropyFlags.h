#pragma once
// Bits of Entropy.flags beyond getrandom's own (GRND_NONBLOCK 1, GRND_RANDOM 2, GRND_INSECURE 4).
#include <cstdint>

namespace dlrr {

// Drawn in the job's process by a DataLoader's worker machinery (its queues' semaphore names,
// the connection challenges that pass tensors from workers): replay serves the batches and runs
// none of it, so replay skips these requests instead of finding the job's next ones out of step.
constexpr uint32_t kEntropyLoaderDraw = 1u << 31;

}  // namespace dlrr
