// The device digest (docs/gpu.md "Digests of CUDA tensors") in one kernel per tensor: what the
// hook's DeviceDigester computes with 10-23 torch ops, here in one pass over the bytes and one
// over the elements. Compiled by nvcc into a fatbin embedded in libdlrr (DeviceDigestKernel.cc
// loads it with the driver API into the job's own context); no CUDA runtime is linked.
//
// out[0..5] (unsigned 64-bit, one row of the hook's per-step slab, set beforehand to
// 0,0,0,0,~0,0): s1, s2 (sums mod 2^64, so the order of the additions does not matter and the
// result is bit-identical to the torch-ops digest), NaN count, Inf count, and the minimum and
// maximum as order-preserving keys of their float64 value (orderedKey below; the host turns them
// back into float64 bits). Every update is an atomic whose result does not depend on the order:
// the digest is deterministic.
#include <stdint.h>

namespace {

constexpr uint64_t kK1 = 0x9E3779B97F4A7C15ull;

// Element kinds, as DeviceDigestKernel.h's DigestElement.
enum : int { kNone = 0, kF32, kF64, kF16, kBF16, kI64, kI32, kI16, kI8, kU8 };

__device__ __forceinline__ uint64_t orderedKey(double v) {
  uint64_t b = static_cast<uint64_t>(__double_as_longlong(v));
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

__device__ __forceinline__ float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return __uint_as_float(sign | 0x7F800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    float f = static_cast<float>(man) * 5.9604644775390625e-8f;  // subnormal: man * 2^-24, exact
    return sign ? -f : f;
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ __forceinline__ uint32_t wordAt(const unsigned char* p, uint64_t i, uint64_t nbytes, bool aligned) {
  uint64_t at = i * 4;
  if (aligned && at + 4 <= nbytes) return *reinterpret_cast<const uint32_t*>(p + at);
  uint32_t w = 0;
  for (uint64_t k = 0; k < 4 && at + k < nbytes; ++k) w |= static_cast<uint32_t>(p[at + k]) << (8 * k);
  return w;
}

__device__ __forceinline__ double elementAt(const unsigned char* p, uint64_t e, int kind) {
  switch (kind) {
    case kF32: return static_cast<double>(reinterpret_cast<const float*>(p)[e]);
    case kF64: return reinterpret_cast<const double*>(p)[e];
    case kF16: return static_cast<double>(halfToFloat(reinterpret_cast<const uint16_t*>(p)[e]));
    case kBF16:
      return static_cast<double>(__uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[e]) << 16));
    case kI64: return static_cast<double>(reinterpret_cast<const long long*>(p)[e]);
    case kI32: return static_cast<double>(reinterpret_cast<const int*>(p)[e]);
    case kI16: return static_cast<double>(reinterpret_cast<const short*>(p)[e]);
    case kI8: return static_cast<double>(reinterpret_cast<const signed char*>(p)[e]);
    default: return static_cast<double>(p[e]);
  }
}

template <typename T, typename Op>
__device__ __forceinline__ T warpReduce(T v, Op op) {
  for (int d = 16; d > 0; d >>= 1) v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, d));
  return v;
}

struct Add { __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a + b; } };
struct Min { __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a < b ? a : b; } };
struct Max { __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; } };

// One value per thread reduced over the block; lane 0 of warp 0 returns the result.
template <typename Op>
__device__ uint64_t blockReduce(uint64_t v, Op op, uint64_t identity, uint64_t* shared) {
  v = warpReduce(v, op);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = (threadIdx.x < warps) ? shared[threadIdx.x] : identity;
  if (warp == 0) v = warpReduce(v, op);
  return v;
}

}  // namespace

extern "C" __global__ void dlrr_digest_kernel(const unsigned char* data, uint64_t nbytes, uint64_t numel, int kind,
                                              unsigned long long* out) {
  __shared__ uint64_t shared[32];
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool aligned = (reinterpret_cast<uintptr_t>(data) & 3) == 0;

  uint64_t s1 = 0, s2 = 0;
  const uint64_t words = (nbytes + 3) / 4;
  for (uint64_t i = first; i < words; i += stride) {
    uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(wordAt(data, i, nbytes, aligned))));
    uint64_t y = x * ((i * kK1) | 1ull);
    s1 += y;
    s2 += y * x;
  }
  s1 = blockReduce(s1, Add{}, 0, shared);
  if (threadIdx.x == 0 && s1) atomicAdd(&out[0], static_cast<unsigned long long>(s1));
  s2 = blockReduce(s2, Add{}, 0, shared);
  if (threadIdx.x == 0 && s2) atomicAdd(&out[1], static_cast<unsigned long long>(s2));
  if (kind == kNone) return;

  const bool floating = kind <= kBF16;
  uint64_t nans = 0, infs = 0, lo = ~0ull, hi = 0;
  for (uint64_t e = first; e < numel; e += stride) {
    double v = elementAt(data, e, kind);
    if (floating && v != v) {
      ++nans;
    } else if (floating && (v == __longlong_as_double(0x7FF0000000000000ll) ||
                            v == __longlong_as_double(static_cast<long long>(0xFFF0000000000000ull)))) {
      ++infs;
    } else {
      uint64_t k = orderedKey(v);
      lo = k < lo ? k : lo;
      hi = k > hi ? k : hi;
    }
  }
  nans = blockReduce(nans, Add{}, 0, shared);
  if (threadIdx.x == 0 && nans) atomicAdd(&out[2], static_cast<unsigned long long>(nans));
  infs = blockReduce(infs, Add{}, 0, shared);
  if (threadIdx.x == 0 && infs) atomicAdd(&out[3], static_cast<unsigned long long>(infs));
  lo = blockReduce(lo, Min{}, ~0ull, shared);
  if (threadIdx.x == 0 && lo != ~0ull) atomicMin(&out[4], static_cast<unsigned long long>(lo));
  hi = blockReduce(hi, Max{}, 0, shared);
  if (threadIdx.x == 0 && hi) atomicMax(&out[5], static_cast<unsigned long long>(hi));
}
