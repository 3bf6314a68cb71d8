#pragma once
// Reads one stream file, whether it was closed cleanly (footer + trailer: opened without a
// scan) or its writer died at an arbitrary byte (scanned: every frame up to the first damaged
// or torn one is kept, and the reason the scan stopped is reported).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/Codec.h"
#include "format/Frame.h"
#include "format/Hash.h"
#include "format/UniqueFd.h"
#include "schema/dlrr.capnp.h"

namespace capnp {
class MessageReader;
}

namespace dlrr {

struct FrameInfo {
  uint64_t offset = 0;
  FrameHeader header;
};

struct StreamStatus {
  bool cleanClose = false;  // footer and trailer present and valid
  uint64_t fileSize = 0;
  uint64_t validEnd = 0;  // bytes up to the end of the last intact frame
  std::string damage;     // why reading stopped before the end of file ("" = it did not)
  // Reading stopped at an incomplete last frame that runs to the end of the file, or at a
  // footer frame whose trailer is missing or cut: what a writer stopped mid-write (kill -9,
  // disk full) leaves. Such a tail never holds a commit (a commit returns only once its frame
  // is whole in the file), so the stream is recovered, not damaged; `damage` says where.
  bool torn = false;
  uint16_t formatMajor = 0;  // 2: its snapshots may be in bulk files (format/Frame.h)
  uint16_t formatMinor = 0;
  // From the footer (valid when cleanClose): what the writer says it wrote.
  uint64_t footerSteps = 0;
  uint64_t footerEvents = 0;
};

// Throws TraceError(FutureVersion) for a major above `readerMajor` (a parameter so that tests
// can play a reader from before bulk files, which read major 1 only), NotATrace for major 0.
void checkFormatVersion(const FileHeaderInfo& info, const std::string& file, uint16_t readerMajor = kFormatMajor);

class StreamReader {
 public:
  // Throws TraceError: Io, NotATrace (no magic), FutureVersion, Corrupt (header frame bad).
  static std::unique_ptr<StreamReader> open(int dirFd, const std::string& file, const std::string& displayName);
  // Same checks over bytes in memory (fuzzing, tests, tools reading from a pipe).
  static std::unique_ptr<StreamReader> openBytes(std::vector<uint8_t> bytes, const std::string& displayName);
  ~StreamReader();

  const std::string& name() const { return name_; }
  const StreamStatus& status() const { return status_; }
  schema::StreamHeader::Reader header() const;

  // All intact frames in file order (scans headers on first call when the footer was used).
  const std::vector<FrameInfo>& frames();

  // Calls fn for every event, in file order, starting at the frame at `fromOffset` (0 = the
  // first). Payload checksums are verified as frames are read; a damaged payload throws
  // TraceError(Corrupt) naming the offset.
  using EventFn = std::function<void(schema::Event::Reader, const FrameInfo&)>;
  void forEachEvent(const EventFn& fn, uint64_t fromOffset = 0);
  // As forEachEvent, but stops as soon as fn returns false.
  using EventUntilFn = std::function<bool(schema::Event::Reader, const FrameInfo&)>;
  void forEachEventUntil(const EventUntilFn& fn, uint64_t fromOffset = 0);

  // Offset of the EVENTS frame that holds step N's StepBegin, from the footer when present;
  // otherwise from one scan of the events, which keeps the steps before any damage.
  std::optional<uint64_t> stepFrameOffset(int64_t step);

  // Blobs are looked up in the stream, then in its bulk files (`<name>.bulk<N>.dlb`, a
  // budgeted trace's: format/TraceDir.h), which the recorder may have dropped whole.
  bool hasBlob(const Hash128& h);
  // Reassembles a blob from its chunks; verifies every chunk CRC and the content hash.
  std::vector<uint8_t> readBlob(const Hash128& h, uint64_t size);
  // The bulk files found next to the stream (opened on the first blob not in the stream).
  std::vector<std::string> bulkFiles();
  uint64_t bulkBytes();  // their size on disk

  // Reads and checks every frame: CRCs, decodability, blob hashes, that every event parses.
  // Returns a list of problems (empty when intact; a torn tail is not a problem, see
  // StreamStatus::torn). Never throws for damage.
  std::vector<std::string> verify();

 private:
  StreamReader() = default;
  void init(const std::string& file);
  void scan();
  bool loadFooter();
  void readExact(uint64_t off, void* buf, size_t n) const;
  // Reads a frame's payload and checks its CRC; returns the decoded bytes (blob: chunk only).
  void readPayload(const FrameInfo& f, std::vector<uint8_t>& out, BlobPrefix* prefix = nullptr);
  void ensureBlobIndex();
  // The bulk file holding `h` (nullptr: none).
  StreamReader* bulkWith(const Hash128& h);
  void openBulk();

  UniqueFd fd_;
  std::vector<uint8_t> mem_;  // the whole stream when opened with openBytes
  bool inMemory_ = false;
  std::string name_;
  StreamStatus status_;
  std::vector<uint8_t> headerWords_;
  std::unique_ptr<capnp::MessageReader> headerMsg_;
  std::vector<FrameInfo> frames_;
  bool scanned_ = false;
  bool footerLoaded_ = false;
  uint64_t footerOffset_ = 0;
  std::optional<FrameInfo> unusedFooter_;  // a footer frame the scan met but open could not use
  std::unordered_map<int64_t, uint64_t> stepOffsets_;
  bool stepIndexReady_ = false;
  std::unordered_map<Hash128, uint64_t, Hash128Hasher> blobOffsets_;
  bool blobIndexReady_ = false;
  UniqueFd dirFd_;    // the trace directory (a stream opened from one): where its bulk files are
  std::string stem_;  // the stream file's name without ".dls"
  std::vector<std::string> bulkNames_;
  std::vector<std::unique_ptr<StreamReader>> bulk_;
  bool bulkOpened_ = false;
  std::vector<uint8_t> scratch_;
  PayloadCodec codec_;
};

}  // namespace dlrr
