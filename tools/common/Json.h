#pragma once
// A small streaming JSON writer: always emits valid JSON (UTF-8 checked, control characters
// escaped, non-finite doubles as the strings "nan", "inf", "-inf"), with optional indentation.
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlrr::tools {

class JsonWriter {
 public:
  // indent 0: one line (JSON Lines); > 0: pretty-printed with that many spaces per level.
  explicit JsonWriter(std::string& out, int indent = 0) : out_(out), indent_(indent) {}

  JsonWriter& beginObject();
  JsonWriter& endObject();
  JsonWriter& beginArray();
  JsonWriter& endArray();
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(double d);
  template <std::integral T>
  requires(!std::same_as<T, bool>) JsonWriter& value(T v) {
    if constexpr (std::is_signed_v<T>)
      return number(std::to_string(static_cast<long long>(v)));
    else
      return number(std::to_string(static_cast<unsigned long long>(v)));
  }
  JsonWriter& null();

  // key + value in one call.
  template <typename T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

 private:
  JsonWriter& number(const std::string& text);
  void beforeValue();
  void newline();

  std::string& out_;
  int indent_;
  struct Level {
    bool isObject;
    bool empty;
  };
  std::vector<Level> stack_;
  bool afterKey_ = false;
};

// Appends `s` as a JSON string literal (quotes included) to `out`.
void appendJsonString(std::string& out, std::string_view s);

}  // namespace dlrr::tools
