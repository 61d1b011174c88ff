#include "onepass/exec/kernel.h"

#include <algorithm>

#include "onepass/core/error.h"

namespace onepass {
namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

size_t common_prefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

void KernelRegistry::add(Kernel kernel) {
  check(!kernel.name.empty(), "KernelRegistry", "kernel without a name");
  check(kernel.cpu != nullptr || kernel.cuda != nullptr || kernel.cuda_host != nullptr, "KernelRegistry", "kernel ",
        kernel.name, " has no entry point");
  const std::string name = kernel.name;
  const auto [it, inserted] =
      kernels_.emplace(name, std::make_unique<Kernel>(std::move(kernel)));
  (void)it;
  check(inserted, "KernelRegistry", "kernel ", name, " registered twice");
}

const Kernel* KernelRegistry::find(std::string_view name) const {
  const auto it = kernels_.find(std::string(name));
  return it == kernels_.end() ? nullptr : it->second.get();
}

const Kernel& KernelRegistry::get(std::string_view name) const {
  if (const Kernel* k = find(name)) return *k;
  std::string near;
  for (const std::string& candidate : near_names(name)) {
    near += near.empty() ? "" : ", ";
    near += candidate;
  }
  fail("KernelRegistry", "no kernel named '", name, "' (", kernels_.size(),
       " registered; closest: ", near.empty() ? "none" : near, ")");
}

std::vector<std::string> KernelRegistry::names() const {
  std::vector<std::string> out;
  out.reserve(kernels_.size());
  for (const auto& [name, kernel] : kernels_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> KernelRegistry::near_names(std::string_view name, size_t count) const {
  struct Scored {
    size_t prefix;
    size_t distance;
    std::string name;
  };
  std::vector<Scored> scored;
  for (const auto& [candidate, kernel] : kernels_) {
    scored.push_back({common_prefix(name, candidate), edit_distance(name, candidate), candidate});
  }
  std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    if (a.prefix != b.prefix) return a.prefix > b.prefix;
    return a.name < b.name;
  });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < count; ++i) out.push_back(scored[i].name);
  return out;
}

}  // namespace onepass
