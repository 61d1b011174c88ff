#include "onepass/exec/kernel_choice.h"

#include "onepass/exec/backend.h"

namespace onepass {

void KernelSelectors::add(std::string_view op, KernelSelector selector) {
  check(selector != nullptr, "kernel selectors", "no selector given for '", op, "'");
  check(selectors_.emplace(op, selector).second, "kernel selectors", "'", op, "' has a selector already");
}

KernelSelector KernelSelectors::find(std::string_view op) const {
  const auto it = selectors_.find(op);
  return it == selectors_.end() ? nullptr : it->second;
}

KernelChoice Backend::choose_kernel(const KernelRequest& request) const {
  const KernelSelector selector = selectors_.find(request.op);
  if (selector == nullptr) return {};
  return selector(*this, request);
}

}  // namespace onepass
