#pragma once
// The C API's enums (dlrr.h, the numbers the Python hook passes through ctypes) are the
// schema's enums by value: checked here at compile time, so a new schema value that dlrr.h
// lacks, or a renumbering, does not build. The highest value of each is what the C API
// accepts (interpose/CApi.cc, GpuApi.cc). native.py keeps the same numbers for Python and is
// checked against dlrr.h by tests/python.
#include "dlrr/dlrr.h"
#include "recorder/RecordSession.h"
#include "recorder/TriageLog.h"
#include "replayer/ReplayTarget.h"
#include "schema/dlrr.capnp.h"
#include "session/Config.h"
#include "session/ProcessSession.h"

namespace dlrr {

template <typename E>
constexpr int asInt(E e) {
  return static_cast<int>(e);
}

using DigestKind = schema::TensorDigest::Kind;
static_assert(DLRR_DIGEST_MODULE_OUTPUT == asInt(DigestKind::MODULE_OUTPUT));
static_assert(DLRR_DIGEST_GRADIENT == asInt(DigestKind::GRADIENT));
static_assert(DLRR_DIGEST_PARAMETER == asInt(DigestKind::PARAMETER));
static_assert(DLRR_DIGEST_LOSS == asInt(DigestKind::LOSS));
static_assert(DLRR_DIGEST_BATCH == asInt(DigestKind::BATCH));
static_assert(DLRR_DIGEST_OTHER == asInt(DigestKind::OTHER));
static_assert(DLRR_DIGEST_MODULE_INPUT == asInt(DigestKind::MODULE_INPUT));
inline constexpr int kMaxDigestKind = DLRR_DIGEST_MODULE_INPUT;

using RngKind = schema::RngState::Kind;
static_assert(DLRR_RNG_TORCH_CPU == asInt(RngKind::TORCH_CPU));
static_assert(DLRR_RNG_TORCH_CUDA == asInt(RngKind::TORCH_CUDA));
static_assert(DLRR_RNG_NUMPY == asInt(RngKind::NUMPY));
static_assert(DLRR_RNG_PYTHON == asInt(RngKind::PYTHON));
inline constexpr int kMaxRngKind = DLRR_RNG_PYTHON;

static_assert(DLRR_MODE_OFF == asInt(Mode::Off));  // ProcessSession::mode(), dlrr_mode()
static_assert(DLRR_MODE_RECORD == asInt(Mode::Record));
static_assert(DLRR_MODE_REPLAY == asInt(Mode::Replay));

static_assert(DLRR_STEP_BY_BATCH == asInt(StepRule::Batch));
static_assert(DLRR_STEP_BY_OPTIMIZER == asInt(StepRule::Optimizer));
static_assert(DLRR_STEP_BY_BACKWARD == asInt(StepRule::Backward));
static_assert(DLRR_STEP_BY_GRADIENT_CALL == asInt(StepRule::GradientCall));
inline constexpr int kMaxStepRule = DLRR_STEP_BY_GRADIENT_CALL;

using Algorithm = schema::TensorDigest::Algorithm;
static_assert(DLRR_DIGEST_XXH3 == asInt(Algorithm::XXH3));
static_assert(DLRR_DIGEST_DEVICE_SUM == asInt(Algorithm::DEVICE_SUM));
inline constexpr int kMaxDigestAlgorithm = DLRR_DIGEST_DEVICE_SUM;

using LookupOpSchema = schema::MissingPath::Op;
static_assert(DLRR_LOOKUP_OPEN == asInt(LookupOpSchema::OPEN) && DLRR_LOOKUP_OPEN == asInt(LookupOp::Open));
static_assert(DLRR_LOOKUP_CREATE == asInt(LookupOpSchema::CREATE) && DLRR_LOOKUP_CREATE == asInt(LookupOp::Create));
static_assert(DLRR_LOOKUP_STAT == asInt(LookupOpSchema::STAT) && DLRR_LOOKUP_STAT == asInt(LookupOp::Stat));
static_assert(DLRR_LOOKUP_ACCESS == asInt(LookupOpSchema::ACCESS) && DLRR_LOOKUP_ACCESS == asInt(LookupOp::Access));
static_assert(DLRR_LOOKUP_MKDIR == asInt(LookupOpSchema::MKDIR) && DLRR_LOOKUP_MKDIR == asInt(LookupOp::Mkdir));
static_assert(DLRR_LOOKUP_OPENDIR == asInt(LookupOpSchema::OPENDIR) && DLRR_LOOKUP_OPENDIR == asInt(LookupOp::Opendir));
static_assert(DLRR_LOOKUP_OTHER == asInt(LookupOpSchema::OTHER) && DLRR_LOOKUP_OTHER == asInt(LookupOp::Other));
inline constexpr int kMaxLookupOp = DLRR_LOOKUP_OTHER;

static_assert(DLRR_TARGET_END == asInt(ReplayTarget::Kind::End));
static_assert(DLRR_TARGET_STEP == asInt(ReplayTarget::Kind::Step));
static_assert(DLRR_TARGET_NAN == asInt(ReplayTarget::Kind::Nan));
static_assert(DLRR_TARGET_CRASH == asInt(ReplayTarget::Kind::Crash));

inline constexpr int kMaxTensorDims = 64;  // the C API refuses more (a corrupt call, not a tensor)

}  // namespace dlrr
