#include "format/StreamReader.h"

#include <capnp/serialize.h>
#include <fcntl.h>
#include <kj/exception.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "format/Check.h"
#include "format/Codec.h"
#include "format/Crc32c.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"

namespace dlrr {
namespace {

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// Whether `n` (< a whole header) bytes can be the start of what a writer was writing when it
// stopped: a frame header (its magic), or, right after a footer frame, the trailer.
bool isTornPrefix(const uint8_t* p, size_t n, bool afterFooter) {
  uint8_t magic[4];
  for (int i = 0; i < 4; ++i) magic[i] = static_cast<uint8_t>(kFrameMagic >> (8 * i));
  if (std::memcmp(p, magic, std::min<size_t>(n, sizeof magic)) == 0) return true;
  return afterFooter && n < kTrailerSize && std::memcmp(p, kTrailerMagic, std::min(n, sizeof kTrailerMagic)) == 0;
}

std::string blobName(const Hash128& h) {
  char b[40];
  std::snprintf(b, sizeof b, "%016llx%016llx", static_cast<unsigned long long>(h.hi),
                static_cast<unsigned long long>(h.lo));
  return b;
}

// The traversal limit is Cap'n Proto's guard against amplification (pointers that alias, lists
// of zero-sized elements): it caps the words all reads of one message may visit. Tied to the
// words actually present, a message costs readers time proportional to its bytes; a fixed
// limit let a few hundred bytes expand into millions of list elements. The factor leaves room
// for callers that read the same fields more than once.
capnp::ReaderOptions readerOptions(size_t wordsPresent) {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = std::min<uint64_t>(uint64_t{wordsPresent} * 8 + 4096, (kMaxRawLen / 8) * 2);
  o.nestingLimit = 64;
  return o;
}

// Walks back-to-back flat messages in `bytes`; calls fn on each root until it returns false.
template <typename Fn>
void forEachMessage(const std::vector<uint8_t>& bytes, uint64_t frameOffset, Fn&& fn) {
  if (bytes.size() % 8 != 0)
    throw TraceError(ErrorKind::Corrupt, "events frame at " + hex(frameOffset) + " is not word-aligned");
  kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(bytes.data()), bytes.size() / 8);
  while (words.size() > 0) {
    capnp::FlatArrayMessageReader reader(words, readerOptions(words.size()));
    if (!fn(reader.getRoot<schema::Event>())) return;
    const capnp::word* end = reader.getEnd();
    words = kj::ArrayPtr<const capnp::word>(end, words.end());
  }
}

}  // namespace

StreamReader::~StreamReader() = default;

void StreamReader::readExact(uint64_t off, void* buf, size_t n) const {
  auto* p = static_cast<uint8_t*>(buf);
  if (inMemory_) {
    if (off > mem_.size() || n > mem_.size() - off)
      throw TraceError(ErrorKind::Corrupt, name_ + ": unexpected end of file at " + hex(off));
    if (n) std::memcpy(p, mem_.data() + off, n);
    return;
  }
  while (n > 0) {
    ssize_t r = ::pread(fd_.get(), p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw TraceError(ErrorKind::Io, name_ + ": read failed: " + std::strerror(errno));
    }
    if (r == 0) throw TraceError(ErrorKind::Corrupt, name_ + ": unexpected end of file at " + hex(off));
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

std::unique_ptr<StreamReader> StreamReader::open(int dirFd, const std::string& file, const std::string& displayName) {
  std::unique_ptr<StreamReader> r(new StreamReader());
  r->name_ = displayName;
  // O_NONBLOCK: a FIFO planted under a stream's name must not hang the reader in open().
  r->fd_.reset(::openat(dirFd, file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!r->fd_.valid()) {
    int err = errno;
    if (err == ELOOP) throw TraceError(ErrorKind::NotATrace, file + " is a symbolic link; refusing to follow it");
    throw TraceError(ErrorKind::Io, "cannot open " + file + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(r->fd_.get(), &st) != 0) throw TraceError(ErrorKind::Io, "cannot stat " + file);
  if (S_ISDIR(st.st_mode)) throw TraceError(ErrorKind::NotATrace, file + " is a directory, expected a stream file");
  if (!S_ISREG(st.st_mode)) throw TraceError(ErrorKind::NotATrace, file + " is not a regular file");
  r->status_.fileSize = static_cast<uint64_t>(st.st_size);
  r->init(file);
  if (file.size() > std::strlen(kStreamExt) &&
      file.compare(file.size() - std::strlen(kStreamExt), std::strlen(kStreamExt), kStreamExt) == 0) {
    r->dirFd_.reset(::fcntl(dirFd, F_DUPFD_CLOEXEC, 0));
    r->stem_ = file.substr(0, file.size() - std::strlen(kStreamExt));
  }
  return r;
}

std::unique_ptr<StreamReader> StreamReader::openBytes(std::vector<uint8_t> bytes, const std::string& displayName) {
  std::unique_ptr<StreamReader> r(new StreamReader());
  r->name_ = displayName;
  r->mem_ = std::move(bytes);
  r->inMemory_ = true;
  r->status_.fileSize = r->mem_.size();
  r->init(displayName);
  return r;
}

namespace {

// Reads every pointer field of the header once, so that a malformed one is reported at open
// and later header() readers cannot throw kj::Exception.
// Reads every field once (a damaged pointer throws here, not in a tool later) and bounds every
// list by the words present: a real element costs at least one word, while a list of
// zero-sized structs costs nothing to declare and a reader loop millions of times per call
// (the header reader's traversal limit is fixed, see below).
void validateHeader(schema::StreamHeader::Reader h, size_t wordsPresent) {
  auto bounded = [&](unsigned n, const char* what) {
    if (n > wordsPresent)
      throw TraceError(ErrorKind::Corrupt, std::string("header declares ") + std::to_string(n) + " " + what + " in " +
                                               std::to_string(wordsPresent) + " words");
  };
  (void)h.getStreamName();
  (void)h.getParentStream();
  bounded(h.getArgv().size(), "arguments");
  for (auto a : h.getArgv()) (void)a;
  (void)h.getCwd();
  (void)h.getExe();
  (void)h.getDlrrVersion();
  (void)h.getRunId();
  (void)h.getHost();
  bounded(h.getDistEnv().size(), "launcher variables");
  for (auto kv : h.getDistEnv()) (void)kv.getKey(), (void)kv.getValue();
  auto t = h.getTrace();
  (void)t.getHost();
  (void)t.getUser();
  bounded(t.getCommand().size(), "command words");
  for (auto a : t.getCommand()) (void)a;
  (void)t.getCwd();
  bounded(t.getEnv().size(), "environment variables");
  for (auto kv : t.getEnv()) (void)kv.getKey(), (void)kv.getValue();
  bounded(t.getRedactedNames().size(), "redacted names");
  for (auto a : t.getRedactedNames()) (void)a;
  bounded(t.getRedactPatterns().size(), "redaction patterns");
  for (auto a : t.getRedactPatterns()) (void)a;
  (void)t.getCpuModel();
  (void)t.getKernel();
  (void)t.getCaptureMode();
  bounded(t.getOptions().size(), "options");
  for (auto kv : t.getOptions()) (void)kv.getKey(), (void)kv.getValue();
}

}  // namespace

void checkFormatVersion(const FileHeaderInfo& info, const std::string& file, uint16_t readerMajor) {
  if (info.major > readerMajor)
    throw TraceError(ErrorKind::FutureVersion, file + " uses trace format " + std::to_string(info.major) + "." +
                                                   std::to_string(info.minor) + "; this dlrr reads format " +
                                                   std::to_string(readerMajor) + ".x: upgrade dlrr");
  if (info.major == 0) throw TraceError(ErrorKind::NotATrace, file + " has an invalid format version 0");
}

void StreamReader::init(const std::string& file) {
  if (status_.fileSize < kFileHeaderSize) {
    // A prefix of the magic (or nothing) is what a writer that died in its first write leaves.
    std::vector<uint8_t> head(static_cast<size_t>(status_.fileSize));
    readExact(0, head.data(), head.size());
    if (head.empty() || std::memcmp(head.data(), kFileMagic, std::min(head.size(), sizeof kFileMagic)) == 0)
      throw TraceError(ErrorKind::Corrupt,
                       file + " is a torn stream (" + std::to_string(status_.fileSize) +
                           " bytes): its writer died before writing the file header",
                       true);
    throw TraceError(ErrorKind::NotATrace,
                     file + " is too short to be a dlrr stream (" + std::to_string(status_.fileSize) + " bytes)");
  }
  uint8_t fh[kFileHeaderSize];
  readExact(0, fh, sizeof fh);
  auto info = decodeFileHeader(fh);
  if (!info) throw TraceError(ErrorKind::NotATrace, file + " is not a dlrr stream (bad magic)");
  checkFormatVersion(*info, file);
  status_.formatMajor = info->major;
  status_.formatMinor = info->minor;

  // The header frame must be intact: without it we do not know what the stream is. Cut
  // short (its writer stopped while creating the stream) it is torn, not damaged.
  if (status_.fileSize < kFileHeaderSize + kFrameHeaderSize) {
    uint8_t part[kFrameHeaderSize];
    size_t n = static_cast<size_t>(status_.fileSize - kFileHeaderSize);
    readExact(kFileHeaderSize, part, n);
    throw TraceError(ErrorKind::Corrupt,
                     file + " ends before its header frame (a torn stream: its writer died while creating it)",
                     isTornPrefix(part, n, false));
  }
  uint8_t hb[kFrameHeaderSize];
  readExact(kFileHeaderSize, hb, sizeof hb);
  FrameInfo hf{kFileHeaderSize, {}};
  if (decodeFrameHeader(hb, hf.header) != HeaderStatus::Ok || hf.header.kind != FrameKind::Header)
    throw TraceError(ErrorKind::Corrupt, file + ": header frame is damaged");
  if (kFileHeaderSize + kFrameHeaderSize + hf.header.storedLen > status_.fileSize)
    throw TraceError(ErrorKind::Corrupt,
                     file + ": header frame is cut short (a torn stream: its writer died while creating it)", true);
  readPayload(hf, headerWords_);
  if (headerWords_.size() % 8 != 0) throw TraceError(ErrorKind::Corrupt, file + ": header frame is damaged");
  try {
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(headerWords_.data()),
                                          headerWords_.size() / 8);
    // The header reader lives as long as the stream and every header() call counts against
    // its limit, so it gets the fixed cap rather than one proportional to its size.
    headerMsg_ = std::make_unique<capnp::FlatArrayMessageReader>(words, readerOptions(kMaxRawLen / 8));
    validateHeader(headerMsg_->getRoot<schema::StreamHeader>(), words.size());
  } catch (const TraceError& e) {
    throw TraceError(e.kind(), file + ": " + e.what());
  } catch (const kj::Exception& e) {
    throw TraceError(ErrorKind::Corrupt, file + ": header message does not parse: " + e.getDescription().cStr());
  }

  if (!loadFooter()) scan();
}

schema::StreamHeader::Reader StreamReader::header() const { return headerMsg_->getRoot<schema::StreamHeader>(); }

void StreamReader::readPayload(const FrameInfo& f, std::vector<uint8_t>& out, BlobPrefix* prefix) {
  scratch_.resize(f.header.storedLen);
  readExact(f.offset + kFrameHeaderSize, scratch_.data(), scratch_.size());
  if (crc32c(scratch_.data(), scratch_.size()) != f.header.payloadCrc)
    throw TraceError(ErrorKind::Corrupt, name_ + ": payload checksum mismatch in " + frameKindName(f.header.kind) +
                                             " frame at " + hex(f.offset));
  size_t skip = 0;
  if (f.header.kind == FrameKind::Blob) {
    BlobPrefix p = decodeBlobPrefix(scratch_.data());
    if (prefix) *prefix = p;
    skip = kBlobPrefixSize;
  }
  auto codec = Codec::decode(f.header.codec);
  try {
    codec_.decode(*codec, scratch_.data() + skip, scratch_.size() - skip, f.header.rawLen, out);
  } catch (const TraceError& e) {
    throw TraceError(ErrorKind::Corrupt, name_ + ": " + e.what() + " (frame at " + hex(f.offset) + ")");
  }
}

bool StreamReader::loadFooter() {
  if (status_.fileSize < kFileHeaderSize + kTrailerSize) return false;
  uint8_t tb[kTrailerSize];
  readExact(status_.fileSize - kTrailerSize, tb, sizeof tb);
  auto off = decodeTrailer(tb);
  if (!off || *off < kFileHeaderSize || *off + kFrameHeaderSize > status_.fileSize - kTrailerSize) return false;
  uint8_t hb[kFrameHeaderSize];
  readExact(*off, hb, sizeof hb);
  FrameInfo f{*off, {}};
  if (decodeFrameHeader(hb, f.header) != HeaderStatus::Ok || f.header.kind != FrameKind::Footer ||
      *off + kFrameHeaderSize + f.header.storedLen + kTrailerSize != status_.fileSize)
    return false;
  std::vector<uint8_t> bytes;
  try {
    readPayload(f, bytes);
    if (bytes.size() % 8 != 0) return false;
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(bytes.data()), bytes.size() / 8);
    capnp::FlatArrayMessageReader msg(words, readerOptions(words.size()));
    auto footer = msg.getRoot<schema::Footer>();
    std::unordered_map<int64_t, uint64_t> steps;
    std::unordered_map<Hash128, uint64_t, Hash128Hasher> blobs;
    for (auto s : footer.getSteps()) {
      if (s.getFrameOffset() >= *off) return false;
      steps.emplace(s.getStep(), s.getFrameOffset());
    }
    for (auto b : footer.getBlobs()) {
      if (b.getFrameOffset() >= *off) return false;
      blobs.emplace(Hash128{b.getHashLo(), b.getHashHi()}, b.getFrameOffset());
    }
    stepOffsets_ = std::move(steps);
    blobOffsets_ = std::move(blobs);
    status_.footerSteps = footer.getSteps().size();
    status_.footerEvents = footer.getEvents();
  } catch (const TraceError&) {
    return false;  // a damaged footer is not fatal: fall back to scanning
  } catch (const kj::Exception&) {
    return false;
  }
  footerLoaded_ = true;
  stepIndexReady_ = true;
  blobIndexReady_ = true;
  footerOffset_ = *off;
  status_.cleanClose = true;
  status_.validEnd = status_.fileSize;
  return true;
}

void StreamReader::scan() {
  if (scanned_) return;
  scanned_ = true;
  frames_.clear();
  uint64_t off = kFileHeaderSize;
  uint64_t lastSeq = 0;
  bool haveSeq = false;
  const uint64_t size = status_.fileSize;
  uint64_t end = footerLoaded_ ? footerOffset_ : size;
  bool afterFooter = false;
  while (off < end) {
    if (!footerLoaded_ && size - off == kTrailerSize) {
      uint8_t tb[kTrailerSize];
      readExact(off, tb, sizeof tb);
      if (decodeTrailer(tb)) break;  // trailer without a usable footer: footer frame was bad
    }
    if (end - off < kFrameHeaderSize) {
      uint8_t part[kFrameHeaderSize];
      size_t n = static_cast<size_t>(end - off);
      readExact(off, part, n);
      status_.torn = !footerLoaded_ && isTornPrefix(part, n, afterFooter);
      status_.damage = (status_.torn ? "torn frame header at " : "trailing bytes that are not a frame at ") + hex(off) +
                       " (" + std::to_string(n) + " trailing bytes)";
      break;
    }
    uint8_t hb[kFrameHeaderSize];
    readExact(off, hb, sizeof hb);
    FrameInfo f{off, {}};
    HeaderStatus st = decodeFrameHeader(hb, f.header);
    if (st == HeaderStatus::BadMagic && std::memcmp(hb, kFileMagic, sizeof kFileMagic) == 0) {
      status_.damage = "second file header at " + hex(off) + " (concatenated streams?)";
      break;
    }
    if (st == HeaderStatus::BadMagic && std::memcmp(hb, kTrailerMagic, sizeof kTrailerMagic) == 0) {
      status_.damage = "trailer followed by more data at " + hex(off) + " (concatenated streams?)";
      break;
    }
    if (st != HeaderStatus::Ok) {
      status_.damage = std::string(st == HeaderStatus::BadMagic ? "no frame"
                                   : st == HeaderStatus::BadCrc ? "damaged frame header"
                                                                : "invalid frame header") +
                       " at " + hex(off);
      break;
    }
    if (off + kFrameHeaderSize + f.header.storedLen > end) {
      status_.damage = "torn " + std::string(frameKindName(f.header.kind)) + " frame at " + hex(off) + " (needs " +
                       std::to_string(f.header.storedLen) + " payload bytes, " +
                       std::to_string(end - off - kFrameHeaderSize) + " present)";
      status_.torn = !footerLoaded_;  // an intact header whose frame runs past the end of file
      break;
    }
    afterFooter = false;
    bool async = (f.header.flags & kFrameFlagAsync) != 0;
    if (off == kFileHeaderSize) {
      if (f.header.kind != FrameKind::Header) {
        status_.damage = "first frame is not a header";
        break;
      }
    } else if (f.header.kind == FrameKind::Header) {
      status_.damage = "second header frame at " + hex(off) + " (concatenated streams?)";
      break;
    }
    if (!async) {
      if (haveSeq && f.header.seq <= lastSeq) {
        status_.damage = "frame sequence goes backwards at " + hex(off) + " (spliced or concatenated stream?)";
        break;
      }
      lastSeq = f.header.seq;
      haveSeq = true;
    }
    if (f.header.kind == FrameKind::Footer) {
      if (!unusedFooter_) unusedFooter_ = f;
      off += kFrameHeaderSize + f.header.storedLen;
      afterFooter = true;
      continue;  // a footer we could not use; its trailer follows
    }
    frames_.push_back(f);
    off += kFrameHeaderSize + f.header.storedLen;
  }
  if (afterFooter && off == size && status_.damage.empty()) {
    // The writer was stopped between its footer frame and the trailer (kill -9 during close).
    status_.torn = true;
    status_.damage =
        "footer frame at " + hex(unusedFooter_->offset) + " has no trailer (its writer stopped while closing)";
  }
  if (!footerLoaded_)
    status_.validEnd =
        frames_.empty() ? kFileHeaderSize : frames_.back().offset + kFrameHeaderSize + frames_.back().header.storedLen;
}

const std::vector<FrameInfo>& StreamReader::frames() {
  scan();
  return frames_;
}

void StreamReader::forEachEvent(const EventFn& fn, uint64_t fromOffset) {
  forEachEventUntil(
      [&](schema::Event::Reader e, const FrameInfo& f) {
        fn(e, f);
        return true;
      },
      fromOffset);
}

void StreamReader::forEachEventUntil(const EventUntilFn& fn, uint64_t fromOffset) {
  scan();
  std::vector<uint8_t> bytes;
  for (const FrameInfo& f : frames_) {
    if (f.offset < fromOffset || f.header.kind != FrameKind::Events) continue;
    readPayload(f, bytes);
    bool more = true;
    try {
      forEachMessage(bytes, f.offset, [&](schema::Event::Reader e) { return more = fn(e, f); });
    } catch (const kj::Exception& e) {
      throw TraceError(ErrorKind::Corrupt, name_ + ": event in frame at " + hex(f.offset) +
                                               " does not parse: " + e.getDescription().cStr());
    }
    if (!more) return;
  }
}

std::optional<uint64_t> StreamReader::stepFrameOffset(int64_t step) {
  if (!stepIndexReady_) {
    stepIndexReady_ = true;
    try {
      forEachEvent([&](schema::Event::Reader e, const FrameInfo& f) {
        if (e.isStepBegin()) stepOffsets_.emplace(e.getStepBegin().getStep(), f.offset);
      });
    } catch (const TraceError&) {  // best effort: damage: the steps before it stay indexed
    }
  }
  auto it = stepOffsets_.find(step);
  if (it == stepOffsets_.end()) return std::nullopt;
  return it->second;
}

void StreamReader::ensureBlobIndex() {
  if (blobIndexReady_) return;
  scan();
  for (const FrameInfo& f : frames_) {
    if (f.header.kind != FrameKind::Blob) continue;
    uint8_t pb[kBlobPrefixSize];
    readExact(f.offset + kFrameHeaderSize, pb, sizeof pb);
    BlobPrefix p = decodeBlobPrefix(pb);
    if (p.chunkOffset == 0) blobOffsets_.emplace(Hash128{p.hashLo, p.hashHi}, f.offset);
  }
  blobIndexReady_ = true;
}

void StreamReader::openBulk() {
  if (bulkOpened_) return;
  bulkOpened_ = true;
  if (!dirFd_.valid()) return;
  bulkNames_ = listBulkFiles(dirFd_.get(), stem_);
  for (const auto& n : bulkNames_) {
    try {
      bulk_.push_back(open(dirFd_.get(), n, name_ + " (" + n + ")"));
    } catch (const TraceError&) {  // best effort: unreadable or dropped meanwhile: its blobs are missing
    }
  }
}

StreamReader* StreamReader::bulkWith(const Hash128& h) {
  openBulk();
  for (auto& b : bulk_)
    if (b->hasBlob(h)) return b.get();
  return nullptr;
}

std::vector<std::string> StreamReader::bulkFiles() {
  openBulk();
  return bulkNames_;
}

uint64_t StreamReader::bulkBytes() {
  openBulk();
  uint64_t n = 0;
  for (auto& b : bulk_) n += b->status().fileSize;
  return n;
}

bool StreamReader::hasBlob(const Hash128& h) {
  ensureBlobIndex();
  return blobOffsets_.count(h) != 0 || bulkWith(h) != nullptr;
}

std::vector<uint8_t> StreamReader::readBlob(const Hash128& h, uint64_t size) {
  ensureBlobIndex();
  auto it = blobOffsets_.find(h);
  if (it == blobOffsets_.end())
    if (StreamReader* b = bulkWith(h)) return b->readBlob(h, size);
  if (it == blobOffsets_.end())
    throw TraceError(ErrorKind::NotFound, name_ + ": blob " + blobName(h) + " is not in the stream (lost in a crash?)");
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk;
  uint64_t off = it->second;
  uint64_t have = 0;
  while (true) {
    if (off + kFrameHeaderSize > status_.validEnd)
      throw TraceError(ErrorKind::Corrupt, name_ + ": blob chunk missing at " + hex(off));
    uint8_t hb[kFrameHeaderSize];
    readExact(off, hb, sizeof hb);
    FrameInfo f{off, {}};
    if (decodeFrameHeader(hb, f.header) != HeaderStatus::Ok ||
        off + kFrameHeaderSize + f.header.storedLen > status_.validEnd)
      throw TraceError(ErrorKind::Corrupt, name_ + ": damaged blob frame at " + hex(off));
    if (f.header.kind != FrameKind::Blob) {  // only a signal-path frame can sit between chunks
      off += kFrameHeaderSize + f.header.storedLen;
      continue;
    }
    BlobPrefix p;
    readPayload(f, chunk, &p);
    DLRR_REQUIRE(p.hashLo == h.lo && p.hashHi == h.hi && p.totalSize == size && p.chunkOffset == have,
                 ErrorKind::Corrupt, name_ + ": blob chunk at " + hex(off) + " does not continue the blob", p.totalSize,
                 size, p.chunkOffset, have);
    DLRR_REQUIRE(chunk.size() <= size - have, ErrorKind::Corrupt, name_ + ": blob chunk overruns its blob",
                 chunk.size(), size, have);
    out.insert(out.end(), chunk.begin(), chunk.end());
    have += chunk.size();
    off += kFrameHeaderSize + f.header.storedLen;
    if (have == size) break;
    if (chunk.empty()) throw TraceError(ErrorKind::Corrupt, name_ + ": empty blob chunk");
  }
  Hash128 got = hash128(out.data(), out.size());
  if (!(got == h)) throw TraceError(ErrorKind::Corrupt, name_ + ": blob content does not match its hash");
  return out;
}

std::vector<std::string> StreamReader::verify() {
  std::vector<std::string> problems;
  std::vector<uint8_t> bytes;
  scan();
  if (!status_.damage.empty() && !status_.torn) problems.push_back(name_ + ": " + status_.damage);
  if (!footerLoaded_ && unusedFooter_) {
    // close() writes the footer frame, then the trailer: a footer open() could not use is
    // damage, unless the writer was stopped right between the two (a torn tail).
    std::string why = "footer frame at " + hex(unusedFooter_->offset) + " is not usable";
    bool payloadOk = true;
    try {
      readPayload(*unusedFooter_, bytes);
      why += " (its trailer is missing or damaged, or its index is inconsistent)";
    } catch (const TraceError& e) {
      payloadOk = false;
      why += " (" + std::string(e.what()) + ")";
    }
    if (!(status_.torn && payloadOk)) problems.push_back(name_ + ": " + why + "; the stream was read by scanning");
  }
  for (const FrameInfo& f : frames_) {
    try {
      BlobPrefix p;
      readPayload(f, bytes, &p);
      if (f.header.kind == FrameKind::Events) {
        forEachMessage(bytes, f.offset, [&](schema::Event::Reader e) {
          // Touch the union so that a malformed pointer is found here, not by a later reader.
          (void)e.which();
          capnp::MessageSize ms = e.totalSize();
          (void)ms;
          return true;
        });
      } else if (f.header.kind == FrameKind::Blob && p.chunkOffset == 0) {
        auto data = readBlob(Hash128{p.hashLo, p.hashHi}, p.totalSize);
        (void)data;
      }
    } catch (const TraceError& e) {
      problems.push_back(e.what());
    } catch (const kj::Exception& e) {
      problems.push_back(name_ + ": frame at " + hex(f.offset) + " does not parse: " + e.getDescription().cStr());
    }
  }
  return problems;
}

}  // namespace dlrr
