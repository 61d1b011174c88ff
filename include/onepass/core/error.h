// onepass::Error — the one exception type of the library, formatted "[where] what".
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace onepass {

/// Every failure the library reports: bad shapes, corrupt files, out-of-memory, backend
/// errors. `where()` names the component or op ("rms_norm", "gguf", "cuda"), `detail()`
/// says what was wrong and what was expected.
class Error : public std::runtime_error {
 public:
  Error(std::string where, std::string detail)
      : std::runtime_error("[" + where + "] " + detail),
        where_(std::move(where)),
        detail_(std::move(detail)) {}

  const std::string& where() const noexcept { return where_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string where_;
  std::string detail_;
};

/// Concatenates any streamable values into a string (GCC 12 has no std::format).
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

/// Throws Error("[where] " + cat(parts...)).
template <typename... Parts>
[[noreturn]] void fail(std::string_view where, const Parts&... parts) {
  throw Error(std::string(where), cat(parts...));
}

/// Throws unless `condition` holds.
template <typename... Parts>
void check(bool condition, std::string_view where, const Parts&... parts) {
  if (!condition) fail(where, parts...);
}

}  // namespace onepass
