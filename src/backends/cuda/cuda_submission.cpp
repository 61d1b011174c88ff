// CUDA submissions: dispatches launched on the backend's stream as they come (immediate)
// or collected into a CUDA graph with PDL edges and launched at commit (graph), and the
// replayable executables made from them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "cuda_backend.h"
#include "cuda_check.h"
#include "onepass/core/error.h"
#include "onepass/exec/conflict.h"
#include "onepass/exec/profile.h"

namespace onepass::cuda {
namespace {

uint64_t mix_hash(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

// Event pool-free helper: one event, destroyed with the owner.
struct Event {
  cudaEvent_t event = nullptr;
  Event() { ONEPASS_CUDA_CHECK(cudaEventCreate(&event)); }
  ~Event() {
    if (event) ONEPASS_CUDA_WARN(cudaEventDestroy(event));
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// Waits on `end` and turns a device fault into an Error naming the submission.
void wait_event(cudaEvent_t end, const std::string& label) {
  const cudaError_t status = cudaEventSynchronize(end);
  if (status != cudaSuccess) {
    fail("cuda", "submission '", label.empty() ? "unlabeled" : label, "' failed on the device: ",
         cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  }
}

void check_launch_error(const std::string& what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    fail("cuda", what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  }
}

std::optional<uint64_t> elapsed_ns(cudaEvent_t start, cudaEvent_t end) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, start, end) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
}

void validate_launch(const Dispatch& d) {
  check(d.kernel != nullptr && (d.kernel->cuda != nullptr || d.kernel->cuda_host != nullptr), "cuda", "kernel ",
        d.name(), " has no CUDA entry point");
  const uint64_t threads = d.dims.block.count();
  check(threads >= 1 && threads <= d.kernel->max_threads, "cuda", "kernel ", d.name(), " launched with ",
        threads, " threads per block (max ", d.kernel->max_threads, ")");
  check(d.dims.grid.x >= 1 && d.dims.grid.y >= 1 && d.dims.grid.y <= 65535 && d.dims.grid.z >= 1 &&
            d.dims.grid.z <= 65535,
        "cuda", "kernel ", d.name(), " has an invalid grid ", d.dims.grid.x, "x", d.dims.grid.y, "x",
        d.dims.grid.z);
  check(!d.kernel->cluster_rows || d.dims.grid.x <= kMaxClusterBlocks, "cuda", "kernel ", d.name(),
        " runs in clusters of grid.x blocks, at most ", kMaxClusterBlocks, "; grid.x is ", d.dims.grid.x);
}

// The cluster shape of a Kernel::cluster_rows launch: one row of the grid.
cudaLaunchAttribute cluster_attribute(const Dispatch& d) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = d.dims.grid.x;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  return attribute;
}

// Per-dispatch timing of direct launches (profiling mode).
struct DispatchTiming {
  std::unique_ptr<Event> start, end;
  DispatchSample sample;
};

// Records the per-dispatch samples of a finished run: times relative to `start`.
void record_dispatch_timings(std::vector<DispatchTiming>& timings, cudaEvent_t start, const std::string& label,
                             bool keep) {
  for (DispatchTiming& t : timings) {
    DispatchSample sample = t.sample;
    if (auto s = elapsed_ns(start, t.start->event)) sample.start_ns = *s;
    if (auto e = elapsed_ns(start, t.end->event)) sample.end_ns = *e;
    sample.submission = label;
    Profiler::global().record_dispatch(std::move(sample));
  }
  if (!keep) timings.clear();
}

class CudaExecutable final : public Executable {
 public:
  CudaExecutable(CudaBackend& backend, cudaGraphExec_t exec, size_t dispatches,
                 std::vector<std::shared_ptr<Buffer>> keep_alive, std::string label,
                 std::vector<DispatchTiming> timings)
      : backend_(backend), exec_(exec), dispatches_(dispatches), keep_alive_(std::move(keep_alive)),
        label_(std::move(label)), timings_(std::move(timings)) {
    // Per-dispatch times are relative to the run's start event.
    timing_ = backend.options().profile_submissions || !timings_.empty();
  }
  ~CudaExecutable() override {
    if (launched_) ONEPASS_CUDA_WARN(cudaStreamSynchronize(backend_.stream()));
    ONEPASS_CUDA_WARN(cudaGraphExecDestroy(exec_));
  }

  void launch() override {
    backend_.activate();
    if (timing_) ensure_events();
    if (timing_) ONEPASS_CUDA_CHECK(cudaEventRecord(start_->event, backend_.stream()));
    ONEPASS_CUDA_CHECK(cudaGraphLaunch(exec_, backend_.stream()));
    if (timing_) ONEPASS_CUDA_CHECK(cudaEventRecord(end_->event, backend_.stream()));
    check_launch_error("graph launch of '" + label_ + "'");
    launched_ = true;
    timed_last_ = timing_;
  }

  void wait() override {
    if (!launched_) return;
    if (timed_last_) {
      wait_event(end_->event, label_);
    } else {
      const cudaError_t status = cudaStreamSynchronize(backend_.stream());
      if (status != cudaSuccess) {
        fail("cuda", "replay of '", label_, "' failed on the device: ", cudaGetErrorName(status), " (",
             cudaGetErrorString(status), ")");
      }
    }
    launched_ = false;
    if (timed_last_ && backend_.options().profile_submissions) {
      if (auto ns = gpu_time_ns()) Profiler::global().record_submission({label_.empty() ? "replay" : label_, *ns});
    }
    if (timed_last_ && !timings_.empty()) {
      record_dispatch_timings(timings_, start_->event, label_.empty() ? "replay" : label_, true);
    }
  }

  std::optional<uint64_t> gpu_time_ns() const override {
    if (!timed_last_ || !start_) return std::nullopt;
    return elapsed_ns(start_->event, end_->event);
  }
  void set_timing(bool on) override {
    timing_ = on || backend_.options().profile_submissions || !timings_.empty();
  }
  size_t dispatch_count() const override { return dispatches_; }

 private:
  void ensure_events() {
    if (!start_) {
      start_ = std::make_unique<Event>();
      end_ = std::make_unique<Event>();
    }
  }

  CudaBackend& backend_;
  cudaGraphExec_t exec_;
  size_t dispatches_;
  std::vector<std::shared_ptr<Buffer>> keep_alive_;
  std::string label_;
  bool timing_ = false;
  bool timed_last_ = false;
  bool launched_ = false;
  std::unique_ptr<Event> start_, end_;
  std::vector<DispatchTiming> timings_;
};

class CudaSubmission final : public Submission {
 public:
  CudaSubmission(CudaBackend& backend, SubmitMode mode, std::string label)
      : backend_(backend), mode_(mode), label_(std::move(label)) {
    backend_.activate();
    if (mode_ == SubmitMode::graph) ONEPASS_CUDA_CHECK(cudaGraphCreate(&graph_, 0));
  }

  ~CudaSubmission() override {
    // Kernels launched directly may still read buffers we keep alive.
    if (launched_ && !waited_) ONEPASS_CUDA_WARN(cudaStreamSynchronize(backend_.stream()));
    if (graph_) ONEPASS_CUDA_WARN(cudaGraphDestroy(graph_));
  }

  void dispatch(const Dispatch& d) override {
    check(!dataflow_, "cuda", "dispatch() after dispatch_after() in one submission");
    check(!committed_, "cuda", "dispatch after commit");
    barrier_mode_ = true;
    if (mode_ == SubmitMode::immediate) {
      launch_now(d);
      return;
    }
    std::vector<cudaGraphNode_t> deps;
    if (join_) deps.push_back(join_);
    const cudaGraphNode_t node = add_kernel_node(d, deps, join_is_kernel_);
    group_.push_back(node);
  }

  void dispatch_after(const Dispatch& d, std::span<const uint32_t> deps) override {
    check(!barrier_mode_, "cuda", "dispatch_after() after dispatch() in one submission");
    check(!committed_, "cuda", "dispatch after commit");
    dataflow_ = true;
    if (mode_ == SubmitMode::immediate) {
      launch_now(d);  // the stream's order satisfies every dependency
      return;
    }
    std::vector<cudaGraphNode_t> nodes;
    for (uint32_t i : deps) {
      check(i < kernel_nodes_.size(), "cuda", "dependency on dispatch ", i, " of ", kernel_nodes_.size());
      nodes.push_back(kernel_nodes_[i]);
    }
    add_kernel_node(d, nodes, !(deps.size() == 1 && node_is_host_[deps.front()]));
  }

  void barrier() override {
    check(!dataflow_, "cuda", "barrier() in a dataflow submission");
    // A single stream orders direct launches already.
    if (mode_ == SubmitMode::immediate || group_.empty()) return;
    if (group_.size() == 1) {
      join_ = group_.front();
      join_is_kernel_ = !is_host_node(join_);
    } else {
      ONEPASS_CUDA_CHECK(cudaGraphAddEmptyNode(&join_, graph_, group_.data(), group_.size()));
      join_is_kernel_ = false;
      key_ = mix_hash(key_, 0xba77u ^ group_.size());
    }
    group_.clear();
  }

  void commit() override {
    check(!committed_, "cuda", "submission committed twice");
    committed_ = true;
    backend_.activate();
    if (mode_ == SubmitMode::immediate) {
      if (!start_) start_events();  // empty submission: still measurable
      ONEPASS_CUDA_CHECK(cudaEventRecord(end_->event, backend_.stream()));
      check_launch_error("submission '" + label_ + "'");
      launched_ = true;
      return;
    }
    start_events();
    if (!kernel_nodes_.empty()) {
      cudaGraphExec_t exec = backend_.instantiate_cached(graph_, key_);
      ONEPASS_CUDA_CHECK(cudaGraphLaunch(exec, backend_.stream()));
    }
    ONEPASS_CUDA_CHECK(cudaEventRecord(end_->event, backend_.stream()));
    check_launch_error("graph launch of '" + label_ + "'");
    launched_ = true;
  }

  void wait() override {
    if (!launched_ || waited_) return;
    wait_event(end_->event, label_);
    waited_ = true;
    record_dispatch_timings(timings_, start_->event, label_, false);
    keep_alive_.clear();
  }

  std::optional<uint64_t> gpu_time_ns() const override {
    if (!waited_ || !start_) return std::nullopt;
    return elapsed_ns(start_->event, end_->event);
  }

  std::unique_ptr<Executable> instantiate() override {
    check(mode_ == SubmitMode::graph, "cuda", "instantiate() needs a graph-mode submission");
    check(!committed_, "cuda", "instantiate() after commit");
    committed_ = true;
    backend_.activate();
    cudaGraphExec_t exec = nullptr;
    ONEPASS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph_, 0));
    ONEPASS_CUDA_CHECK(cudaGraphUpload(exec, backend_.stream()));
    return std::make_unique<CudaExecutable>(backend_, exec, kernel_nodes_.size(), std::move(keep_alive_),
                                            label_, std::move(timings_));
  }

  size_t dispatch_count() const override { return dispatches_; }
  void set_label(std::string_view label) override { label_ = std::string(label); }

 private:
  void start_events() {
    start_ = std::make_unique<Event>();
    end_ = std::make_unique<Event>();
    ONEPASS_CUDA_CHECK(cudaEventRecord(start_->event, backend_.stream()));
  }

  void keep(const Dispatch& d) {
    keep_alive_.insert(keep_alive_.end(), d.retained.begin(), d.retained.end());
    ++dispatches_;
  }

  void launch_now(const Dispatch& d) {
    validate_launch(d);
    if (!start_) start_events();
    keep(d);
    const bool profile = backend_.options().profile_dispatches;
    DispatchTiming timing;
    if (profile) {
      timing.start = std::make_unique<Event>();
      timing.end = std::make_unique<Event>();
      ONEPASS_CUDA_CHECK(cudaEventRecord(timing.start->event, backend_.stream()));
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(d.dims.grid.x, d.dims.grid.y, d.dims.grid.z);
    config.blockDim = dim3(d.dims.block.x, d.dims.block.y, d.dims.block.z);
    config.dynamicSmemBytes = d.dims.shared_bytes;
    config.stream = backend_.stream();
    cudaLaunchAttribute attributes[2]{};
    config.attrs = attributes;
    // Early launch needs the predecessor on the same stream to be a kernel too; events
    // recorded for profiling in between would serialise it anyway.
    const bool early_ok = !early_reads_conflict(last_writes_, d);
    last_writes_ = d.writes;
    if (d.kernel->cuda_host) {
      backend_.run_host(d, backend_.stream());
    } else {
      if (d.kernel->pdl && backend_.options().pdl && !profile && dispatches_ > 1 && early_ok) {
        cudaLaunchAttribute& a = attributes[config.numAttrs++];
        a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        a.val.programmaticStreamSerializationAllowed = 1;
      }
      if (d.kernel->cluster_rows) attributes[config.numAttrs++] = cluster_attribute(d);
      void* params[1] = {const_cast<void*>(d.args_data())};
      const cudaError_t status = cudaLaunchKernelExC(&config, d.kernel->cuda, params);
      if (status != cudaSuccess) {
        fail("cuda", "launch of ", d.name(), " (grid ", d.dims.grid.x, "x", d.dims.grid.y, "x", d.dims.grid.z,
             ", block ", d.dims.block.x, "x", d.dims.block.y, "x", d.dims.block.z, ", smem ", d.dims.shared_bytes,
             ") failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
      }
    }
    launched_ = true;
    if (profile) {
      ONEPASS_CUDA_CHECK(cudaEventRecord(timing.end->event, backend_.stream()));
      timing.sample = describe_dispatch(d, static_cast<uint32_t>(dispatches_ - 1));
      timings_.push_back(std::move(timing));
    }
  }

  cudaGraphNode_t add_kernel_node(const Dispatch& d, const std::vector<cudaGraphNode_t>& deps,
                                  bool deps_are_kernels) {
    validate_launch(d);
    keep(d);
    if (d.kernel->cuda_host) return add_host_node(d, deps);
    cudaGraphNodeParams params{};
    params.type = cudaGraphNodeTypeKernel;
    params.kernel.func = const_cast<void*>(d.kernel->cuda);
    params.kernel.gridDim = dim3(d.dims.grid.x, d.dims.grid.y, d.dims.grid.z);
    params.kernel.blockDim = dim3(d.dims.block.x, d.dims.block.y, d.dims.block.z);
    params.kernel.sharedMemBytes = d.dims.shared_bytes;
    void* args[1] = {const_cast<void*>(d.args_data())};
    params.kernel.kernelParams = args;
    const bool profile = backend_.options().profile_dispatches;
    DispatchTiming timing;
    const std::vector<cudaGraphNode_t> kernel_deps = timing_start(deps, timing);
    // Programmatic edges let a PDL-aware kernel launch while its single kernel
    // predecessor finishes; it waits (griddepcontrol.wait) before touching memory.
    // Not after a kernel writing what this one reads before its wait (early_reads).
    bool programmatic =
        !profile && d.kernel->pdl && backend_.options().pdl && deps.size() == 1 && deps_are_kernels;
    if (programmatic && !d.early_reads.empty()) {
      const auto dep = std::find(kernel_nodes_.begin(), kernel_nodes_.end(), deps.front());
      programmatic = dep != kernel_nodes_.end() &&
                     !early_reads_conflict(node_writes_[static_cast<size_t>(dep - kernel_nodes_.begin())], d);
    }
    std::vector<cudaGraphEdgeData> edges(kernel_deps.size());
    for (cudaGraphEdgeData& e : edges) {
      std::memset(&e, 0, sizeof e);
      if (programmatic) {
        e.type = cudaGraphDependencyTypeProgrammatic;
        e.from_port = cudaGraphKernelNodePortProgrammatic;
      }
    }
    cudaGraphNode_t node = nullptr;
    ONEPASS_CUDA_CHECK(cudaGraphAddNode(&node, graph_, kernel_deps.empty() ? nullptr : kernel_deps.data(),
                                        kernel_deps.empty() ? nullptr : edges.data(), kernel_deps.size(), &params));
    if (d.kernel->cluster_rows) {
      const cudaLaunchAttribute cluster = cluster_attribute(d);
      ONEPASS_CUDA_CHECK(cudaGraphKernelNodeSetAttribute(node, cluster.id, &cluster.val));
    }
    timing_end(d, node, timing);
    // Topology key: kernel, launch shape and dependency structure (arguments excluded:
    // a graph differing only in arguments is updated in place).
    key_ = mix_hash(key_, reinterpret_cast<uint64_t>(d.kernel->cuda));
    key_ = mix_hash(key_, d.dims.grid.count() * 1315423911u + d.dims.block.count());
    key_ = mix_hash(key_, (uint64_t{d.dims.grid.x} << 32) ^ d.dims.grid.y ^ (uint64_t{d.dims.shared_bytes} << 16));
    key_ = mix_hash(key_, deps.size() * 2 + (programmatic ? 1 : 0));
    return add_dispatch_node(d, node, deps, false);
  }

  // Profiling: an event recorded before (after the dispatch's dependencies) and after each
  // dispatch gives per-dispatch GPU timestamps inside the graph. timing_start returns the
  // dependencies of the dispatch's own node.
  std::vector<cudaGraphNode_t> timing_start(const std::vector<cudaGraphNode_t>& deps, DispatchTiming& timing) {
    if (!backend_.options().profile_dispatches) return deps;
    timing.start = std::make_unique<Event>();
    timing.end = std::make_unique<Event>();
    cudaGraphNode_t before = nullptr;
    ONEPASS_CUDA_CHECK(cudaGraphAddEventRecordNode(&before, graph_, deps.empty() ? nullptr : deps.data(), deps.size(),
                                                   timing.start->event));
    return {before};
  }
  void timing_end(const Dispatch& d, cudaGraphNode_t node, DispatchTiming& timing) {
    if (!backend_.options().profile_dispatches) return;
    cudaGraphNode_t after = nullptr;
    ONEPASS_CUDA_CHECK(cudaGraphAddEventRecordNode(&after, graph_, &node, 1, timing.end->event));
    timing.sample = describe_dispatch(d, static_cast<uint32_t>(kernel_nodes_.size()));
    timings_.push_back(std::move(timing));
  }

  // Records the node of dispatch d: its dependencies (by dispatch index) in the topology key,
  // and what later dispatches look up.
  cudaGraphNode_t add_dispatch_node(const Dispatch& d, cudaGraphNode_t node, const std::vector<cudaGraphNode_t>& deps,
                                    bool host) {
    for (cudaGraphNode_t dep : deps) {
      const auto it = std::find(kernel_nodes_.begin(), kernel_nodes_.end(), dep);
      key_ = mix_hash(key_, it == kernel_nodes_.end() ? 0xffffu : static_cast<uint64_t>(it - kernel_nodes_.begin()));
    }
    kernel_nodes_.push_back(node);
    node_writes_.push_back(d.writes);
    node_is_host_.push_back(host);
    return node;
  }

  bool is_host_node(cudaGraphNode_t node) const {
    const auto it = std::find(kernel_nodes_.begin(), kernel_nodes_.end(), node);
    return it != kernel_nodes_.end() && node_is_host_[static_cast<size_t>(it - kernel_nodes_.begin())];
  }

  // A host entry point (Kernel::cuda_host) as a child-graph node: its work captured on the
  // backend's capture stream. It also depends on the previous host node, so host entry
  // points never run concurrently (they share the backend's cuBLAS workspace and scratch).
  // Kernels after it wait for it with ordinary edges (no early launch into a child graph).
  cudaGraphNode_t add_host_node(const Dispatch& d, const std::vector<cudaGraphNode_t>& deps) {
    DispatchTiming timing;
    std::vector<cudaGraphNode_t> node_deps = timing_start(deps, timing);
    if (last_host_node_ && std::find(node_deps.begin(), node_deps.end(), last_host_node_) == node_deps.end()) {
      node_deps.push_back(last_host_node_);
    }
    cudaGraph_t child = backend_.capture_host(d);
    cudaGraphNode_t node = nullptr;
    const cudaError_t status = cudaGraphAddChildGraphNode(&node, graph_, node_deps.empty() ? nullptr : node_deps.data(),
                                                          node_deps.size(), child);
    ONEPASS_CUDA_WARN(cudaGraphDestroy(child));  // the node holds a copy
    ONEPASS_CUDA_CHECK(status);
    timing_end(d, node, timing);
    // Topology key: the host function and its arguments (what it captured depends on them).
    key_ = mix_hash(key_, reinterpret_cast<uint64_t>(d.kernel->cuda_host));
    for (size_t i = 0; i < d.args_size; i += 8) {
      uint64_t word = 0;
      std::memcpy(&word, d.args.data() + i, std::min<size_t>(8, d.args_size - i));
      key_ = mix_hash(key_, word);
    }
    key_ = mix_hash(key_, node_deps.size());
    last_host_node_ = node;
    return add_dispatch_node(d, node, node_deps, true);
  }

  CudaBackend& backend_;
  SubmitMode mode_;
  std::string label_;
  bool barrier_mode_ = false;
  bool dataflow_ = false;
  bool committed_ = false;
  bool launched_ = false;
  bool waited_ = false;
  size_t dispatches_ = 0;
  std::vector<MemRange> last_writes_;  // immediate mode: the previous launch's declared writes
  std::vector<std::shared_ptr<Buffer>> keep_alive_;
  std::unique_ptr<Event> start_, end_;
  std::vector<DispatchTiming> timings_;
  // Graph mode.
  cudaGraph_t graph_ = nullptr;
  std::vector<cudaGraphNode_t> kernel_nodes_;
  std::vector<std::vector<MemRange>> node_writes_;  // declared writes of each kernel node
  std::vector<bool> node_is_host_;                   // host entry point (child graph), not a kernel
  cudaGraphNode_t last_host_node_ = nullptr;
  std::vector<cudaGraphNode_t> group_;
  cudaGraphNode_t join_ = nullptr;
  bool join_is_kernel_ = false;
  uint64_t key_ = 0x6f6e6570617373ull;
};

}  // namespace

std::unique_ptr<Submission> make_cuda_submission(CudaBackend& backend, SubmitMode mode, std::string label) {
  return std::make_unique<CudaSubmission>(backend, mode, std::move(label));
}

}  // namespace onepass::cuda
