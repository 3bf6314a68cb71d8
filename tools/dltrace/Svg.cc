#include "tools/dltrace/Svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tools/common/Text.h"

namespace dlrr::tools {
namespace {

constexpr size_t kMaxMarks = 2000;  // steps, and collectives, drawn per timeline row

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string label(double v) {
  char b[32];
  double a = std::fabs(v);
  if (v == 0)
    return "0";
  else if (a >= 1e5 || a < 1e-3)
    std::snprintf(b, sizeof b, "%.1e", v);
  else
    std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// Viridis, five stops: readable by the colour-blind and in greyscale.
std::string viridis(double t) {
  static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  int i = std::min(3, static_cast<int>(t));
  double f = t - i;
  char b[16];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", static_cast<int>(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return b;
}

// About n round tick values between lo and hi.
std::vector<double> ticks(double lo, double hi, int n) {
  std::vector<double> out;
  if (!(hi > lo)) return {lo};
  double raw = (hi - lo) / n, mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag * (raw / mag < 2 ? 2 : raw / mag < 5 ? 5 : 10);
  const double first = std::ceil(lo / step) * step;
  for (int i = 0; i <= 4 * n && first + i * step <= hi + step * 1e-9; ++i) out.push_back(first + i * step);
  return out;
}

}  // namespace

std::string htmlEscape(const std::string& raw) {
  std::string s = printable(raw), out;
  out.reserve(s.size());
  for (char c : s) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  return out;
}

std::string lineChart(const std::string& cssClass, const Series& s, const std::string& xLabel,
                      const std::string& yLabel, double markX, const std::string& markLabel, bool logY) {
  const double W = 900, H = 240, L = 70, R = 20, T = 20, B = 40;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto ty = [&](double y) { return logY ? std::log10(y) : y; };
  for (size_t i = 0; i < s.x.size(); ++i) {
    x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
    if (std::isfinite(s.y[i]) && (!logY || s.y[i] > 0)) y0 = std::min(y0, ty(s.y[i])), y1 = std::max(y1, ty(s.y[i]));
  }
  if (std::isfinite(markX)) x0 = std::min(x0, markX), x1 = std::max(x1, markX);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (y1 == y0) {
    double half = y0 != 0 ? std::fabs(y0) * 0.5 : 0.5;
    y0 -= half, y1 += half;
  }
  double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - (ty(y) - y0) / (y1 - y0)) * (H - T - B); };
  std::string o = "<svg class=\"" + cssClass + "\" viewBox=\"0 0 900 240\" width=\"900\" height=\"240\" role=\"img\">";
  o += "<rect class=\"plot-bg\" x=\"" + num(L) + "\" y=\"" + num(T) + "\" width=\"" + num(W - L - R) + "\" height=\"" +
       num(H - T - B) + "\" fill=\"#fafafa\" stroke=\"#ccc\"/>";
  for (double v : ticks(x0, x1, 8))
    o += "<text x=\"" + num(px(v)) + "\" y=\"" + num(H - B + 16) + "\" font-size=\"11\" text-anchor=\"middle\">" +
         label(v) + "</text>";
  for (double v : ticks(y0, y1, 4)) {
    double y = T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
    o += "<line x1=\"" + num(L) + "\" x2=\"" + num(W - R) + "\" y1=\"" + num(y) + "\" y2=\"" + num(y) +
         "\" stroke=\"#e4e4e4\"/><text x=\"" + num(L - 6) + "\" y=\"" + num(y + 4) +
         "\" font-size=\"11\" text-anchor=\"end\">" + label(logY ? std::pow(10, v) : v) + "</text>";
  }
  o += "<text x=\"" + num(L + (W - L - R) / 2) + "\" y=\"" + num(H - 4) +
       "\" font-size=\"12\" text-anchor=\"middle\">" + htmlEscape(xLabel) + "</text><text x=\"14\" y=\"" +
       num(T + (H - T - B) / 2) + "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 " +
       num(T + (H - T - B) / 2) + ")\">" + htmlEscape(yLabel) + "</text>";
  std::string path;
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(s.y[i]) || (logY && s.y[i] <= 0)) {
      o += "<path class=\"nonfinite\" d=\"M" + num(px(s.x[i]) - 4) + " " + num(T + 2) +
           "l8 8m0 -8l-8 8\" stroke=\"#d62728\" "
           "stroke-width=\"2\"><title>" +
           label(s.x[i]) + ": non-finite</title></path>";
      continue;
    }
    path += (path.empty() ? "M" : "L") + num(px(s.x[i])) + " " + num(py(s.y[i]));
  }
  if (!path.empty())
    o += "<path class=\"series\" d=\"" + path + "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.6\"/>";
  if (s.x.size() <= 400)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.y[i]) && (!logY || s.y[i] > 0))
        o += "<circle cx=\"" + num(px(s.x[i])) + "\" cy=\"" + num(py(s.y[i])) + "\" r=\"2\" fill=\"#1f77b4\"><title>" +
             label(s.x[i]) + ": " + label(s.y[i]) + "</title></circle>";
  if (std::isfinite(markX))
    o += "<line class=\"failure-mark\" x1=\"" + num(px(markX)) + "\" x2=\"" + num(px(markX)) + "\" y1=\"" + num(T) +
         "\" y2=\"" + num(H - B) + "\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"5 3\"/><text x=\"" +
         num(std::min(px(markX) + 4, W - 200)) + "\" y=\"" + num(T + 24) + "\" font-size=\"12\" fill=\"#d62728\">" +
         htmlEscape(markLabel) + "</text>";
  return o + "</svg>";
}

std::string heatMapSvg(const std::string& cssClass, const HeatMap& m, int64_t markStep) {
  const double L = 190, T = 10, cw = m.steps.empty() ? 10 : std::clamp(680.0 / m.steps.size(), 6.0, 22.0), ch = 14;
  const double W = L + cw * m.steps.size() + 150, H = std::max(T + ch * m.rows.size() + 40, T + 130.0);
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [k, c] : m.cells)
    if (c.maxAbs > 0) lo = std::min(lo, std::log10(c.maxAbs)), hi = std::max(hi, std::log10(c.maxAbs));
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi == lo) hi = lo + 1;
  std::string o = "<svg class=\"" + cssClass + "\" viewBox=\"0 0 " + num(W) + " " + num(H) + "\" width=\"" + num(W) +
                  "\" height=\"" + num(H) + "\" role=\"img\">";
  for (size_t r = 0; r < m.rows.size(); ++r)
    o += "<text x=\"" + num(L - 6) + "\" y=\"" + num(T + r * ch + 11) + "\" font-size=\"11\" text-anchor=\"end\">" +
         htmlEscape(m.rows[r].size() > 30 ? "..." + m.rows[r].substr(m.rows[r].size() - 27) : m.rows[r]) + "</text>";
  for (size_t c = 0; c < m.steps.size(); ++c) {
    if (c % std::max<size_t>(1, m.steps.size() / 10) == 0 || m.steps[c] == markStep)
      o += "<text x=\"" + num(L + c * cw + cw / 2) + "\" y=\"" + num(T + m.rows.size() * ch + 14) +
           "\" font-size=\"10\" text-anchor=\"middle\"" + (m.steps[c] == markStep ? " fill=\"#d62728\"" : "") + ">" +
           std::to_string(m.steps[c]) + "</text>";
    for (size_t r = 0; r < m.rows.size(); ++r) {
      auto it = m.cells.find({r, m.steps[c]});
      std::string fill = "#eeeeee", tip = "not recorded";
      if (it != m.cells.end()) {
        if (it->second.nonFinite) {
          fill = "#ff00ff";
          tip = std::to_string(it->second.nonFinite) + " non-finite";
        } else if (it->second.maxAbs > 0) {
          fill = viridis((std::log10(it->second.maxAbs) - lo) / (hi - lo));
          tip = "max |x| " + label(it->second.maxAbs);
        } else {
          fill = viridis(0);
          tip = "all zero";
        }
      }
      o += "<rect class=\"cell\" x=\"" + num(L + c * cw) + "\" y=\"" + num(T + r * ch) + "\" width=\"" + num(cw - 1) +
           "\" height=\"" + num(ch - 1) + "\" fill=\"" + fill + "\"><title>" + htmlEscape(m.rows[r]) + ", step " +
           std::to_string(m.steps[c]) + ": " + tip + "</title></rect>";
    }
  }
  o += "<text x=\"" + num(L + cw * m.steps.size() / 2) + "\" y=\"" + num(H - 4) +
       "\" font-size=\"12\" text-anchor=\"middle\">step</text>";
  // Legend: the colour scale and the non-finite colour.
  double lx = L + cw * m.steps.size() + 20;
  for (int i = 0; i < 10; ++i)
    o += "<rect x=\"" + num(lx) + "\" y=\"" + num(T + (9 - i) * 10) + "\" width=\"14\" height=\"10\" fill=\"" +
         viridis(i / 9.0) + "\"/>";
  o += "<text x=\"" + num(lx + 18) + "\" y=\"" + num(T + 9) + "\" font-size=\"10\">1e" + num(hi) + "</text>";
  o += "<text x=\"" + num(lx + 18) + "\" y=\"" + num(T + 100) + "\" font-size=\"10\">1e" + num(lo) + "</text>";
  o += "<rect x=\"" + num(lx) + "\" y=\"" + num(T + 112) +
       "\" width=\"14\" height=\"10\" fill=\"#ff00ff\"/><text x=\"" + num(lx + 18) + "\" y=\"" + num(T + 121) +
       "\" font-size=\"10\">non-finite</text>";
  return o + "</svg>";
}

std::string timelineSvg(const std::vector<StreamTimeline>& rows, int64_t fromNs, int64_t toNs) {
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  for (const auto& r : rows) t0 = std::min(t0, r.startNs), t1 = std::max(t1, r.endNs);
  if (rows.empty() || t1 <= t0) t1 = t0 + 1;
  const int64_t origin = t0;  // tick labels: seconds since the first process started
  t0 = std::max(t0, fromNs), t1 = std::min(t1, toNs);
  if (t1 <= t0) t1 = t0 + 1;
  const double L = 150, W = 900, R = 20, rowH = 34, T = 10;
  const double H = T + rows.size() * rowH + 40;
  auto px = [&](int64_t ns) {
    return L + std::clamp(static_cast<double>(ns - t0) / static_cast<double>(t1 - t0), 0.0, 1.0) * (W - L - R);
  };
  std::string o = "<svg class=\"timeline\" viewBox=\"0 0 900 " + num(H) + "\" width=\"900\" height=\"" + num(H) +
                  "\" role=\"img\">";
  for (double v : ticks((t0 - origin) / 1e9, (t1 - origin) / 1e9, 8)) {
    double x = px(origin + static_cast<int64_t>(v * 1e9));
    o += "<line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(T) + "\" y2=\"" + num(H - 34) +
         "\" stroke=\"#eee\"/><text x=\"" + num(x) + "\" y=\"" + num(H - 20) +
         "\" font-size=\"11\" text-anchor=\"middle\">" + label(v) + "</text>";
  }
  o += "<text x=\"" + num(L + (W - L - R) / 2) + "\" y=\"" + num(H - 4) +
       "\" font-size=\"12\" text-anchor=\"middle\">seconds since the first process started</text>";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    double y = T + i * rowH;
    std::string name = r.stream + (r.rank >= 0 ? " (rank " + std::to_string(r.rank) + ")" : "");
    o += "<text x=\"" + num(L - 6) + "\" y=\"" + num(y + 20) + "\" font-size=\"11\" text-anchor=\"end\">" +
         htmlEscape(name) + "</text>";
    o += "<rect class=\"lifetime\" x=\"" + num(px(r.startNs)) + "\" y=\"" + num(y + 8) + "\" width=\"" +
         num(std::max(1.0, px(r.endNs) - px(r.startNs))) + "\" height=\"18\" fill=\"#dde6f0\"><title>" +
         htmlEscape(name + ", pid " + std::to_string(r.pid)) + "</title></rect>";
    for (const auto& p : r.phases) {
      const char* fill = p.name == "init" ? "#c7c7c7" : p.name == "shutdown" ? "#b0b0b0" : "#aec7e8";
      o += "<rect class=\"phase\" x=\"" + num(px(p.ns)) + "\" y=\"" + num(y + 8) + "\" width=\"" +
           num(std::max(1.0, px(p.endNs) - px(p.ns))) + "\" height=\"18\" fill=\"" + fill + "\"><title>" +
           htmlEscape(p.name) + "</title></rect>";
    }
    // A long job's steps and collectives are thinned to about kMaxMarks a row (the page stays
    // small; export --chrome-trace keeps every one); non-finite collectives are always drawn.
    const size_t stepStride = std::max<size_t>(1, r.steps.size() / kMaxMarks);
    const size_t collStride = std::max<size_t>(1, r.collectives.size() / kMaxMarks);
    for (size_t k = 0; k < r.steps.size(); k += stepStride) {
      const auto& s = r.steps[k];
      int64_t end = s.endNs >= 0 ? s.endNs : (k + 1 < r.steps.size() ? r.steps[k + 1].ns : r.endNs);
      if (stepStride > 1) end = k + stepStride < r.steps.size() ? r.steps[k + stepStride].ns : r.endNs;
      o += "<rect class=\"step\" x=\"" + num(px(s.ns)) + "\" y=\"" + num(y + 12) + "\" width=\"" +
           num(std::max(0.5, px(end) - px(s.ns))) + "\" height=\"10\" fill=\"" +
           ((k / stepStride) % 2 ? "#1f77b4" : "#4a98d3") + "\"><title>" + htmlEscape(s.name) + "</title></rect>";
    }
    for (size_t k = 0; k < r.collectives.size(); ++k) {
      const auto& c = r.collectives[k];
      if (k % collStride && c.detail.find("non-finite") == std::string::npos) continue;
      o += "<line class=\"collective\" x1=\"" + num(px(c.ns)) + "\" x2=\"" + num(px(c.ns)) + "\" y1=\"" + num(y + 4) +
           "\" y2=\"" + num(y + 30) + "\" stroke=\"" +
           (c.detail.find("non-finite") != std::string::npos ? "#d62728" : "#ff7f0e") +
           "\" stroke-width=\"1\"><title>" + htmlEscape(c.name + ", " + c.detail) + "</title></line>";
    }
    for (const auto& f : r.failures)
      o += "<path class=\"failure\" d=\"M" + num(px(f.ns)) + " " + num(y + 9) +
           "l7 8l-7 8l-7 -8z\" fill=\"#d62728\"><title>" + htmlEscape(f.detail) + "</title></path>";
  }
  return o + "</svg>";
}

std::string imageSvg(const Sample& s) {
  if (s.pixels.empty()) return "";
  int stride = std::max(1, std::max((s.height + 63) / 64, (s.width + 63) / 64));
  int h = (s.height + stride - 1) / stride, w = (s.width + stride - 1) / stride;
  double px = std::max(2.0, 224.0 / std::max(h, w));
  double lo = INFINITY, hi = -INFINITY;
  for (double v : s.pixels)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi == lo) hi = lo + 1;
  std::string o = "<svg class=\"sample-image\" viewBox=\"0 0 " + num(w * px) + " " + num(h * px) + "\" width=\"" +
                  num(w * px) + "\" height=\"" + num(h * px) + "\" shape-rendering=\"crispEdges\" role=\"img\">";
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      size_t at = (static_cast<size_t>(y * stride) * s.width + x * stride) * s.channels;
      int c[3];
      bool bad = false;
      for (int k = 0; k < 3; ++k) {
        double v = s.pixels[at + (s.channels == 3 ? k : 0)];
        bad |= !std::isfinite(v);
        c[k] = std::isfinite(v) ? static_cast<int>(std::lround((v - lo) / (hi - lo) * 255)) : 0;
      }
      char fill[16];
      if (bad)
        std::snprintf(fill, sizeof fill, "#ff00ff");
      else
        std::snprintf(fill, sizeof fill, "#%02x%02x%02x", c[0], c[1], c[2]);
      o += "<rect x=\"" + num(x * px) + "\" y=\"" + num(y * px) + "\" width=\"" + num(px) + "\" height=\"" + num(px) +
           "\" fill=\"" + fill + "\"/>";
    }
  return o + "</svg>";
}

}  // namespace dlrr::tools
