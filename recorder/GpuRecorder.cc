#include "recorder/GpuRecorder.h"

#include <string>

#include "format/OwnThreads.h"

namespace dlrr {

GpuRecorder::GpuRecorder(RecordSession& session, gpu::LaunchTracker& tracker, std::chrono::milliseconds drainEvery)
    : session_(session), tracker_(tracker), every_(drainEvery) {}

GpuRecorder::~GpuRecorder() { stopThread(); }

void GpuRecorder::startDrainThread() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable() || finished_) return;
  ownThreads().fetch_add(1);  // counted before it exists: the job never sees it in /proc
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    ownThreads().fetch_sub(1);
    throw;
  }
}

void GpuRecorder::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, every_, [this] { return stop_ || wake_; });
    wake_ = false;
    if (stop_) break;
    lk.unlock();
    try {
      tracker_.drain(*this);
    } catch (...) {  // best effort: the next pass drains again; never into the polling thread's exit
    }
    lk.lock();
  }
}

void GpuRecorder::stopThread() noexcept {
  std::thread t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    t.swap(thread_);
  }
  cv_.notify_all();
  if (!t.joinable()) return;
  if (t.get_id() != std::this_thread::get_id())
    t.join();
  else
    t.detach();  // ends as soon as this call returns
  ownThreads().fetch_sub(1);
}

size_t GpuRecorder::drainNow() {
  try {
    return tracker_.drain(*this);
  } catch (...) {
    return 0;
  }
}

void GpuRecorder::stepBegan(int64_t step) noexcept { tracker_.beginStep(step); }

void GpuRecorder::stepEnding(int64_t step) noexcept {
  tracker_.endStep(step);
  {
    std::lock_guard<std::mutex> lk(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

void GpuRecorder::flush() noexcept { drainNow(); }

void GpuRecorder::finish() noexcept {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_) return;
    finished_ = true;
  }
  stopThread();
  drainNow();
  try {
    gpu::LaunchTracker::Stats s = tracker_.stats();
    auto put = [&](const char* key, uint64_t v) { session_.runtimeInfo(key, std::to_string(v).c_str()); };
    put("gpu.launches", s.launches);
    put("gpu.copies", s.copies);
    put("gpu.outside_steps", s.outsideSteps);
    put("gpu.dropped", s.droppedLaunches + s.droppedCopies);
    put("gpu.kernel_names", s.names);
  } catch (...) {  // best effort: runtime facts are informational; the launches are already recorded
  }
}

void GpuRecorder::name(uint32_t id, std::string_view text) {
  session_.appendEvent(session_.currentStep(), [&](schema::Event::Builder e, StreamWriter&) {
    auto s = e.initInternedString();
    s.setId(id);
    s.setText(capnp::Text::Reader(text.data(), text.size()));
  });
}

void GpuRecorder::launch(const gpu::LaunchEvent& l) {
  session_.appendEvent(l.step, [&](schema::Event::Builder e, StreamWriter&) {
    auto c = e.initCudaLaunch();
    c.setSeq(l.seq);
    c.setNameId(l.nameId);
    c.setGridX(l.grid.x);
    c.setGridY(l.grid.y);
    c.setGridZ(l.grid.z);
    c.setBlockX(l.block.x);
    c.setBlockY(l.block.y);
    c.setBlockZ(l.block.z);
    c.setSharedMem(l.sharedMem);
    c.setStream(l.stream);
    c.setDevice(l.device);
    c.setCorrelationId(l.correlationId);
    c.setFlags(l.flags);
  });
}

void GpuRecorder::memcpy(const gpu::MemcpyEvent& m) {
  session_.appendEvent(m.step, [&](schema::Event::Builder e, StreamWriter&) {
    auto c = e.initCudaMemcpy();
    c.setSeq(m.seq);
    c.setDirection(static_cast<schema::CudaMemcpy::Direction>(m.direction));
    c.setBytes(m.bytes);
    c.setDigest(m.digest);
    c.setStream(m.stream);
    c.setDevice(m.device);
    c.setFlags(m.flags);
    c.setCorrelationId(m.correlationId);
  });
}

void GpuRecorder::dropped(int64_t step, uint64_t launches, uint64_t copies) {
  std::string msg = "GPU capture: step " + std::to_string(step) + " lost " + std::to_string(launches) +
                    " kernel launch and " + std::to_string(copies) +
                    " copy records (a thread's ring was full); replay compares that step's launches up to the gap";
  session_.note(msg.c_str());
  if (droppedReported_++ == 0) session_.recorderStatus(false, msg.c_str());
}

}  // namespace dlrr
