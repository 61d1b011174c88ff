// Fusion rules: a producer -> consumer pattern plus a builder for the fused dispatch.
// The generic legality check lives in the fuse pass (passes.h); rules only build.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "onepass/exec/dispatch.h"
#include "onepass/exec/kernel.h"

namespace onepass {

class Backend;

struct FusionRule {
  std::string name;   // "rms_norm+mul"
  OpKind producer;    // kind of the first dispatch
  OpKind consumer;    // kind of the dispatch that reads the producer's only output
  /// Builds the fused dispatch (the backend's kernel for the fused op, its args and op
  /// kind). Called only once the pass has established legality; returns nullopt when this
  /// pair cannot be fused (other arguments, no fused kernel on this backend, ...). Reads,
  /// writes and retained buffers are filled in by the pass.
  std::function<std::optional<Dispatch>(const Dispatch& producer, const Dispatch& consumer, const Backend& backend)>
      build;
  /// The fused kernel still writes the producer's output (e.g. add + rms_norm keeps the
  /// residual sum), so it may stay live after the consumer.
  bool keeps_intermediate = false;
  /// The consumer updates the intermediate in place (rope_kv_write rotates q where the
  /// product left it); the fused kernel writes the value the consumer leaves. Only with
  /// keeps_intermediate.
  bool consumer_updates_intermediate = false;
};

class FusionRules {
 public:
  void add(FusionRule rule) { rules_.push_back(std::move(rule)); }
  const std::vector<FusionRule>& rules() const { return rules_; }
  bool empty() const { return rules_.empty(); }

 private:
  std::vector<FusionRule> rules_;
};

}  // namespace onepass
