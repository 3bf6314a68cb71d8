#include "recorder/TensorDigest.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "format/Hash.h"

namespace dlrr {
namespace {

float halfToFloat(uint16_t h) noexcept {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3FF) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16ToFloat(uint16_t h) noexcept {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <typename T, typename Load>
void floatStats(const uint8_t* p, size_t n, Load load, DigestResult& r) noexcept {
  uint64_t nans = 0, infs = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    double x = load(v);
    bool isnan = x != x;
    bool isinf = !isnan && (x == std::numeric_limits<double>::infinity() || x == -std::numeric_limits<double>::infinity());
    nans += isnan;
    infs += isinf;
    if (!isnan && !isinf) {
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
  }
  r.nanCount = nans;
  r.infCount = infs;
  if (nans + infs == n) {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
  } else {
    r.min = lo;
    r.max = hi;
  }
}

template <typename T>
void intStats(const uint8_t* p, size_t n, DigestResult& r) noexcept {
  if (n == 0) {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  r.min = static_cast<double>(lo);
  r.max = static_cast<double>(hi);
}

}  // namespace

unsigned dtypeElemSize(std::string_view d) noexcept {
  if (d == "float32" || d == "int32" || d == "uint32") return 4;
  if (d == "float64" || d == "int64" || d == "complex64" || d == "uint64") return 8;
  if (d == "float16" || d == "bfloat16" || d == "int16" || d == "uint16") return 2;
  if (d == "uint8" || d == "int8" || d == "bool" || d == "float8_e4m3fn" || d == "float8_e5m2") return 1;
  if (d == "complex128") return 16;
  return 0;
}

bool dtypeIsFloat(std::string_view d) noexcept {
  return d == "float32" || d == "float64" || d == "float16" || d == "bfloat16";
}

DigestResult computeDigest(std::string_view dtype, const void* data, size_t nbytes) noexcept {
  DigestResult r;
  r.hash = hash64(data, nbytes);
  const auto* p = static_cast<const uint8_t*>(data);
  if (dtype == "float32") {
    floatStats<float>(p, nbytes / 4, [](float v) { return static_cast<double>(v); }, r);
  } else if (dtype == "float64") {
    floatStats<double>(p, nbytes / 8, [](double v) { return v; }, r);
  } else if (dtype == "float16") {
    floatStats<uint16_t>(p, nbytes / 2, [](uint16_t v) { return static_cast<double>(halfToFloat(v)); }, r);
  } else if (dtype == "bfloat16") {
    floatStats<uint16_t>(p, nbytes / 2, [](uint16_t v) { return static_cast<double>(bf16ToFloat(v)); }, r);
  } else if (dtype == "int64") {
    intStats<int64_t>(p, nbytes / 8, r);
  } else if (dtype == "int32") {
    intStats<int32_t>(p, nbytes / 4, r);
  } else if (dtype == "int16") {
    intStats<int16_t>(p, nbytes / 2, r);
  } else if (dtype == "int8") {
    intStats<int8_t>(p, nbytes, r);
  } else if (dtype == "uint8" || dtype == "bool") {
    intStats<uint8_t>(p, nbytes, r);
  } else {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
  }
  return r;
}

}  // namespace dlrr
