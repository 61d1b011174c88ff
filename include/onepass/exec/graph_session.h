// GraphExecutor / GraphSession: one forward pass, encoded into one submission. Ops
// (include/onepass/ops/) append dispatches through GraphSession::dispatch; barriers are
// inferred from what each dispatch reads and writes.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "onepass/core/dtype.h"
#include "onepass/core/tensor.h"
#include "onepass/exec/backend.h"
#include "onepass/exec/command_encoder.h"
#include "onepass/exec/compute_graph.h"
#include "onepass/exec/conflict.h"

namespace onepass {

/// How a recorded session's graph is encoded into submissions.
enum class Encoding : uint8_t {
  sequential,     // one dispatch after another
  with_barriers,  // barriers recomputed from the ranges (concurrent groups between them)
  dual_buffer,    // with barriers, split into two submissions (the seeds' encode_dual_buffer)
  dataflow,       // an exact dependency DAG
};

/// What GraphSession::finish does with a recorded session's graph.
struct FinishOptions {
  bool fuse = false;     // the fusion pass (Options::fuse can still turn it off)
  bool reorder = false;  // the reorder pass (Options::reorder can still turn it off)
  Encoding encoding = Encoding::sequential;
  bool measure = false;  // device time of the submission(s) into FinishStats::gpu_ns
};

/// What finish did and how long it took. Fields it does not measure stay zero.
struct FinishStats {
  uint64_t encoding_ns = 0;   // begin() to the start of the final commit (host)
  uint64_t wait_ns = 0;       // commit to completion (host)
  uint64_t gpu_ns = 0;        // device time of the submission(s)
  uint32_t fusions = 0;
  uint32_t nodes_reordered = 0;
  uint32_t barriers = 0;          // barriers encoded (sequential / with_barriers)
  uint32_t barriers_first = 0;    // dual buffer: barriers in the first submission
  uint32_t barriers_second = 0;   // dual buffer: barriers in the second submission
  size_t dispatches = 0;
  size_t dataflow_edges = 0;
};

/// Histogram of concurrent group sizes: groups[i] = groups of i+1 dispatches (the last
/// bucket counts groups of 8 or more).
struct GroupStats {
  uint32_t dispatches = 0;
  uint32_t barriers = 0;
  std::array<uint32_t, 8> groups{};
  uint32_t group_count() const;
  std::string describe() const;
};

class GraphSession;

/// Creates sessions on one backend (the seeds' GraphExecutor).
class GraphExecutor {
 public:
  explicit GraphExecutor(std::shared_ptr<Backend> backend);
  /// A session whose ops are launched as they are called.
  GraphSession begin();
  /// A session whose ops are recorded into a ComputeGraph and run at finish.
  GraphSession begin_recorded();
  Backend& backend() const { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const { return backend_; }

 private:
  std::shared_ptr<Backend> backend_;
};

class GraphSession {
 public:
  GraphSession(std::shared_ptr<Backend> backend, bool recording);
  GraphSession(GraphSession&&) noexcept;
  GraphSession& operator=(GraphSession&&) = delete;
  ~GraphSession();

  Backend& backend() const { return *backend_; }
  CommandEncoder& encoder() { return encoder_; }
  bool is_recording() const { return recording_; }

  // --- ordering ----------------------------------------------------------------------
  /// Unconditional barrier.
  void barrier();
  /// Barrier only when the next dispatch (reading `reads`, writing `writes`) conflicts
  /// with the open concurrent group; in recording mode the ranges are attached to it.
  void barrier_between(std::span<const MemRange> reads, std::span<const MemRange> writes);
  /// Adds a dispatch's ranges to the open group (and annotates it when recording) for
  /// dispatches encoded without barrier_between.
  void track_dispatch(std::span<const MemRange> reads, std::span<const MemRange> writes);
  /// Encodes one dispatch with barrier_between applied to its declared ranges (unless
  /// Options::auto_barrier is off). Every op goes through here.
  void dispatch(Dispatch d);
  uint32_t barrier_count() const { return barriers_; }
  uint32_t dispatch_count() const { return dispatches_; }
  GroupStats group_stats() const;
  /// Prints group_stats() to stderr.
  void dump_group_stats() const;

  // --- finishing (each consumes the session's work; call exactly one) ---------------
  /// Commits and waits. A recorded session's graph runs through the passes the options
  /// name and is encoded as they say; a direct session has run its ops already.
  FinishStats finish(const FinishOptions& options = {});
  /// The seeds' finish_optimized: fuse, reorder (when every dispatch is annotated),
  /// dual-buffer encoding.
  FinishStats finish_optimized();
  /// Commits without waiting and hands back the encoder to wait on.
  CommandEncoder commit();
  /// Recorded: the graph, unrun (for CapturedGraph). The session is done afterwards.
  ComputeGraph take_graph();
  /// Marks a tensor as an output of the pass: fusion keeps it materialised.
  void keep(const TensorView& t);

 private:
  void close_group();
  void emit_barrier();
  FinishStats finish_graph(const FinishOptions& options);
  void ensure_open(const char* what) const;

  std::shared_ptr<Backend> backend_;
  CommandEncoder encoder_;
  bool recording_;
  bool finished_ = false;
  RangeTracker tracker_;
  std::vector<MemRange> keep_;
  uint32_t barriers_ = 0;
  uint32_t dispatches_ = 0;
  uint32_t in_group_ = 0;
  std::array<uint32_t, 8> group_sizes_{};
  std::chrono::steady_clock::time_point begun_;
};

}  // namespace onepass
