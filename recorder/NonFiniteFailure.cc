#include "recorder/NonFiniteFailure.h"

#include <sstream>

#include "schema/dlrr.capnp.h"

namespace dlrr {

NonFiniteFailure describeNonFinite(int kind, std::string_view path, uint32_t callIndex, uint64_t nanCount,
                                   uint64_t infCount) {
  using K = schema::TensorDigest::Kind;
  auto is = [kind](K k) { return kind == static_cast<int>(k); };
  static const char* kKindNames[] = {"output of", "gradient of", "parameter", "loss", "batch", "tensor", "input of"};
  static_assert(static_cast<int>(K::MODULE_INPUT) == 6, "kKindNames follows TensorDigest.Kind");
  const char* kn = kind >= 0 && kind <= 6 ? kKindNames[kind] : "tensor";
  std::string p(path);
  std::string shown = p.empty() ? std::string("<root>") : p;
  NonFiniteFailure f;
  f.where = is(K::LOSS) ? "loss" : is(K::GRADIENT) ? "grad:" + p : is(K::PARAMETER) ? "param:" + p : shown;
  std::ostringstream msg;
  msg << nanCount << " NaN, " << infCount << " Inf in " << kn << (is(K::LOSS) ? "" : " " + shown);
  if (is(K::MODULE_OUTPUT) && callIndex) msg << " (call " << callIndex << ")";
  f.message = msg.str();
  return f;
}

}  // namespace dlrr
