#pragma once
// The report's figures as inline SVG, drawn by dltrace itself: the page needs no script, no
// plotting library and no network (docs/design.md, "The report").
#include <cstdint>
#include <string>
#include <vector>

#include "tools/dltrace/ReportData.h"

namespace dlrr::tools {

// Text for HTML and SVG: escaped, and control characters made visible (printable()).
std::string htmlEscape(const std::string& s);

struct Series {
  std::vector<double> x, y;  // y NaN: a non-finite point, drawn as a red mark on the top edge
};

// A line chart with the failure's x marked by a vertical red line (markX NaN: none).
std::string lineChart(const std::string& cssClass, const Series& s, const std::string& xLabel,
                      const std::string& yLabel, double markX, const std::string& markLabel, bool logY = false);
// Rows x steps, colour = log10 of the cell's magnitude; non-finite cells red, missing ones grey.
std::string heatMapSvg(const std::string& cssClass, const HeatMap& m, int64_t markStep);
// One row per stream on a shared clock: phases, steps, collectives, failures; the window
// [fromNs, toNs] of it (marks outside are clipped).
std::string timelineSvg(const std::vector<StreamTimeline>& rows, int64_t fromNs, int64_t toNs);
// The sample as pixels (downsampled to at most 64 per side); non-finite pixels magenta.
std::string imageSvg(const Sample& s);

}  // namespace dlrr::tools
