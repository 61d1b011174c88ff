// The CPU backend's kernel selectors (one per op; see select.cpp).
#pragma once

#include "onepass/exec/kernel_choice.h"

namespace onepass::cpu {

void register_cpu_selectors(KernelSelectors& selectors);

}  // namespace onepass::cpu
