// KernelRequest / KernelChoice: how an op asks the backend for a kernel. The op states
// what is to be computed (its name, element types, extent and argument struct); the backend
// answers how (which of its kernels, the launch shape, and which operands that kernel reads
// before its programmatic-launch wait). Ops never name kernels; backends never validate
// ops.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "onepass/core/dtype.h"
#include "onepass/core/error.h"
#include "onepass/exec/kernel.h"

namespace onepass {

class Backend;

struct KernelRequest {
  /// The op, by the name its argument struct documents ("rms_norm", "matmul",
  /// "flash_decode", "matmul_fused", ...).
  std::string_view op;
  /// The element types that tell the op's variants apart: activations, or weights for the
  /// products and gathers, or the cache for the cache writes; `type2` where there is a
  /// second one (copy: the destination; kv_write: the cache; embedding: the output).
  DType type = DType::f32;
  DType type2 = DType::f32;
  /// Extent of the result (rows and columns; for the products M and N).
  int64_t rows = 0;
  int64_t cols = 0;
  /// The op's argument struct (shared by all backends). A backend may fill the fields its
  /// struct documents as the backend's own (e.g. how the KV range is chunked).
  void* args = nullptr;
  uint32_t args_size = 0;

  template <typename Args>
  Args& args_as() const {
    check(args_size == sizeof(Args), op, "argument struct of ", args_size, " bytes read as ", sizeof(Args));
    return *static_cast<Args*>(args);
  }
};

struct KernelChoice {
  /// Null when the backend has no kernel for the request (a fusion rule then leaves the
  /// pair unfused; an op reports the error).
  const Kernel* kernel = nullptr;
  LaunchDims dims;
  /// Operands the kernel reads before its programmatic-launch wait, as bits of the op's
  /// operand enum (ops/<op>.h): the op declares them as early reads.
  uint32_t early_operands = 0;
  /// The kernel leaves partial results in the op's scratch; the op then requests its
  /// merge step ("<op>_merge").
  bool needs_merge = false;
};

/// A backend's answer for one op.
using KernelSelector = KernelChoice (*)(const Backend& backend, const KernelRequest& request);

/// Op name -> selector, filled by each backend when it is created.
class KernelSelectors {
 public:
  /// Registers the selector of `op`; throws Error when `op` has one.
  void add(std::string_view op, KernelSelector selector);
  /// nullptr when the backend has no selector for `op`.
  KernelSelector find(std::string_view op) const;

 private:
  std::unordered_map<std::string_view, KernelSelector> selectors_;
};

}  // namespace onepass
