// Random graphs of the synthetic test_mix_u32 kernel over overlapping slices of a few
// buffers, with a host simulation as the sequential reference.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "onepass/exec/backend.h"
#include "onepass/exec/dispatch.h"
#include "onepass/exec/graph_session.h"

namespace onepass::testing {

struct SliceRef {
  int buffer = 0;
  int64_t offset = 0;  // elements
  int64_t length = 0;  // elements
};

struct SyntheticNode {
  SliceRef out;
  SliceRef a;
  SliceRef b;  // length 0: no b
  OpKind kind = OpKind::add;
  uint32_t salt = 0;  // unique per node: identifies it after passes reorder the graph
};

class SyntheticGraph {
 public:
  /// `buffers` buffers of 64..`max_elems` u32 values, `nodes` random nodes. About one
  /// node in `non_reorderable_every` gets a kind that stops the reorder lookahead.
  static SyntheticGraph random(uint64_t seed, int buffers, int nodes, int64_t max_elems,
                               int non_reorderable_every = 8);

  /// Allocates the buffers on `backend` and uploads the initial values.
  void upload(Backend& backend);
  /// The dispatch of node i (buffers must be uploaded).
  Dispatch dispatch(const Backend& backend, size_t i) const;
  /// Emits every node through the session (auto barriers decide the ordering).
  void emit(GraphSession& session) const;
  /// Sequential reference: the buffers after running every node in order on the host.
  std::vector<std::vector<uint32_t>> simulate() const;
  /// Current device contents.
  std::vector<std::vector<uint32_t>> download() const;
  /// Resets device contents to the initial values.
  void reset_contents() const;

  const std::vector<SyntheticNode>& nodes() const { return nodes_; }
  size_t node_index_of(const Dispatch& d) const;  // by salt

 private:
  std::vector<std::vector<uint32_t>> initial_;
  std::vector<SyntheticNode> nodes_;
  std::vector<BufferView> device_;
};

}  // namespace onepass::testing
