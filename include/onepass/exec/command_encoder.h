// CommandEncoder: owns one submission (the seeds' command buffer + persistent compute
// encoder). Direct mode hands dispatches to the backend as they come; capture mode
// records them as graph nodes instead.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "onepass/exec/backend.h"
#include "onepass/exec/conflict.h"
#include "onepass/exec/dispatch.h"

namespace onepass {

enum class EncoderMode : uint8_t {
  direct,   // dispatches go to the backend as they are encoded
  capture,  // dispatches and barriers are recorded; nothing runs until replayed
};

class CommandEncoder {
 public:
  /// A fresh encoder over a new submission of `submit_mode` (direct mode only).
  explicit CommandEncoder(Backend& backend, EncoderMode mode = EncoderMode::direct,
                          SubmitMode submit_mode = SubmitMode::immediate);
  /// An uncommitted submission is dropped without running; never throws.
  ~CommandEncoder();
  CommandEncoder(CommandEncoder&&) noexcept;
  CommandEncoder& operator=(CommandEncoder&&) = delete;
  CommandEncoder(const CommandEncoder&) = delete;

  Backend& backend() const { return *backend_; }
  const Options& options() const { return backend_->options(); }

  // --- capture -----------------------------------------------------------------------
  /// Switches to capture mode: later dispatches and barriers are recorded.
  void start_capture();
  bool is_capturing() const { return capturing_; }
  /// The recorded nodes, ending capture mode (empty when not capturing).
  std::vector<Node> take_capture();

  // --- annotations for the next dispatch (the seeds' pending state) -------------------
  /// Tags the next dispatch whose kind is `other` with `kind`.
  void set_op_kind(OpKind kind) { pending_op_kind_ = kind; }
  /// Ranges attached to the next dispatch that declares none itself.
  void set_pending_ranges(std::vector<MemRange> reads, std::vector<MemRange> writes);
  /// Fills in the last recorded dispatch's reads/writes where they are empty (capture).
  void annotate_last_dispatch_if_missing(std::vector<MemRange> reads,
                                         std::vector<MemRange> writes);

  // --- encoding --------------------------------------------------------------------
  /// Encodes a dispatch as is: no automatic barrier.
  void dispatch(Dispatch d);
  /// Encodes a dispatch after an automatic barrier when its declared ranges conflict
  /// with the open concurrent group (RAW, WAR, WAW) and Options::auto_barrier is on.
  /// Returns true when a barrier was emitted.
  bool dispatch_tracked(Dispatch d);
  /// Encodes a dispatch ordered after exactly the given earlier dispatches of this
  /// encoder (indices in encoding order). Direct mode only.
  void dispatch_after(const Dispatch& d, std::span<const uint32_t> deps);
  /// Everything after waits for everything before.
  void memory_barrier();
  /// Emits a barrier and clears the tracked ranges.
  void force_barrier_and_reset_tracker();
  /// Ranges in the open concurrent group of dispatch_tracked.
  size_t tracked_ranges() const { return tracker_.size(); }
  /// Dispatches encoded so far (direct mode) or recorded (capture mode).
  uint32_t dispatches_encoded() const { return dispatches_encoded_; }

  // --- submission ------------------------------------------------------------------
  /// Starts the encoded work; does not wait.
  void commit();
  /// commit() with a label that names the submission in profiles.
  void commit_labeled(std::string_view label);
  void commit_and_wait();
  void commit_and_wait_labeled(std::string_view label);
  /// Blocks until committed work has finished; throws Error on a device fault.
  void wait_until_completed();
  /// commit_and_wait(), then the submission's GPU time in nanoseconds (0 when the
  /// backend could not measure it).
  uint64_t commit_wait_with_gpu_time();
  /// GPU time of the finished submission, when the backend measured it.
  std::optional<uint64_t> gpu_time_ns() const;
  /// Turns the encoded work into a replayable executable instead of committing it.
  std::unique_ptr<Executable> instantiate();
  bool committed() const { return committed_; }

 private:
  void apply_pending(Dispatch& d);
  void record_submission_profile(std::string_view label);

  Backend* backend_;
  std::unique_ptr<Submission> submission_;
  std::string label_;
  bool capturing_ = false;
  bool committed_ = false;
  bool waited_ = false;
  std::vector<Node> capture_;
  OpKind pending_op_kind_ = OpKind::other;
  std::vector<MemRange> pending_reads_;
  std::vector<MemRange> pending_writes_;
  RangeTracker tracker_;
  uint32_t dispatches_encoded_ = 0;
};

}  // namespace onepass
