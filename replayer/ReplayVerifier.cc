#include "replayer/ReplayVerifier.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "schema/dlrr.capnp.h"

namespace dlrr {
namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string num(double d) {
  if (std::isnan(d)) return "nan";
  std::ostringstream o;
  o.precision(9);
  o << d;
  return o.str();
}

bool sameBits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);  // bit for bit: -0.0 is not 0.0
}

std::string shapeText(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

const char* algorithmName(int a) { return a == 0 ? "xxh3 (host)" : a == 1 ? "deviceSum (GPU)" : "unknown"; }

Divergence collectiveDivergence(uint64_t seq, int64_t step, std::string what) {
  Divergence d;
  d.step = step;
  d.kind = static_cast<int>(schema::TensorDigest::Kind::OTHER);  // a collective: no digest kind of its own
  d.path = "collective #" + std::to_string(seq);
  d.detail = std::move(what);
  return d;
}

}  // namespace

ReplayVerifier::ReplayVerifier(const RecordingIndex* index, int64_t jumpStep, int64_t whatIfStep, Warn warn)
    : index_(index), jumpStep_(jumpStep), whatIfStep_(whatIfStep), warn_(std::move(warn)) {}

void ReplayVerifier::divergeLocked(Divergence d) {
  if (!divergence_) divergence_ = std::move(d);
}

void ReplayVerifier::diverge(const Divergence& d) {
  std::lock_guard<std::mutex> lk(mu_);
  divergeLocked(d);
}

std::optional<Divergence> ReplayVerifier::divergence() const {
  std::lock_guard<std::mutex> lk(mu_);
  return divergence_;
}

void ReplayVerifier::beginStep(int64_t step) {
  std::lock_guard<std::mutex> lk(mu_);
  openStep_ = step;
}

int64_t ReplayVerifier::openStep() const {
  std::lock_guard<std::mutex> lk(mu_);
  return openStep_;
}

int ReplayVerifier::checkDigest(int64_t step, int kind, const std::string& path, uint32_t callIndex, uint32_t output,
                                int algorithm, const DigestResult& got) {
  if (!compares(step)) return 0;  // its compute was skipped or changed on purpose: nothing to compare
  const RecordedDigest* want =
      index_ ? index_->digest(RecordingIndex::DigestKey{step, kind, path, callIndex, output}) : nullptr;
  if (!want) return 2;
  std::lock_guard<std::mutex> lk(mu_);
  if (step == openStep_) ++seenPerStep_[step];
  if (want->algorithm != algorithm) {  // like with like
    if (incomparableDigests_++ == 0 && warn_)
      warn_(std::string("digests computed differently than recorded (recorded ") + algorithmName(want->algorithm) +
            ", here " + algorithmName(algorithm) +
            "): the tensors moved between host and GPU; those digests are not checked");
    return 2;
  }
  // rawHash: a trace recorded before NaNs were canonicalised in the hash (TensorDigest.h).
  if (want->hash == got.hash || (got.nanCount && want->hash == got.rawHash)) return 0;
  if (!divergence_) {
    Divergence d;
    d.step = step;
    d.kind = kind;
    d.path = path;
    d.callIndex = callIndex;
    d.output = output;
    std::ostringstream o;
    o << digestKindName(kind) << " " << (path.empty() ? "<root>" : path) << " (call " << callIndex << ", output "
      << output << "): recorded hash " << hex(want->hash) << " NaN " << want->nanCount << " Inf " << want->infCount
      << " min " << num(want->min) << " max " << num(want->max) << "; replayed hash " << hex(got.hash) << " NaN "
      << got.nanCount << " Inf " << got.infCount << " min " << num(got.min) << " max " << num(got.max);
    d.detail = o.str();
    divergence_ = std::move(d);
  }
  return 1;
}

int ReplayVerifier::endStep(int64_t step, double loss) {
  std::lock_guard<std::mutex> lk(mu_);
  lastStepEnded_ = step;
  openStep_ = INT64_MIN;
  if (!compares(step)) return 0;
  bool ok = !divergence_;
  std::optional<double> want = index_ ? index_->loss(step) : std::nullopt;
  // A step whose end the trace does not hold (cut in it, or past its end) has nothing to be
  // checked against: never counted verified.
  if (!want) return ok ? 0 : 1;
  if (ok && !sameBits(*want, loss)) {
    Divergence d;
    d.step = step;
    d.kind = static_cast<int>(schema::TensorDigest::Kind::LOSS);
    d.path = "loss";
    d.detail = "loss: recorded " + num(*want) + ", replayed " + num(loss);
    divergence_ = std::move(d);
    ok = false;
  }
  uint32_t recorded = index_->digestsInStep(step);
  auto seenIt = seenPerStep_.find(step);
  uint32_t seen = seenIt == seenPerStep_.end() ? 0 : seenIt->second;
  seenPerStep_.erase(step);  // ended: keep memory flat over long replays
  if (ok && seen < recorded) {
    Divergence d;
    d.step = step;
    d.detail = "step " + std::to_string(step) + " recomputed " + std::to_string(seen) + " of its " +
               std::to_string(recorded) + " recorded digests (the replayed code took another path)";
    divergence_ = std::move(d);
    ok = false;
  }
  if (ok) ++verifiedSteps_;
  return ok ? 0 : 1;
}

uint64_t ReplayVerifier::beginCollective(const std::string& op, int64_t step) {
  std::lock_guard<std::mutex> lk(mu_);
  static const std::map<uint64_t, RecordingIndex::Collective> kNone;
  const auto& recorded = index_ ? index_->collectives() : kNone;
  if (jumpStep_ > 0 && step < jumpStep_) return kFastForwardedCollective;
  if (jumpStep_ > 0 && !collectivesResynced_) {
    // A jump: the fast-forwarded steps issued what their stand-ins led to (a DDP whose forward
    // was skipped reduces nothing), so numbering resumes at the recording's first collective
    // of the jump step.
    collectivesResynced_ = true;
    for (const auto& [recordedSeq, rc] : recorded)
      if (rc.step >= jumpStep_) {
        nextCollective_ = recordedSeq;
        break;
      }
  }
  uint64_t seq = nextCollective_++;
  ++collectivesIssued_;
  auto it = recorded.find(seq);
  if (it == recorded.end())
    divergeLocked(collectiveDivergence(seq, step,
                                       "collective #" + std::to_string(seq) + " (" + op +
                                           ") was never issued in the recording (" + std::to_string(recorded.size()) +
                                           " recorded)"));
  else if (it->second.op != op)
    divergeLocked(collectiveDivergence(seq, step,
                                       "collective #" + std::to_string(seq) + ": the recording issued " +
                                           it->second.op + " (step " + std::to_string(it->second.step) +
                                           "), the replay " + op));
  return seq;
}

uint64_t ReplayVerifier::recordedCollectivesFromJump() const {
  if (!index_) return 0;
  uint64_t n = 0;
  for (const auto& [seq, rc] : index_->collectives()) n += jumpStep_ <= 0 || rc.step >= jumpStep_ ? 1 : 0;
  return n;
}

int ReplayVerifier::checkCollectiveTensor(uint64_t seq, bool result, const std::string& dtype,
                                          const std::vector<int64_t>& shape, const DigestResult& got, int64_t step) {
  if (!index_) return 2;
  auto it = index_->collectives().find(seq);
  if (it == index_->collectives().end()) return 2;
  const RecordingIndex::Collective& rc = it->second;
  std::lock_guard<std::mutex> lk(mu_);
  auto& seen = collectiveSeen_[seq];
  uint32_t index = result ? seen.second++ : seen.first++;
  const auto& list = result ? rc.results : rc.inputs;
  std::string label = "collective #" + std::to_string(seq) + " " + rc.op +
                      (rc.bucket >= 0 ? " bucket " + std::to_string(rc.bucket) : "") + " (step " +
                      std::to_string(rc.step) + "): " + (result ? "result " : "input ") + std::to_string(index);
  if (index >= list.size()) {
    divergeLocked(collectiveDivergence(
        seq, step, label + " was not in the recording (" + std::to_string(list.size()) + " recorded)"));
    return 1;
  }
  const RecordingIndex::CollectiveTensor& want = list[index];
  if (want.hash == got.hash && want.dtype == dtype && want.shape == shape) {
    ++collectiveTensorsVerified_;
    return 0;
  }
  std::ostringstream o;
  o << label << (result ? " (what this rank received)" : " (what this rank sent)") << " differs: recorded "
    << want.dtype << shapeText(want.shape) << " hash " << hex(want.hash) << " NaN " << want.nanCount << " Inf "
    << want.infCount << "; replayed " << dtype << shapeText(shape) << " hash " << hex(got.hash) << " NaN "
    << got.nanCount << " Inf " << got.infCount;
  divergeLocked(collectiveDivergence(seq, step, o.str()));
  return 1;
}

ReplayVerifier::Figures ReplayVerifier::figures() const {
  std::lock_guard<std::mutex> lk(mu_);
  return Figures{verifiedSteps_,       lastStepEnded_,     divergence_,
                 incomparableDigests_, collectivesIssued_, collectiveTensorsVerified_};
}

}  // namespace dlrr
