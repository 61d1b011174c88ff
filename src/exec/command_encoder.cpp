#include "onepass/exec/command_encoder.h"

#include <chrono>

#include "onepass/core/error.h"
#include "onepass/exec/counters.h"
#include "onepass/exec/profile.h"
#include "onepass/exec/trace_range.h"

namespace onepass {

CommandEncoder::CommandEncoder(Backend& backend, EncoderMode mode, SubmitMode submit_mode)
    : backend_(&backend) {
  submission_ = backend.new_submission(submit_mode, "");
  if (mode == EncoderMode::capture) start_capture();
}

CommandEncoder::~CommandEncoder() = default;

CommandEncoder::CommandEncoder(CommandEncoder&& other) noexcept
    : backend_(other.backend_),
      submission_(std::move(other.submission_)),
      label_(std::move(other.label_)),
      capturing_(other.capturing_),
      committed_(other.committed_),
      waited_(other.waited_),
      capture_(std::move(other.capture_)),
      pending_op_kind_(other.pending_op_kind_),
      pending_reads_(std::move(other.pending_reads_)),
      pending_writes_(std::move(other.pending_writes_)),
      tracker_(std::move(other.tracker_)),
      dispatches_encoded_(other.dispatches_encoded_) {}

void CommandEncoder::start_capture() {
  capturing_ = true;
  capture_.clear();
}

std::vector<Node> CommandEncoder::take_capture() {
  capturing_ = false;
  return std::move(capture_);
}

void CommandEncoder::set_pending_ranges(std::vector<MemRange> reads,
                                        std::vector<MemRange> writes) {
  pending_reads_ = std::move(reads);
  pending_writes_ = std::move(writes);
}

void CommandEncoder::annotate_last_dispatch_if_missing(std::vector<MemRange> reads,
                                                       std::vector<MemRange> writes) {
  if (!capturing_ || capture_.empty()) return;
  Dispatch* last = as_dispatch(capture_.back());
  if (last == nullptr) return;
  if (last->reads.empty() && !reads.empty()) last->reads = std::move(reads);
  if (last->writes.empty() && !writes.empty()) last->writes = std::move(writes);
}

void CommandEncoder::apply_pending(Dispatch& d) {
  if (d.op_kind == OpKind::other) d.op_kind = pending_op_kind_;
  pending_op_kind_ = OpKind::other;
  if (d.reads.empty() && d.writes.empty()) {
    d.reads = std::move(pending_reads_);
    d.writes = std::move(pending_writes_);
  }
  pending_reads_.clear();
  pending_writes_.clear();
  if (options().unretained_refs) d.retained.clear();
}

void CommandEncoder::dispatch(Dispatch d) {
  check(d.kernel != nullptr, "CommandEncoder", "dispatch without a kernel");
  check(!committed_ || capturing_, "CommandEncoder", "dispatch after commit");
  apply_pending(d);
  ++dispatches_encoded_;
  if (capturing_) {
    capture_.emplace_back(std::move(d));
    return;
  }
  submission_->dispatch(d);
  detail::bump(detail::global_counters().dispatches);
}

bool CommandEncoder::dispatch_tracked(Dispatch d) {
  bool barrier = false;
  if (options().auto_barrier) {
    apply_pending(d);  // ranges may come from set_pending_ranges
    if (!d.annotated()) {
      barrier = dispatches_encoded_ > 0;
      if (barrier) memory_barrier();
      tracker_.reset();
      tracker_.add_everything();
    } else if (tracker_.conflicts(d.reads, d.writes)) {
      memory_barrier();
      barrier = true;
      tracker_.add(d.reads, d.writes);
    } else {
      tracker_.add(d.reads, d.writes);
    }
    auto& c = detail::global_counters();
    detail::bump(barrier ? c.auto_barriers : c.concurrent_dispatches);
  }
  dispatch(std::move(d));
  return barrier;
}

void CommandEncoder::dispatch_after(const Dispatch& d, std::span<const uint32_t> deps) {
  check(!capturing_, "CommandEncoder", "dispatch_after is not recordable; record plain dispatches");
  check(!committed_, "CommandEncoder", "dispatch after commit");
  for (uint32_t dep : deps) {
    check(dep < dispatches_encoded_, "CommandEncoder", "dependency on dispatch ", dep,
          " which is not encoded yet (", dispatches_encoded_, " so far)");
  }
  Dispatch copy = d;
  apply_pending(copy);
  submission_->dispatch_after(copy, deps);
  ++dispatches_encoded_;
  detail::bump(detail::global_counters().dispatches);
}

void CommandEncoder::memory_barrier() {
  tracker_.reset();
  if (capturing_) {
    capture_.emplace_back(Barrier{});
    return;
  }
  // Like a Metal barrier before the first dispatch, one before any work is a no-op.
  if (dispatches_encoded_ == 0) return;
  auto& c = detail::global_counters();
  detail::bump(c.barriers);
  if (options().profile_barriers) {
    const auto start = std::chrono::steady_clock::now();
    submission_->barrier();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start);
    detail::bump(c.barrier_ns, static_cast<uint64_t>(ns.count()));
  } else {
    submission_->barrier();
  }
}

void CommandEncoder::force_barrier_and_reset_tracker() {
  memory_barrier();
  tracker_.reset();
}

void CommandEncoder::commit() {
  if (capturing_) return;  // nothing was sent to the device
  check(!committed_, "CommandEncoder", "submission committed twice");
  committed_ = true;
  if (!label_.empty()) submission_->set_label(label_);
  const TraceRange range(label_.empty() ? "onepass.commit" : label_.c_str());
  submission_->commit();
  detail::bump(detail::global_counters().submissions);
}

void CommandEncoder::commit_labeled(std::string_view label) {
  label_ = std::string(label);
  if (options().profile_submissions) {
    // Profiling needs the GPU time, which is known only once the work has finished.
    commit_and_wait_labeled(label);
    return;
  }
  commit();
}

void CommandEncoder::commit_and_wait() {
  commit();
  wait_until_completed();
}

void CommandEncoder::commit_and_wait_labeled(std::string_view label) {
  label_ = std::string(label);
  commit_and_wait();
}

void CommandEncoder::wait_until_completed() {
  if (capturing_ || !committed_ || waited_) return;
  waited_ = true;
  detail::bump(detail::global_counters().syncs);
  submission_->wait();
  if (options().profile_submissions) record_submission_profile(label_);
}

void CommandEncoder::record_submission_profile(std::string_view label) {
  const auto ns = submission_->gpu_time_ns();
  if (ns) Profiler::global().record_submission({std::string(label.empty() ? "unlabeled" : label), *ns});
}

uint64_t CommandEncoder::commit_wait_with_gpu_time() {
  commit_and_wait();
  return submission_ ? submission_->gpu_time_ns().value_or(0) : 0;
}

std::optional<uint64_t> CommandEncoder::gpu_time_ns() const {
  if (!submission_ || !waited_) return std::nullopt;
  return submission_->gpu_time_ns();
}

std::unique_ptr<Executable> CommandEncoder::instantiate() {
  check(!capturing_, "CommandEncoder", "instantiate() of a capturing encoder");
  check(!committed_, "CommandEncoder", "instantiate() after commit");
  committed_ = true;
  waited_ = true;
  if (!label_.empty()) submission_->set_label(label_);
  return submission_->instantiate();
}

}  // namespace onepass
