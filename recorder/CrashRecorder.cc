#include "recorder/CrashRecorder.h"

#include <capnp/message.h>

#include <cstring>

#include "format/FlatMessage.h"
#include "recorder/MapsSymbolizer.h"
#include "schema/dlrr.capnp.h"

namespace dlrr {

CrashRecorder::CrashRecorder() {
  arena_ = std::make_unique<capnp::word[]>(kArenaWords);  // the failure message built in a signal handler
  pyText_.resize(64 * 1024);
  mapsText_.resize(512 * 1024);  // also the output buffer of the signal path
}

void CrashRecorder::write(StreamWriter& w, int64_t tNs, int64_t step, uint32_t thread, int sig, const siginfo_t* info,
                          const uint64_t* ips, int nips, int faultFrame, int pystackFd) noexcept {
  try {
    std::memset(arena_.get(), 0, kArenaWords * sizeof(capnp::word));
    capnp::MallocMessageBuilder msg(kj::arrayPtr(arena_.get(), kArenaWords), capnp::AllocationStrategy::FIXED_SIZE);
    auto e = msg.initRoot<schema::Event>();
    e.setTNs(tNs);
    e.setStep(step);
    e.setThread(thread);
    auto f = e.initFailure();
    f.setKind(schema::Failure::Kind::SIGNAL);
    f.setStep(step);
    f.setSignal(sig);
    f.setSignalCode(info ? info->si_code : 0);
    // si_addr means something only for a fault the kernel raised (si_code > 0); for a signal
    // sent with kill/tgkill/raise (e.g. Python's faulthandler re-raising the fault after it
    // wrote the Python stacks) the same bytes hold the sender's pid and uid.
    bool fault = sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE;
    f.setFaultAddress(info && fault && info->si_code > 0 ? reinterpret_cast<uint64_t>(info->si_addr) : 0);
    const char* name = sig == SIGSEGV   ? "SIGSEGV"
                       : sig == SIGBUS  ? "SIGBUS"
                       : sig == SIGFPE  ? "SIGFPE"
                       : sig == SIGILL  ? "SIGILL"
                       : sig == SIGABRT ? "SIGABRT"
                                        : "signal";
    f.setMessage(name);
    auto st = f.initNativeStack(static_cast<unsigned>(nips));
    for (int i = 0; i < nips; ++i) st.set(static_cast<unsigned>(i), ips[i]);
    size_t mapsLen = readFileInto("/proc/self/maps", mapsText_.data(), mapsText_.size());
    auto syms = f.initNativeSymbols(static_cast<unsigned>(nips));
    for (int i = 0; i < nips; ++i) {
      char buf[512];
      size_t n = describeIp(ips[i], mapsText_.data(), mapsLen, buf, sizeof buf);
      syms.set(static_cast<unsigned>(i), capnp::Text::Reader(buf, n));
    }
    size_t py = readFdInto(pystackFd, pyText_.data(), pyText_.size() - 1);
    pyText_[py] = '\0';  // Text::Reader(p, n) needs p[n] == '\0', as for the symbols
    f.setPythonStack(capnp::Text::Reader(pyText_.data(), py));
    // Where: the faulting native frame (the innermost one when the caller knows no better).
    if (nips > 0) f.setWhere(syms[static_cast<unsigned>(faultFrame >= 0 && faultFrame < nips ? faultFrame : 0)]);
    auto segs = msg.getSegmentsForOutput();
    if (segs.size() != 1) return;  // did not fit the arena: nothing safe to write
    size_t bytes = kOneSegmentTableBytes + segs[0].size() * sizeof(capnp::word);
    auto* out = reinterpret_cast<uint8_t*>(mapsText_.data());  // reuse: maps text is no longer needed
    if (bytes > mapsText_.size()) return;
    writeOneSegmentTable(out, static_cast<uint32_t>(segs[0].size()));
    std::memcpy(out + kOneSegmentTableBytes, segs[0].begin(), segs[0].size() * sizeof(capnp::word));
    w.writeFromSignal(out, bytes);
  } catch (...) {
    // best effort: the arena was too small or capnp refused: the crash still happens as it would have.
  }
}

}  // namespace dlrr
