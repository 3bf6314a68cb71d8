#include "replayer/BatchEncoding.h"

#include <cstring>

#include "format/TraceError.h"

namespace dlrr {
namespace {

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
void putU32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  put(out, b, 4);
}
void putU64(std::vector<uint8_t>& out, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  put(out, b, 8);
}
void putStr(std::vector<uint8_t>& out, kj::StringPtr s) {
  putU32(out, static_cast<uint32_t>(s.size()));
  put(out, s.begin(), s.size());
}

}  // namespace

void encodeValue(schema::Value::Reader v, const BlobLoader& load, std::vector<uint8_t>& out, int depth) {
  if (depth > 64) throw TraceError(ErrorKind::Corrupt, "batch structure nested too deeply");
  switch (v.which()) {
    case schema::Value::NONE:
      out.push_back('N');
      break;
    case schema::Value::BOOL:
      out.push_back('B');
      out.push_back(v.getBool() ? 1 : 0);
      break;
    case schema::Value::INT:
      out.push_back('I');
      putU64(out, static_cast<uint64_t>(v.getInt()));
      break;
    case schema::Value::FLOAT: {
      out.push_back('F');
      double d = v.getFloat();
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      putU64(out, bits);
      break;
    }
    case schema::Value::TEXT:
      out.push_back('S');
      putStr(out, v.getText());
      break;
    case schema::Value::BYTES: {
      out.push_back('Y');
      auto d = v.getBytes();
      putU32(out, static_cast<uint32_t>(d.size()));
      put(out, d.begin(), d.size());
      break;
    }
    case schema::Value::OPAQUE:
      out.push_back('O');
      putStr(out, v.getOpaque());
      break;
    case schema::Value::LIST:
    case schema::Value::TUPLE: {
      auto items = v.isList() ? v.getList() : v.getTuple();
      out.push_back(v.isList() ? 'L' : 'T');
      putU32(out, items.size());
      for (auto c : items) encodeValue(c, load, out, depth + 1);
      break;
    }
    case schema::Value::DICT: {
      auto entries = v.getDict();
      out.push_back('D');
      putU32(out, entries.size());
      for (auto e : entries) {
        putStr(out, e.getKey());
        encodeValue(e.getValue(), load, out, depth + 1);
      }
      break;
    }
    case schema::Value::TENSOR: {
      auto t = v.getTensor();
      out.push_back('X');
      putStr(out, t.getDtype());
      auto shape = t.getShape();
      putU32(out, shape.size());
      for (auto d : shape) putU64(out, static_cast<uint64_t>(d));
      out.push_back(t.getRequiresGrad() ? 1 : 0);
      putStr(out, t.getDevice());
      auto ref = t.getData();
      std::vector<uint8_t> bytes = load(Hash128{ref.getHashLo(), ref.getHashHi()}, ref.getSize());
      putU64(out, bytes.size());
      put(out, bytes.data(), bytes.size());
      break;
    }
    default:
      throw TraceError(ErrorKind::Corrupt, "batch holds a value kind this dlrr does not know (newer trace?)");
  }
}

}  // namespace dlrr
