#include "onepass/exec/trace_range.h"

#if ONEPASS_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace onepass {

#if ONEPASS_HAVE_CUDA
TraceRange::TraceRange(const char* name) { nvtxRangePushA(name); }
TraceRange::~TraceRange() { nvtxRangePop(); }
#else
TraceRange::TraceRange(const char*) {}
TraceRange::~TraceRange() = default;
#endif

}  // namespace onepass
