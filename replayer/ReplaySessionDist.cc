// ReplaySession's side of torch.distributed collectives (docs/distributed.md). Collectives are
// numbered in issue order, as in record; each is checked against the recording (same op, same
// bytes sent: ReplayVerifier) and, replaying one rank alone, its recorded results are served
// so the rank runs without its peers. A mismatch is a divergence like a differing digest:
// replay never claims success past it.
#include "replayer/ReplaySession.h"

namespace dlrr {

uint64_t ReplaySession::collectiveBegin(const char* op, const char* /*group*/, const char* /*reduceOp*/, int /*peer*/,
                                        int /*bucket*/, bool /*asyncOp*/) {
  return verifier_->beginCollective(op ? op : "", step_.load());
}

int ReplaySession::collectiveTensor(uint64_t seq, bool result, const char* dtype, int ndim, const int64_t* shape,
                                    const void* data, uint64_t nbytes) {
  DigestResult d = computeDigest(dtype ? dtype : "", data, data ? nbytes : 0);
  return verifier_->checkCollectiveTensor(seq, result, dtype ? dtype : "", std::vector<int64_t>(shape, shape + ndim), d,
                                          step_.load());
}

int ReplaySession::collectiveResult(uint64_t seq, uint32_t index, std::vector<uint8_t>& out) {
  if (!index_) return -1;
  auto it = index_->collectives().find(seq);
  if (it == index_->collectives().end() || index >= it->second.results.size()) return -1;
  const RecordingIndex::CollectiveTensor& r = it->second.results[index];
  if (r.blobSize == 0) return 0;
  if (!index_->hasBlob(r.blob)) return 0;      // kept with a --window the job outlived: digest only
  out = index_->readBlob(r.blob, r.blobSize);  // checks the content hash
  ++collectiveResultsServed_;
  return 1;
}

int ReplaySession::recordedRank() const { return stream_ ? stream_->header().getRank() : -1; }

}  // namespace dlrr
