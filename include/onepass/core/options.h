// Runtime switches. Environment variables (ONEPASS_*) only fill the defaults, once per
// process; code may build an Options value directly instead.
#pragma once

#include <string>

namespace onepass {

/// How the CPU backend runs the dispatches between two barriers.
enum class CpuSchedule {
  sequential,  // one after the other, in order
  concurrent,  // all at once on the thread pool, in reverse order, so a missing barrier
               // gives a wrong result (and a ThreadSanitizer report) as on a GPU
};

struct Options {
  // --- execution -------------------------------------------------------------------
  /// Auto-barriers from read/write ranges in tracked dispatches (seeds: HF2Q_AUTO_BARRIER).
  /// ONEPASS_AUTO_BARRIER=0 turns it off; then only explicit barriers order work.
  bool auto_barrier = true;
  /// Keep no shared ownership of bound buffers in submissions and recorded graphs
  /// (seeds: MLX_UNRETAINED_REFS). The caller must keep every bound buffer alive until
  /// the work has finished. ONEPASS_UNRETAINED_REFS=1.
  bool unretained_refs = false;
  /// Run dispatches strictly one after another (seeds: HF2Q_FORCE_SERIAL_DISPATCH).
  /// ONEPASS_FORCE_SERIAL=1.
  bool force_serial = false;
  /// CPU backend schedule (ONEPASS_CPU_SCHEDULE=sequential|concurrent).
  CpuSchedule cpu_schedule = CpuSchedule::concurrent;
  /// CPU worker threads, 0 = one per hardware thread (ONEPASS_THREADS).
  int cpu_threads = 0;
  /// Programmatic dependent launch between dependent kernels on Hopper (ONEPASS_PDL=0 off).
  bool pdl = true;
  /// CUDA matrix-matrix products of many rows (prefill) through cuBLAS on f16/bf16
  /// operands (block formats dequantized to f16 first) instead of onepass's own
  /// tensor-core kernels (ONEPASS_CUBLAS=0 off).
  bool cublas = true;

  // --- graph passes ----------------------------------------------------------------
  bool fuse = true;              // ONEPASS_NO_FUSE=1 skips the fusion pass
  bool reorder = true;           // ONEPASS_NO_REORDER=1 skips the reorder pass
  bool dump_graph = false;       // ONEPASS_DUMP_GRAPH=1 prints the graph after each pass
  bool check_annotations = false;  // ONEPASS_CHECK_ANNOTATIONS=1: verify each dispatch
                                   // writes nothing outside its declared writes (CPU)
  bool graph_diag = false;       // ONEPASS_GRAPH_DIAG=1 prints pass timings (HF2Q_GRAPH_DIAG)

  // --- profiling -------------------------------------------------------------------
  bool profile_submissions = false;  // ONEPASS_PROFILE_CB=1 (MLX_PROFILE_CB)
  bool profile_dispatches = false;   // ONEPASS_PROFILE_DISPATCH=1 (MLX_PROFILE_DISPATCH)
  bool profile_barriers = false;     // ONEPASS_PROFILE_BARRIERS=1 (MLX_PROFILE_BARRIERS)

  /// Defaults overridden by the ONEPASS_* environment variables.
  static Options from_env();
  /// from_env(), read once per process.
  static const Options& defaults();
  /// One line per switch, for --verbose output and bug reports.
  std::string describe() const;
};

}  // namespace onepass
