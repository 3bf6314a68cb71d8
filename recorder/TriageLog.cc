#include "recorder/TriageLog.h"

#include <cerrno>

namespace dlrr {
namespace {

std::string clip(std::string_view s) { return std::string(s.substr(0, TriageLog::kMaxText)); }

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string key(std::string_view path, int error, LookupOp op) {
  std::string k;
  k.reserve(path.size() + 8);
  k += static_cast<char>('0' + static_cast<int>(op));
  k += std::to_string(error);
  k += ':';
  k.append(path.substr(0, TriageLog::kMaxText));
  return k;
}

}  // namespace

bool TriageLog::interesting(int error, LookupOp op) noexcept {
  switch (error) {
    case ENOENT:
    case ENOTDIR:
    case EACCES:
    case EPERM:
    case ELOOP:
    case ENAMETOOLONG:
      return true;
    case EROFS:
    case ENOSPC:
    case EDQUOT:
    case EISDIR:
    case EMFILE:
    case ENFILE:
    case ENXIO:
    case ENODEV:
      return op != LookupOp::Stat && op != LookupOp::Access;
    default:
      return false;
  }
}

bool TriageLog::isImportProbe(std::string_view path) noexcept {
  if (path.find("/__pycache__/") != std::string_view::npos) return true;
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return base.rfind("__init__.", 0) == 0 && endsWith(base, ".so");
}

bool TriageLog::failedLookup(std::string_view path, int error, LookupOp op, int64_t tNs, int64_t step) {
  if (path.empty() || !interesting(error, op) || isImportProbe(path)) return false;
  std::string k = key(path, error, op);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = pathIndex_.find(k);
  if (it != pathIndex_.end()) {
    ++paths_[it->second].count;
    pathChanged_[it->second] = true;
    dirty_.store(true, std::memory_order_relaxed);
    return true;
  }
  if (paths_.size() >= maxPaths_) {
    ++droppedFailures_;
    if (droppedKeys_.size() < kDroppedKeys) {
      if (droppedKeys_.emplace(std::move(k), true).second) ++droppedPaths_;
    }
    return false;
  }
  FailedLookup f;
  f.path = clip(path);
  f.error = error;
  f.op = op;
  f.count = 1;
  f.firstNs = tNs;
  f.firstStep = step;
  pathIndex_.emplace(std::move(k), paths_.size());
  paths_.push_back(std::move(f));
  pathChanged_.push_back(true);
  dirty_.store(true, std::memory_order_relaxed);
  return true;
}

bool TriageLog::failedLibrary(std::string_view name, std::string_view error, int64_t tNs, int64_t step) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string n = clip(name);
  for (size_t i = 0; i < libraries_.size(); ++i) {
    if (libraries_[i].name == n) {
      ++libraries_[i].count;
      libraries_[i].error = clip(error);  // the latest message: the loader may say more now
      libraryChanged_[i] = true;
      dirty_.store(true, std::memory_order_relaxed);
      return true;
    }
  }
  if (libraries_.size() >= maxLibraries_) return false;
  libraries_.push_back({std::move(n), clip(error), 1, tNs, step});
  libraryChanged_.push_back(true);
  dirty_.store(true, std::memory_order_relaxed);
  return true;
}

TriageLog::Changes TriageLog::takeChanges() {
  Changes c;
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < paths_.size(); ++i)
    if (pathChanged_[i]) {
      c.paths.push_back(paths_[i]);
      pathChanged_[i] = false;
    }
  for (size_t i = 0; i < libraries_.size(); ++i)
    if (libraryChanged_[i]) {
      c.libraries.push_back(libraries_[i]);
      libraryChanged_[i] = false;
    }
  c.droppedPaths = droppedPaths_;
  c.droppedFailures = droppedFailures_;
  dirty_.store(false, std::memory_order_relaxed);
  return c;
}

std::vector<FailedLookup> TriageLog::paths() const {
  std::lock_guard<std::mutex> lk(mu_);
  return paths_;
}

std::vector<FailedLibrary> TriageLog::libraries() const {
  std::lock_guard<std::mutex> lk(mu_);
  return libraries_;
}

uint64_t TriageLog::droppedPaths() const {
  std::lock_guard<std::mutex> lk(mu_);
  return droppedPaths_;
}

}  // namespace dlrr
