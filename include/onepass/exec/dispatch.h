// Dispatch: one recorded kernel launch with everything the passes need to reason about
// it (what it reads and writes, its kind, its label).
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "onepass/core/buffer.h"
#include "onepass/core/error.h"
#include "onepass/core/tensor.h"
#include "onepass/exec/kernel.h"
#include "onepass/exec/op_kind.h"

namespace onepass {

/// Largest argument struct a kernel may take (CUDA allows 4 KiB; ours stay far smaller).
inline constexpr size_t kMaxArgBytes = 512;

struct Dispatch {
  const Kernel* kernel = nullptr;
  LaunchDims dims;
  alignas(16) std::array<std::byte, kMaxArgBytes> args{};
  uint32_t args_size = 0;
  OpKind op_kind = OpKind::other;
  /// The op the kernel computes (KernelRequest::op, a string literal) and the element type
  /// that selected it: what fusion rules match, never the kernel's name.
  std::string_view op;
  DType type = DType::f32;
  std::vector<MemRange> reads;
  std::vector<MemRange> writes;
  /// Reads the kernel may issue before its programmatic-dependent-launch wait (weights it
  /// loads while its predecessor finishes); also listed in `reads`. A backend must not
  /// launch it early after a dispatch writing any of them (early_reads_conflict()).
  std::vector<MemRange> early_reads;
  std::string label;
  /// Bytes the dispatch really moves, when its declared ranges over-approximate them for
  /// dependency safety (a gather declares the whole table); 0: the ranges' total. Only the
  /// profiler's bandwidth figures use it.
  uint64_t moved_bytes = 0;
  /// Buffers kept alive for as long as this dispatch may run (empty with
  /// Options::unretained_refs).
  std::vector<std::shared_ptr<Buffer>> retained;

  Dispatch() = default;
  template <typename Args>
  Dispatch(const Kernel& k, LaunchDims launch, const Args& a, OpKind kind, std::string name = {})
      : kernel(&k), dims(launch), op_kind(kind), label(std::move(name)) {
    set_args(a);
  }

  template <typename Args>
  void set_args(const Args& a) {
    static_assert(std::is_trivially_copyable_v<Args>, "kernel arguments must be POD");
    static_assert(sizeof(Args) <= kMaxArgBytes, "kernel argument struct too large");
    check(kernel == nullptr || kernel->args_size == 0 || kernel->args_size == sizeof(Args),
          "dispatch", "kernel ", kernel ? kernel->name : "?", " takes ",
          kernel ? kernel->args_size : 0, " argument bytes, given ", sizeof(Args));
    std::memcpy(args.data(), &a, sizeof(Args));
    args_size = sizeof(Args);
  }
  /// The argument struct, copied out (sizes must match).
  template <typename Args>
  Args args_as() const {
    static_assert(std::is_trivially_copyable_v<Args>);
    check(args_size == sizeof(Args), "dispatch", "argument struct of ", args_size,
          " bytes read as ", sizeof(Args));
    Args a;
    std::memcpy(&a, args.data(), sizeof(Args));
    return a;
  }
  const void* args_data() const { return args.data(); }

  /// Declares that the dispatch reads the tensor's bytes (and keeps its buffer alive).
  Dispatch& read(const TensorView& t) { return read(t.view, t.range()); }
  Dispatch& read(const BufferView& v) { return read(v, v.range()); }
  /// A read the kernel may issue before its PDL wait (see early_reads).
  Dispatch& read_early(const TensorView& t) {
    if (!t.range().empty()) early_reads.push_back(t.range());
    return read(t);
  }
  Dispatch& read_early(const BufferView& v) {
    if (!v.range().empty()) early_reads.push_back(v.range());
    return read(v);
  }
  Dispatch& write(const TensorView& t) { return write(t.view, t.range()); }
  Dispatch& write(const BufferView& v) { return write(v, v.range()); }

  /// A dispatch declaring no writes is "unannotated": passes treat it as touching all
  /// memory, so it is never reordered or run concurrently with anything.
  bool annotated() const { return !writes.empty(); }
  std::string name() const { return kernel ? kernel->name : std::string("<no kernel>"); }

 private:
  Dispatch& read(const BufferView& v, MemRange r) {
    if (!r.empty()) reads.push_back(r);
    if (v.buffer()) retained.push_back(v.buffer());
    return *this;
  }
  Dispatch& write(const BufferView& v, MemRange r) {
    if (!r.empty()) writes.push_back(r);
    if (v.buffer()) retained.push_back(v.buffer());
    return *this;
  }
};

/// A barrier node: everything after it waits for everything before it.
struct Barrier {};

using Node = std::variant<Dispatch, Barrier>;

inline bool is_barrier(const Node& n) { return std::holds_alternative<Barrier>(n); }
inline const Dispatch* as_dispatch(const Node& n) { return std::get_if<Dispatch>(&n); }
inline Dispatch* as_dispatch(Node& n) { return std::get_if<Dispatch>(&n); }

}  // namespace onepass
