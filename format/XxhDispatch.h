#pragma once
// xxHash entry points for the hot paths (tensor digests, blob names). Debian's libxxhash is
// built for the x86-64 baseline (SSE2) but also exports *_dispatch variants that pick AVX2 or
// AVX-512 by the CPU at first call: 3-5x faster here (35 GB/s against 7-13 for a 1 MB tensor).
// Every variant computes the same XXH3 values (the algorithm does not depend on the vector
// width), so traces do not change. Other platforms get the plain functions.
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#if DLRR_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#define DLRR_XXH3_64 XXH3_64bits_dispatch
#define DLRR_XXH3_64_UPDATE XXH3_64bits_update_dispatch
#define DLRR_XXH3_128 XXH3_128bits_dispatch
#else
#define DLRR_XXH3_64 XXH3_64bits
#define DLRR_XXH3_64_UPDATE XXH3_64bits_update
#define DLRR_XXH3_128 XXH3_128bits
#endif
