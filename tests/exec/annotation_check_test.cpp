// ONEPASS_CHECK_ANNOTATIONS on the CPU backend: a dispatch that writes outside its declared
// writes is reported naming it; declared writes, in any number of dispatches of a launch,
// pass.
#include <gtest/gtest.h>

#include "onepass/core/error.h"
#include "onepass/exec/graph_session.h"
#include "support/synthetic.h"
#include "support/testing.h"

namespace onepass {
namespace {

constexpr int64_t kValues = 2 * testing::kMixBlock;

// test_mix_u32 over all of `out` from `in`, declaring `declared` as its write.
Dispatch mix(Backend& backend, BufferView in, BufferView out, BufferView declared, const char* label) {
  testing::MixArgs args{};
  args.a = static_cast<const uint32_t*>(in.data());
  args.out = static_cast<uint32_t*>(out.data());
  args.n = kValues;
  args.salt = 5;
  Dispatch d(backend.registry().get("test_mix_u32"), LaunchDims{{2, 1, 1}, {1, 1, 1}, 0}, args,
             OpKind::add, label);
  d.read(in);
  d.write(declared);
  return d;
}

struct Buffers {
  std::shared_ptr<Backend> backend;
  BufferView a, b, c;
  explicit Buffers(bool check) {
    Options options = testing::test_options();
    options.check_annotations = check;
    backend = testing::cpu_backend(options);
    a = backend->alloc(kValues * 4);
    b = backend->alloc(kValues * 4);
    c = backend->alloc(kValues * 4);
    a.write(testing::random_u32(kValues, 1));
    b.write(testing::random_u32(kValues, 2));
    c.write(testing::random_u32(kValues, 3));
  }
};

TEST(AnnotationCheck, DeclaredWritesPass) {
  Buffers f(true);
  GraphExecutor executor(f.backend);
  GraphSession s = executor.begin();
  s.dispatch(mix(*f.backend, f.a, f.b, f.b, "b_from_a"));
  s.dispatch(mix(*f.backend, f.b, f.c, f.c, "c_from_b"));  // reads what the first one wrote
  s.dispatch(mix(*f.backend, f.c, f.b, f.b, "b_from_c"));
  EXPECT_NO_THROW(s.finish());
}

TEST(AnnotationCheck, AnUndeclaredWriteIsReported) {
  Buffers f(true);
  GraphExecutor executor(f.backend);
  GraphSession s = executor.begin();
  s.dispatch(mix(*f.backend, f.a, f.b, f.b, "b_from_a"));
  try {
    // Writes all of c but declares only its first half.
    s.dispatch(mix(*f.backend, f.b, f.c, f.c.slice(0, kValues * 2), "c_half_declared"));
    s.finish();
    FAIL() << "expected the undeclared write to be reported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("c_half_declared"), std::string::npos) << what;
    EXPECT_NE(what.find("outside its declared writes"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(kValues * 2)), std::string::npos) << what;  // the first undeclared byte
  }
}

}  // namespace
}  // namespace onepass
