#include "format/ValueBlobs.h"

namespace dlrr {
namespace {

bool present(StreamReader& stream, schema::Value::Reader v, int depth) {
  if (depth > 64) return false;  // deeper than any writer nests: not a value to trust
  switch (v.which()) {
    case schema::Value::TENSOR: {
      auto ref = v.getTensor().getData();
      return ref.getSize() == 0 || stream.hasBlob(Hash128{ref.getHashLo(), ref.getHashHi()});
    }
    case schema::Value::LIST:
      for (auto c : v.getList())
        if (!present(stream, c, depth + 1)) return false;
      return true;
    case schema::Value::TUPLE:
      for (auto c : v.getTuple())
        if (!present(stream, c, depth + 1)) return false;
      return true;
    case schema::Value::DICT:
      for (auto e : v.getDict())
        if (!present(stream, e.getValue(), depth + 1)) return false;
      return true;
    default:
      return true;
  }
}

}  // namespace

bool valueBlobsPresent(StreamReader& stream, schema::Value::Reader v) { return present(stream, v, 0); }

}  // namespace dlrr
