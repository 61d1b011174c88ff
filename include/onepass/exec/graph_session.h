// GraphExecutor / GraphSession: one forward pass, encoded into one submission. Every op
// is a method; barriers are inferred from what each op reads and writes.
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

namespace ops {
// Parameter structs of the ops, defined in include/onepass/ops/.
struct SoftmaxParams;
struct RopeParams;
struct AttentionParams;
enum class KvHistory : uint8_t;  // {} is after_wait
struct MatmulIdParams;
}  // namespace ops

/// What a finish variant did and how long it took. Fields a variant does not measure
/// stay zero.
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
  /// Commits and waits. Recorded sessions replay their graph sequentially.
  void finish();
  /// Commits without waiting and hands back the encoder to wait on.
  CommandEncoder commit();
  FinishStats finish_with_timing();
  /// GPU time of the submission in ns (0 where not measurable).
  uint64_t finish_with_gpu_time();
  /// Recorded: fuse, then encode sequentially.
  FinishStats finish_with_fusion();
  FinishStats finish_with_fusion_and_timing();
  /// Recorded: fuse, reorder, encode with recomputed barriers.
  FinishStats finish_with_fusion_and_reorder();
  FinishStats finish_with_fusion_reorder_and_timing();
  /// Recorded: fuse, reorder (when every dispatch is annotated), dual-buffer encode.
  FinishStats finish_optimized();
  FinishStats finish_optimized_with_timing();
  /// Recorded: fuse, then encode as an exact dataflow DAG (beyond the seeds).
  FinishStats finish_dataflow();
  /// Recorded: the graph, unrun (for CapturedGraph). The session is done afterwards.
  ComputeGraph take_graph();
  /// Marks a tensor as an output of the pass: fusion keeps it materialised.
  void keep(const TensorView& t);

  // --- ops (defined in src/ops/; semantics in DESIGN.md §6) --------------------------
  // Shapes: outermost first. Activations f32/f16/bf16 unless noted.

  /// out = x / rms(x) * weight over the last dim.
  void rms_norm(const TensorView& x, const TensorView& weight, const TensorView& out, float eps);
  /// out = x / rms(x).
  void rms_norm_no_weight(const TensorView& x, const TensorView& out, float eps);
  /// out = x / rms(x) * weight * scale (scale same shape as out or one row).
  void rms_norm_mul(const TensorView& x, const TensorView& weight, const TensorView& scale,
                    const TensorView& out, float eps);
  /// sum = a + b; out = sum / rms(sum) * weight (residual add fused with the next norm).
  void add_rms_norm(const TensorView& a, const TensorView& b, const TensorView& sum,
                    const TensorView& weight, const TensorView& out, float eps);
  /// out = a + b; b has a's shape or is one row broadcast over a's rows.
  void add(const TensorView& a, const TensorView& b, const TensorView& out);
  /// out = a * b; broadcast as add.
  void mul(const TensorView& a, const TensorView& b, const TensorView& out);
  /// out = x * factor.
  void scale(const TensorView& x, float factor, const TensorView& out);
  /// out = gelu(x), tanh approximation.
  void gelu(const TensorView& x, const TensorView& out);
  /// out = x * sigmoid(x).
  void silu(const TensorView& x, const TensorView& out);
  /// out = silu(a) * b.
  void silu_mul(const TensorView& a, const TensorView& b, const TensorView& out);
  /// out = tanh(x / cap) * cap.
  void softcap(const TensorView& x, float cap, const TensorView& out);
  /// Row softmax with f32 accumulation, optional scale and causal mask.
  void softmax(const TensorView& x, const TensorView& out, const ops::SoftmaxParams& params);
  /// RoPE over x [tokens, heads, head_dim] with positions (i32 [tokens]) from a buffer.
  void rope(const TensorView& x, const TensorView& out, const TensorView& positions,
            const ops::RopeParams& params);
  /// Causal grouped-query attention for a batch of queries q [tokens, n_head, head_dim]
  /// over caches k, v [n_kv_head, ctx, head_dim]; query t sees keys 0..positions[t].
  void sdpa(const TensorView& q, const TensorView& k, const TensorView& v,
            const TensorView& positions, const TensorView& out,
            const ops::AttentionParams& params);
  /// One query token q [n_head, head_dim] over caches k, v [n_kv_head, ctx, head_dim]
  /// with the number of valid keys read from kv_length (i32 [1]); split over the KV
  /// length, merged with log-sum-exp. `scratch` holds the partial results
  /// (flash_decode_scratch_bytes()) on the CPU; on CUDA one cluster kernel merges them in
  /// shared memory and scratch is checked but unused (kv_length is read there before the
  /// PDL wait, an early read: never launched early after a dispatch writing it).
  /// `prefetch_l2` (optional, read-only for the pass; ignored on the CPU): data that later
  /// dispatches read, requested into the GPU's L2 while the attention runs. `history`
  /// (ignored on the CPU): whether the keys below kv_length - 1 may be read before the PDL
  /// wait (ops::KvHistory::before_wait is the caller's promise about the dispatch before).
  void flash_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& kv_length, const TensorView& out,
                    const BufferView& scratch, const ops::AttentionParams& params,
                    const BufferView& prefetch_l2 = {},
                    ops::KvHistory history = {});
  /// RoPE on q [tokens, n_head, head_dim] in place, and RoPE'd k and v [tokens, n_kv_head,
  /// head_dim] written into the caches at positions: rope + rope + kv_write + kv_write in
  /// one dispatch (the decode step's attention inputs).
  void rope_kv_write(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
                     const TensorView& v_cache, const TensorView& positions, const ops::RopeParams& params);
  /// Writes src [tokens, n_kv_head, head_dim] into cache [n_kv_head, ctx, head_dim] at
  /// the rows given by positions (i32 [tokens]), converting to the cache dtype.
  void kv_write(const TensorView& src, const TensorView& cache, const TensorView& positions);
  /// out[t] = table[ids[t]] converted to out's dtype; table may be quantized.
  void embedding(const TensorView& table, const TensorView& ids, const TensorView& out);
  /// Copy with conversion between f32, f16 and bf16 (same number of elements).
  void copy(const TensorView& src, const TensorView& dst);
  /// Raw byte copy of src into dst (same size); e.g. the per-step inputs of a replayed
  /// graph from host-visible memory into device memory.
  void copy_bytes(const BufferView& src, const BufferView& dst);
  /// out[r] = index of the largest value of row r (i32; lowest index on ties).
  void argmax(const TensorView& x, const TensorView& out);
  /// Greedy decoding on the device (ops::FeedTokenArgs): token [1] (an argmax) becomes
  /// the next step's input id, positions and kv_length advance by one, and the token is
  /// recorded at history[position + 1]. All i32; history may be empty.
  void feed_token(const TensorView& token, const TensorView& ids, const TensorView& positions,
                  const TensorView& kv_length, const TensorView& history);
  /// out [M, N] = x [M, K] · wᵀ, w [N, K] in f32/f16/bf16 or a GGML block format;
  /// f32 accumulation.
  void matmul(const TensorView& x, const TensorView& w, const TensorView& out);
  /// MLX affine quantized matmul: w packed u32 [N, K*bits/32], scales and biases
  /// [N, K/group] in the format's scale dtype.
  void matmul_affine(const TensorView& x, const TensorView& w, const TensorView& scales,
                     const TensorView& biases, const TensorView& out, const AffineFormat& format);
  /// Expert-routed matmul (MoE): see ops/matmul_id.h.
  void matmul_id(const TensorView& x, const TensorView& w, const TensorView& ids,
                 const TensorView& out, const BufferView& scratch,
                 const ops::MatmulIdParams& params);

 private:
  void close_group();
  void emit_barrier();
  FinishStats finish_graph(bool fuse, bool reorder, int encoding, bool measure);
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
