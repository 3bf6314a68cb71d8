#pragma once
// The digest of a batch value (bounded traces, docs/recording.md "Batches by reference"): fed
// the same flat calls as the batch builder (dlrr_val_*), on record and on replay, so a batch
// the replay re-makes through the job's own pipeline is checked against the one recorded
// without its bytes. Besides the whole batch's digest it keeps one digest per sample
// position: row i of every tensor whose leading dimension is the batch's sample count, so a
// mismatch names the sample (and from it the dataset index and file).
#include <cstdint>
#include <string_view>
#include <vector>

namespace dlrr {

class BatchDigest {
 public:
  void begin(uint64_t samples);           // samples: the batch's sample count (0: unknown)
  void container(char kind, uint32_t n);  // 'l' list, 't' tuple, 'd' dict
  void key(std::string_view k);
  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  void text(std::string_view s);
  void bytes(const void* p, uint64_t n);
  void opaque(std::string_view typeName);
  void tensor(std::string_view dtype, int ndim, const int64_t* shape, const void* data, uint64_t nbytes);

  uint64_t digest() const { return digest_; }
  const std::vector<uint64_t>& samples() const { return samples_; }

  // The first sample position whose digest differs (-1: none, or not comparable: the counts differ).
  static int64_t firstDifferentSample(const std::vector<uint64_t>& recorded, const std::vector<uint64_t>& now);

 private:
  void mix(uint64_t tag, uint64_t value);

  uint64_t digest_ = 0;
  std::vector<uint64_t> samples_;
};

}  // namespace dlrr
