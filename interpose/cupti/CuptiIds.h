#pragma once
// The CUPTI callback ids GPU capture enables (values of CUpti_driver_api_trace_cbid and
// CUpti_runtime_api_trace_cbid; CuptiDecode.cc checks each against the headers).
#include <cstdint>

namespace dlrr::cupti::cbid {

// Driver API: kernel launches.
inline constexpr uint32_t cuLaunchKernel = 307;
inline constexpr uint32_t cuLaunchKernel_ptsz = 442;
inline constexpr uint32_t cuLaunchCooperativeKernel = 477;
inline constexpr uint32_t cuLaunchCooperativeKernel_ptsz = 478;
inline constexpr uint32_t cuLaunchKernelEx = 652;
inline constexpr uint32_t cuLaunchKernelEx_ptsz = 653;
// Driver API: copies.
inline constexpr uint32_t cuMemcpyHtoD_v2 = 276;
inline constexpr uint32_t cuMemcpyHtoDAsync_v2 = 277;
inline constexpr uint32_t cuMemcpyDtoH_v2 = 278;
inline constexpr uint32_t cuMemcpyDtoHAsync_v2 = 279;
inline constexpr uint32_t cuMemcpyDtoD_v2 = 280;
inline constexpr uint32_t cuMemcpyDtoDAsync_v2 = 281;
inline constexpr uint32_t cuMemcpy = 305;
inline constexpr uint32_t cuMemcpyAsync = 306;
inline constexpr uint32_t cuMemcpyHtoD_v2_ptds = 397;
inline constexpr uint32_t cuMemcpyDtoH_v2_ptds = 398;
inline constexpr uint32_t cuMemcpyDtoD_v2_ptds = 399;
inline constexpr uint32_t cuMemcpy_ptds = 408;
inline constexpr uint32_t cuMemcpyAsync_ptsz = 418;
inline constexpr uint32_t cuMemcpyHtoDAsync_v2_ptsz = 421;
inline constexpr uint32_t cuMemcpyDtoHAsync_v2_ptsz = 422;
inline constexpr uint32_t cuMemcpyDtoDAsync_v2_ptsz = 423;

// Runtime API: kernel launches.
inline constexpr uint32_t cudaLaunchKernel_v7000 = 211;
inline constexpr uint32_t cudaLaunchKernel_ptsz_v7000 = 214;
inline constexpr uint32_t cudaLaunchCooperativeKernel_v9000 = 269;
inline constexpr uint32_t cudaLaunchCooperativeKernel_ptsz_v9000 = 270;
inline constexpr uint32_t cudaLaunchKernelExC_v11060 = 430;
inline constexpr uint32_t cudaLaunchKernelExC_ptsz_v11060 = 431;
inline constexpr uint32_t __cudaLaunchKernel_v13000 = 505;  // nvcc 13's <<<>>>; no params struct
inline constexpr uint32_t __cudaLaunchKernel_ptsz_v13000 = 506;
// Runtime API: copies.
inline constexpr uint32_t cudaMemcpy_v3020 = 31;
inline constexpr uint32_t cudaMemcpyAsync_v3020 = 41;
inline constexpr uint32_t cudaMemcpy_ptds_v7000 = 215;
inline constexpr uint32_t cudaMemcpyAsync_ptsz_v7000 = 225;

inline constexpr uint32_t kDriverLaunches[] = {
    cuLaunchKernel,   cuLaunchKernel_ptsz,  cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz,
    cuLaunchKernelEx, cuLaunchKernelEx_ptsz};
inline constexpr uint32_t kRuntimeLaunches[] = {cudaLaunchKernel_v7000,
                                                cudaLaunchKernel_ptsz_v7000,
                                                cudaLaunchCooperativeKernel_v9000,
                                                cudaLaunchCooperativeKernel_ptsz_v9000,
                                                cudaLaunchKernelExC_v11060,
                                                cudaLaunchKernelExC_ptsz_v11060,
                                                __cudaLaunchKernel_v13000,
                                                __cudaLaunchKernel_ptsz_v13000};
inline constexpr uint32_t kDriverCopies[] = {cuMemcpyHtoD_v2,
                                             cuMemcpyHtoDAsync_v2,
                                             cuMemcpyDtoH_v2,
                                             cuMemcpyDtoHAsync_v2,
                                             cuMemcpyDtoD_v2,
                                             cuMemcpyDtoDAsync_v2,
                                             cuMemcpy,
                                             cuMemcpyAsync,
                                             cuMemcpyHtoD_v2_ptds,
                                             cuMemcpyDtoH_v2_ptds,
                                             cuMemcpyDtoD_v2_ptds,
                                             cuMemcpy_ptds,
                                             cuMemcpyAsync_ptsz,
                                             cuMemcpyHtoDAsync_v2_ptsz,
                                             cuMemcpyDtoHAsync_v2_ptsz,
                                             cuMemcpyDtoDAsync_v2_ptsz};
inline constexpr uint32_t kRuntimeCopies[] = {cudaMemcpy_v3020, cudaMemcpyAsync_v3020, cudaMemcpy_ptds_v7000,
                                              cudaMemcpyAsync_ptsz_v7000};

}  // namespace dlrr::cupti::cbid
