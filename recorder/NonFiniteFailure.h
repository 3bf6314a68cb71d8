#pragma once
// How the first non-finite digest of a process is named in its Failure event: one wording for
// host digests (RecordSession::digest) and device digests (RecordSession::digestValues).
#include <cstdint>
#include <string>
#include <string_view>

namespace dlrr {

struct NonFiniteFailure {
  std::string where;    // "loss", "grad:NAME", "param:NAME", a module path, "<root>"
  std::string message;  // "2 NaN, 0 Inf in output of fc1 (call 1)"
};

// `kind` is a schema TensorDigest.Kind (dlrr_digest_kind_t).
NonFiniteFailure describeNonFinite(int kind, std::string_view path, uint32_t callIndex, uint64_t nanCount,
                                   uint64_t infCount);

}  // namespace dlrr
