#include "tools/dltrace/TriageEventText.h"

#include "tools/common/Text.h"
#include "triage/Names.h"

namespace dlrr::tools {
namespace {

constexpr unsigned kShown = 8;  // entries shown per line

std::string text(capnp::Text::Reader t) { return printable(std::string_view(t.begin(), t.size())); }

}  // namespace

std::string describeTriageEvent(schema::Event::Reader e) {
  using E = schema::Event;
  switch (e.which()) {
    case E::MISSING_PATHS: {
      auto m = e.getMissingPaths();
      auto paths = m.getPaths();
      std::string out = std::to_string(paths.size()) + " path(s)";
      for (unsigned i = 0; i < paths.size() && i < kShown; ++i) {
        auto p = paths[i];
        out += (i ? "; " : ": ") + text(p.getPath()) + " (" + triage::errnoName(p.getError()) + ", " +
               triage::lookupOpName(static_cast<int>(p.getOp())) + ", " + std::to_string(p.getCount()) + "x)";
      }
      if (paths.size() > kShown) out += "; ... +" + std::to_string(paths.size() - kShown);
      if (m.getDroppedPaths()) out += "; " + std::to_string(m.getDroppedPaths()) + " more path(s) not kept";
      return out;
    }
    case E::LIBRARY_LOAD_ERROR: {
      auto l = e.getLibraryLoadError();
      return text(l.getName()) + ": " + text(l.getError()) + " (" + std::to_string(l.getCount()) + "x)";
    }
    case E::RESOURCE_PEAK: {
      auto r = e.getResourcePeak();
      std::string out = text(r.getReason()) + ": max RSS " + triage::bytesText(r.getMaxRssBytes());
      if (r.getVmPeakBytes()) out += ", peak virtual " + triage::bytesText(r.getVmPeakBytes());
      if (r.getAddressSpaceLimit()) out += ", ulimit -v " + triage::bytesText(r.getAddressSpaceLimit());
      if (r.getMemoryLimit()) out += ", cgroup limit " + triage::bytesText(r.getMemoryLimit());
      if (r.getMemTotal()) out += ", machine " + triage::bytesText(r.getMemTotal());
      if (r.getOomKills()) out += ", OOM kills " + std::to_string(r.getOomKills());
      for (auto g : r.getGpus())
        out += "; cuda:" + std::to_string(g.getDevice()) + " max allocated " + triage::bytesText(g.getMaxAllocated()) +
               ", reserved " + triage::bytesText(g.getMaxReserved()) + " of " + triage::bytesText(g.getTotal());
      return out;
    }
    case E::PACKAGES: {
      auto p = e.getPackages();
      auto items = p.getItems();
      std::string out = text(p.getReason()) + ": " + std::to_string(items.size()) + " package(s)";
      for (unsigned i = 0; i < items.size() && i < 2 * kShown; ++i)
        out += (i ? ", " : ": ") + text(items[i].getName()) +
               (items[i].getVersion().size() ? " " + text(items[i].getVersion()) : std::string());
      if (items.size() > 2 * kShown) out += ", ... +" + std::to_string(items.size() - 2 * kShown);
      return out;
    }
    default:
      return "";
  }
}

}  // namespace dlrr::tools
