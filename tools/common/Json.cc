#include "tools/common/Json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "tools/common/Text.h"

namespace dlrr::tools {

void appendJsonString(std::string& out, std::string_view s) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t len = utf8SequenceLength(s, i);
      if (len == 0) {
        out += "\\ufffd";  // not UTF-8: JSON text must be
        ++i;
      } else {
        out.append(s.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

void JsonWriter::newline() {
  if (indent_ <= 0) return;
  out_ += '\n';
  out_.append(stack_.size() * static_cast<size_t>(indent_), ' ');
}

void JsonWriter::beforeValue() {
  if (afterKey_) {
    afterKey_ = false;
    return;
  }
  if (!stack_.empty()) {
    if (!stack_.back().empty) out_ += ',';
    stack_.back().empty = false;
    newline();
  }
}

JsonWriter& JsonWriter::beginObject() {
  beforeValue();
  out_ += '{';
  stack_.push_back({true, true});
  return *this;
}

JsonWriter& JsonWriter::endObject() {
  bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += '}';
  return *this;
}

JsonWriter& JsonWriter::beginArray() {
  beforeValue();
  out_ += '[';
  stack_.push_back({false, true});
  return *this;
}

JsonWriter& JsonWriter::endArray() {
  bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  beforeValue();
  appendJsonString(out_, k);
  out_ += indent_ > 0 ? ": " : ":";
  afterKey_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  beforeValue();
  appendJsonString(out_, s);
  return *this;
}

JsonWriter& JsonWriter::value(bool b) { return number(b ? "true" : "false"); }

JsonWriter& JsonWriter::value(double d) {
  if (std::isnan(d)) return value(std::string_view("nan"));
  if (std::isinf(d)) return value(std::string_view(d > 0 ? "inf" : "-inf"));
  char b[64];
  auto r = std::to_chars(b, b + sizeof b, d);  // shortest form that reads back exactly
  return number(std::string(b, r.ptr));
}

JsonWriter& JsonWriter::null() { return number("null"); }

JsonWriter& JsonWriter::number(const std::string& text) {
  beforeValue();
  out_ += text;
  return *this;
}

}  // namespace dlrr::tools
