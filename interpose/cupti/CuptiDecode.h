#pragma once
// Decodes one CUPTI driver/runtime API callback (a CUpti_CallbackData) into a LaunchTracker
// ApiCall: which launch or copy, its geometry or direction and size, the kernel name, the
// device and stream. Built with the toolkit's headers (DLRR_HAVE_CUPTI); without them
// decoderAvailable() is false and GPU capture does not start.
#include <cstdint>

#include "interpose/cupti/CuptiApi.h"
#include "session/LaunchTracker.h"

namespace dlrr::cupti {

bool decoderAvailable() noexcept;

// The callback path: decodes and calls tracker.onApi(). Device and stream ids are looked up
// through `api` once per (thread, context) / (thread, stream) and cached per thread.
void decodeCallback(CuptiApi& api, gpu::LaunchTracker& tracker, uint32_t domain, uint32_t cbid,
                    const void* cbdata) noexcept;

}  // namespace dlrr::cupti
