// Renders templates with Python's jinja2 through tests/tools/jinja_reference.py, the
// reference the Jinja interpreter is compared with byte for byte.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "model/jinja/jinja.h"

namespace onepass::testing {

struct JinjaCase {
  std::string source;
  model::jinja::Json variables;
};

/// jinja2's rendering of a case, or its error ("TemplateError: message").
struct JinjaReference {
  std::optional<std::string> text;
  std::string error;
};

/// Each case rendered by jinja2 with transformers' settings, or nullopt with `skip_reason`
/// set when python3 or jinja2 is missing. When the script itself fails, the list is short
/// and `skip_reason` holds its output (a test failure, not a skip).
inline std::optional<std::vector<JinjaReference>> render_with_jinja2(
    const std::vector<JinjaCase>& cases, std::string& skip_reason) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  fs::path script = root / "tests/tools/jinja_reference.py";
  if (!fs::exists(script)) script = fs::current_path() / "tests/tools/jinja_reference.py";
  if (!fs::exists(script)) {
    skip_reason = "tests/tools/jinja_reference.py not found";
    return std::nullopt;
  }
  if (std::system("python3 -c 'import jinja2' > /dev/null 2>&1") != 0) {
    skip_reason = "python3 with jinja2 is not available (scripts/setup installs it)";
    return std::nullopt;
  }
  std::string dir_pattern = (fs::temp_directory_path() / "onepass_jinja_XXXXXX").string();
  if (mkdtemp(dir_pattern.data()) == nullptr) {
    skip_reason = "mkdtemp failed";
    return std::nullopt;
  }
  const fs::path dir = dir_pattern;
  model::jinja::Json input = model::jinja::Json::array();
  for (const JinjaCase& c : cases) input.push_back({{"template", c.source}, {"variables", c.variables}});
  std::ofstream(dir / "cases.json") << input.dump();
  const std::string command = "python3 '" + script.string() + "' '" + (dir / "cases.json").string() +
                              "' '" + (dir / "out.json").string() + "' > '" +
                              (dir / "log.txt").string() + "' 2>&1";
  const int status = std::system(command.c_str());
  std::vector<JinjaReference> out;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    for (const model::jinja::Json& result :
         model::jinja::Json::parse(std::ifstream(dir / "out.json"))) {
      JinjaReference reference;
      if (result.contains("text")) {
        reference.text = result["text"].get<std::string>();
      } else {
        reference.error = result["error"].get<std::string>();
      }
      out.push_back(std::move(reference));
    }
  } else {
    std::ostringstream log;
    log << std::ifstream(dir / "log.txt").rdbuf();
    skip_reason = "jinja_reference.py failed: " + log.str();
  }
  fs::remove_all(dir);
  return out;  // a failed run returns fewer results than cases, with `skip_reason` saying why
}

}  // namespace onepass::testing
