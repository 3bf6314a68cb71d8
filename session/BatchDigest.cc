#include "session/BatchDigest.h"

#include <cstring>

#include "format/Hash.h"

namespace dlrr {

void BatchDigest::begin(uint64_t samples) {
  digest_ = 0x646c72722d626174ull;  // "dlrr-bat": a digest of nothing differs from 0
  samples_.assign(samples, 0);
}

void BatchDigest::mix(uint64_t tag, uint64_t value) {
  const uint64_t words[3] = {digest_, tag, value};
  digest_ = hash64(words, sizeof words);
}

void BatchDigest::container(char kind, uint32_t n) { mix(static_cast<uint64_t>(kind), n); }
void BatchDigest::key(std::string_view k) { mix('k', hash64(k.data(), k.size())); }
void BatchDigest::none() { mix('n', 0); }
void BatchDigest::boolean(bool v) { mix('b', v ? 1 : 0); }
void BatchDigest::integer(int64_t v) { mix('i', static_cast<uint64_t>(v)); }
void BatchDigest::real(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);  // bit-exact, as tensors are
  mix('f', bits);
}
void BatchDigest::text(std::string_view s) { mix('s', hash64(s.data(), s.size())); }
void BatchDigest::bytes(const void* p, uint64_t n) { mix('y', hash64(p, n)); }
void BatchDigest::opaque(std::string_view typeName) { mix('o', hash64(typeName.data(), typeName.size())); }

void BatchDigest::tensor(std::string_view dtype, int ndim, const int64_t* shape, const void* data, uint64_t nbytes) {
  mix('T', hash64(dtype.data(), dtype.size()));
  for (int i = 0; i < ndim; ++i) mix('d', static_cast<uint64_t>(shape[i]));
  mix('v', data ? hash64(data, nbytes) : 0);
  uint64_t n = samples_.size();
  if (!data || n == 0 || ndim < 1 || shape[0] < 0 || static_cast<uint64_t>(shape[0]) != n || nbytes % n != 0) return;
  uint64_t row = nbytes / n;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t words[2] = {samples_[i], hash64(bytes + i * row, row)};
    samples_[i] = hash64(words, sizeof words);
  }
}

int64_t BatchDigest::firstDifferentSample(const std::vector<uint64_t>& recorded, const std::vector<uint64_t>& now) {
  if (recorded.size() != now.size()) return -1;
  for (size_t i = 0; i < recorded.size(); ++i)
    if (recorded[i] != now[i]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace dlrr
