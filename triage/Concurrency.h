#pragma once
// What else ran while a job was recorded, as far as determinism is concerned: processes that
// trained at the same time without torch.distributed (Hogwild-style trainers, which update a
// shared-memory model in whatever order the scheduler gives them) and processes the job
// created that dlrr did not record. Either means that neither a recording nor a replay of one
// of its streams shows the job to be deterministic (docs/replay.md).
#include <string>
#include <vector>

#include "format/Trace.h"

namespace dlrr {

struct UnrecordedProcess {
  int pid = 0;
  std::string parentStream;  // the stream whose Fork event names it
  std::string how;           // how it was created ("forked by native code, not through os.fork")
};

struct Concurrency {
  std::vector<std::string> trainers;  // process streams that began a training step, not ranks
  // Of those, the ones whose optimizer updated parameters in shared memory, and the ones that
  // did not say (traces before the hook noted it: runtime fact torch.shared_parameters).
  std::vector<std::string> sharing;
  std::vector<std::string> unknownSharing;
  std::vector<UnrecordedProcess> unrecorded;
  // One plain sentence saying why determinism cannot be claimed (trainers that may have raced:
  // several, some sharing parameters or not saying; unrecorded processes); empty otherwise.
  std::string caveat() const;
};

// Scans every process stream (damaged ones up to their damage).
Concurrency analyzeConcurrency(Trace& trace);

}  // namespace dlrr
