// Op cases: paged_attention (query rows of many sequences, each over its own blocks of a
// shared paged KV cache). Block tables hand out shuffled blocks of one pool; every cache
// slot that no query row may read holds NaN, so a kernel that reads a wrong slot fails.
// Plus bad device data (entries outside the pool, lengths past the table), a replay test
// (a recorded graph follows new tables and lengths) and argument errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "onepass/exec/captured_graph.h"
#include "onepass/ops/paged_attention.h"
#include "support/op_harness.h"

namespace onepass::testing {
namespace {

struct HeadConfig {
  int32_t n_head;
  int32_t n_kv_head;  // ratios 1, 3 and 4
  const char* name;
};
constexpr HeadConfig kMha{4, 4, "4h4kv"};
constexpr HeadConfig kGqa3{6, 2, "6h2kv"};
constexpr HeadConfig kGqa4{8, 2, "8h2kv"};
constexpr HeadConfig kHeadConfigs[] = {kMha, kGqa3, kGqa4};

ops::AttentionParams paged_params(const HeadConfig& h, int32_t head_dim, int32_t window, float softcap) {
  ops::AttentionParams p;
  p.n_head = h.n_head;
  p.n_kv_head = h.n_kv_head;
  p.head_dim = head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.window = window;
  p.softcap = softcap;
  return p;
}

// As the sdpa cases: f32 scores and sums against a float64 reference over the exact
// stored values (the statistical bound of cases_attention.cpp).
Tolerance paged_tolerance() { return {2e-6, 1e-5}; }

// One query row: the sequence whose table it uses and the length it passes (the keys it
// sees, its own position + 1; may be 0 or past the table for the bad-data cases).
struct QueryRow {
  int32_t seq;
  int32_t length;
};

// A table entry overwritten after the tables are built: bad device data.
struct TableOverride {
  int32_t row;
  int32_t entry;
  int32_t value;
};

struct PagedCase {
  HeadConfig heads;
  int32_t head_dim;
  int64_t block_size;
  DType cache_type;
  std::vector<int32_t> seq_lengths;  // tokens each sequence holds (blocks: rounded up)
  std::vector<QueryRow> rows;
  int32_t window = 0;
  float softcap = 0.0f;
  std::vector<TableOverride> overrides;
  int64_t spare_blocks = 3;   // blocks of the pool no sequence owns (all NaN)
  int64_t extra_entries = 2;  // table entries past the longest sequence's blocks (other sequences' blocks)
  int64_t q_pad = 0;          // unused floats after each (token, head) row of q
  bool gpu_only = false;      // GPU-sized batch: skipped on the CPU backend
};

// Decode rows: one per sequence, seeing its whole length.
std::vector<QueryRow> decode_rows(const std::vector<int32_t>& seq_lengths) {
  std::vector<QueryRow> rows;
  for (size_t s = 0; s < seq_lengths.size(); ++s) rows.push_back({static_cast<int32_t>(s), seq_lengths[s]});
  return rows;
}

// The cache rows (kv head 0) that `row` reads, in position order: positions
// [lo, L) with L = clamp(length, 0, max_blocks * block_size), lo = max(0, L - window),
// skipping the positions of entries outside [0, blocks).
std::vector<int64_t> keys_of(const std::vector<int32_t>& table, int32_t length, int64_t block_size, int64_t blocks,
                             int32_t window) {
  const int64_t max_blocks = static_cast<int64_t>(table.size());
  const int64_t count = std::clamp<int64_t>(length, 0, max_blocks * block_size);
  const int64_t lo = window > 0 ? std::max<int64_t>(0, count - window) : 0;
  std::vector<int64_t> keys;
  for (int64_t p = lo; p < count; ++p) {
    const int64_t entry = table[static_cast<size_t>(p / block_size)];
    if (entry >= 0 && entry < blocks) keys.push_back(entry * block_size + p % block_size);
  }
  return keys;
}

void run_paged(OpContext& c, const PagedCase& pc) {
  if (pc.gpu_only && c.backend().kind() == BackendKind::cpu) {
    GTEST_SKIP() << "GPU-sized batch; the CPU kernel is covered by the smaller cases";
  }
  const ops::AttentionParams p = paged_params(pc.heads, pc.head_dim, pc.window, pc.softcap);
  const int64_t hd = pc.head_dim;
  const int64_t bs = pc.block_size;
  const int64_t n_seq = static_cast<int64_t>(pc.seq_lengths.size());
  const int64_t tokens = static_cast<int64_t>(pc.rows.size());

  // The pool: every sequence's blocks, plus spares, handed out in a shuffled order.
  std::vector<int64_t> seq_blocks(static_cast<size_t>(n_seq));
  int64_t owned = 0;
  int64_t longest = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    seq_blocks[static_cast<size_t>(s)] = (pc.seq_lengths[static_cast<size_t>(s)] + bs - 1) / bs;
    owned += seq_blocks[static_cast<size_t>(s)];
    longest = std::max(longest, seq_blocks[static_cast<size_t>(s)]);
  }
  const int64_t blocks = owned + pc.spare_blocks;
  const int64_t slots = blocks * bs;
  const int64_t max_blocks = std::max<int64_t>(1, longest + pc.extra_entries);
  std::vector<int32_t> order(static_cast<size_t>(blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), c.rng());
  // Entries past a sequence's blocks name owned blocks of other sequences: reading them
  // would add wrong keys.
  std::uniform_int_distribution<int64_t> any_owned(0, std::max<int64_t>(0, owned - 1));
  std::vector<std::vector<int32_t>> seq_tables(static_cast<size_t>(n_seq));
  int64_t next = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    std::vector<int32_t>& t = seq_tables[static_cast<size_t>(s)];
    for (int64_t b = 0; b < max_blocks; ++b) {
      t.push_back(b < seq_blocks[static_cast<size_t>(s)] ? order[static_cast<size_t>(next++)]
                  : owned > 0                            ? order[static_cast<size_t>(any_owned(c.rng()))]
                                                         : 0);
    }
  }
  std::vector<int32_t> table;
  for (const QueryRow& r : pc.rows) {
    const std::vector<int32_t>& t = seq_tables[static_cast<size_t>(r.seq)];
    table.insert(table.end(), t.begin(), t.end());
  }
  for (const TableOverride& o : pc.overrides) table[static_cast<size_t>(o.row * max_blocks + o.entry)] = o.value;

  // Keys of each row; a slot read by no row holds NaN.
  std::vector<std::vector<int64_t>> row_keys;
  std::vector<bool> read(static_cast<size_t>(slots), false);
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<int32_t> row_table(table.begin() + t * max_blocks, table.begin() + (t + 1) * max_blocks);
    row_keys.push_back(keys_of(row_table, pc.rows[static_cast<size_t>(t)].length, bs, blocks, pc.window));
    for (int64_t slot : row_keys.back()) read[static_cast<size_t>(slot)] = true;
  }
  auto make_cache = [&]() {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(p.n_kv_head * slots * hd));
    for (int64_t h = 0; h < p.n_kv_head; ++h) {
      for (int64_t slot = 0; slot < slots; ++slot) {
        for (int64_t d = 0; d < hd; ++d) {
          values[static_cast<size_t>((h * slots + slot) * hd + d)] =
              read[static_cast<size_t>(slot)] ? dist(c.rng()) : std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
    return c.input_from(pc.cache_type, {p.n_kv_head, slots, hd}, values);
  };
  TensorView q = c.random_input_strided(DType::f32, {tokens, p.n_head, hd}, pc.q_pad, -3.0f, 3.0f);
  TensorView k = make_cache();
  TensorView v = make_cache();
  TensorView table_view = c.input_i32({tokens, max_blocks}, table);
  std::vector<int32_t> lengths;
  for (const QueryRow& r : pc.rows) lengths.push_back(r.length);
  TensorView lengths_view = c.input_i32({tokens}, lengths);
  TensorView out = c.output(DType::f32, {tokens, p.n_head, hd});
  ops::paged_attention(c.session(), q, k, v, table_view, lengths_view, out, bs, p);
  c.run();

  const std::vector<double>& qh = c.host(q);
  const std::vector<double>& kh = c.host(k);
  const std::vector<double>& vh = c.host(v);
  const int64_t group = p.n_head / p.n_kv_head;
  std::vector<double> ref(static_cast<size_t>(tokens * p.n_head * hd), 0.0);
  std::vector<double> scores;
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<int64_t>& keys = row_keys[static_cast<size_t>(t)];
    if (keys.empty()) continue;  // zeros
    for (int64_t h = 0; h < p.n_head; ++h) {
      const double* qr = &qh[static_cast<size_t>((t * p.n_head + h) * hd)];
      const int64_t kv = h / group;
      scores.assign(keys.size(), 0.0);
      double max = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < keys.size(); ++j) {
        const double* kr = &kh[static_cast<size_t>((kv * slots + keys[j]) * hd)];
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += qr[d] * kr[d];
        double s = dot * p.scale;
        if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
        scores[j] = s;
        max = std::max(max, s);
      }
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - max));
      double* o = &ref[static_cast<size_t>((t * p.n_head + h) * hd)];
      for (size_t j = 0; j < keys.size(); ++j) {
        const double* vr = &vh[static_cast<size_t>((kv * slots + keys[j]) * hd)];
        for (int64_t d = 0; d < hd; ++d) o[d] += scores[j] / sum * vr[d];
      }
    }
  }
  c.expect_near(out, ref, paged_tolerance());
}

// Lengths of a decode batch: around `keys`, each sequence a different length, none a
// multiple of the block size unless by chance.
std::vector<int32_t> batch_lengths(int32_t batch, int32_t keys) {
  std::vector<int32_t> lengths;
  for (int32_t i = 0; i < batch; ++i) lengths.push_back(keys - (i * 37) % (keys / 2 + 1));
  return lengths;
}

}  // namespace

ONEPASS_OP_CASES(paged_attention) {
  // Decode batches: sequences of different lengths (0, 1, block edges, longer than one
  // 256-key tile), one query row each, for every cache type, GQA ratio and block size.
  const std::vector<int32_t> mixed{0, 1, 15, 16, 17, 33, 300};
  for (DType ct : kFloatTypes) {
    for (const HeadConfig& heads : kHeadConfigs) {
      for (int64_t bs : {16, 32, 1}) {
        const int32_t hd = bs == 16 ? 64 : bs == 32 ? 128 : 80;
        const PagedCase pc{heads, hd, bs, ct, mixed, decode_rows(mixed)};
        cases.push_back({cat("paged_attention/", dtype_name(ct), "/", heads.name, "_hd", hd, "/bs", bs, "_decode7"),
                         [=](OpContext& c) { run_paged(c, pc); }});
      }
    }
  }
  // Prefill rows (many rows of one sequence, positions 40..79) mixed with decode rows of
  // two other sequences; with and without a window and a softcap.
  for (DType ct : {DType::f16, DType::f32}) {
    for (auto [window, softcap] : {std::tuple{0, 0.0f}, std::tuple{7, 0.0f}, std::tuple{1, 2.0f}, std::tuple{64, 2.0f}}) {
      std::vector<QueryRow> rows{{1, 21}};
      for (int32_t pos = 40; pos < 80; ++pos) rows.push_back({0, pos + 1});
      rows.push_back({2, 333});
      const PagedCase pc{kGqa3, 64, 16, ct, {80, 21, 333}, rows, window, softcap};
      cases.push_back({cat("paged_attention/", dtype_name(ct), "/6h2kv_hd64/bs16_prefill40_window", window,
                           softcap > 0 ? "_softcap2" : ""),
                       [=](OpContext& c) { run_paged(c, pc); }});
    }
  }
  // Windows and softcaps on decode batches, every GQA ratio.
  for (const HeadConfig& heads : kHeadConfigs) {
    for (int32_t window : {1, 16, 100}) {
      const std::vector<int32_t> lengths{5, 64, 250, 17, 0};
      const PagedCase pc{heads, 64, 32, DType::bf16, lengths, decode_rows(lengths), window, window == 16 ? 5.0f : 0.0f};
      cases.push_back({cat("paged_attention/bf16/", heads.name, "_hd64/bs32_window", window, window == 16 ? "_softcap5" : ""),
                       [=](OpContext& c) { run_paged(c, pc); }});
    }
  }
  // q rows with a stride (padding after each (token, head) row); head sizes 96 and 256
  // (f32: the CUDA scalar kernel, one query head per pass).
  cases.push_back({"paged_attention/f16/6h2kv_hd96/bs16_q_strided", [](OpContext& c) {
    const std::vector<int32_t> lengths{40, 7, 129};
    PagedCase pc{kGqa3, 96, 16, DType::f16, lengths, decode_rows(lengths)};
    pc.q_pad = 5;
    run_paged(c, pc);
  }});
  cases.push_back({"paged_attention/f32/8h2kv_hd256/bs16_decode", [](OpContext& c) {
    const std::vector<int32_t> lengths{40, 300, 1};
    run_paged(c, {kGqa4, 256, 16, DType::f32, lengths, decode_rows(lengths)});
  }});
  // Rows that are not whole 16-byte words (the CUDA scalar kernel): head_dim 36 and 20.
  cases.push_back({"paged_attention/f16/6h2kv_hd36/bs16_decode", [](OpContext& c) {
    const std::vector<int32_t> lengths{40, 0, 290, 16};
    run_paged(c, {kGqa3, 36, 16, DType::f16, lengths, decode_rows(lengths)});
  }});
  cases.push_back({"paged_attention/bf16/8h2kv_hd20/bs32_window9", [](OpContext& c) {
    const std::vector<int32_t> lengths{40, 3, 100};
    run_paged(c, {kGqa4, 20, 32, DType::bf16, lengths, decode_rows(lengths), 9});
  }});
  // Bad device data: entries below 0, equal to the pool size and far past it skip their
  // keys (the others still count); a length past the table clamps to max_blocks *
  // block_size (the entries past the sequence's blocks are then read); a negative length
  // gives zeros. Nothing is read outside the cache.
  for (DType ct : {DType::f16, DType::f32}) {
    cases.push_back({cat("paged_attention/", dtype_name(ct), "/8h2kv_hd64/bs16_bad_device_data"), [=](OpContext& c) {
      const std::vector<int32_t> lengths{50, 100, 64, 30};
      std::vector<QueryRow> rows = decode_rows(lengths);
      rows.push_back({1, 100000});  // past the table
      rows.push_back({3, -4});      // negative
      rows.push_back({2, 64});      // every entry bad: zeros
      PagedCase pc{kGqa4, 64, 16, ct, lengths, rows};
      pc.overrides = {{0, 1, -1},      {1, 0, 1 << 30}, {1, 3, -2147483647 - 1}, {3, 0, 12345678},
                      {4, 7, -3},      {6, 0, -1},      {6, 1, 1 << 20},         {6, 2, -5},
                      {6, 3, 99999}};
      // The pool size itself, one past the last block: 4 + 7 + 4 + 2 blocks owned, 3 spare.
      pc.overrides.push_back({0, 2, 20});
      run_paged(c, pc);
    }});
  }
  // Batched decode at serving sizes (GPU only; ONEPASS_OP_BENCH=1 times them): B rows of
  // a few hundred to a thousand keys, llama-1b-like heads (32 x 64, 8 KV heads) and
  // llama-8b-like heads (32 x 128, 8 KV heads), f16 caches in blocks of 16.
  constexpr HeadConfig kLlama{32, 8, "32h8kv"};
  for (int32_t hd : {64, 128}) {
    for (auto [batch, keys] : {std::pair{1, 512}, std::pair{8, 256}, std::pair{8, 1024}, std::pair{32, 512},
                               std::pair{128, 256}, std::pair{128, 1024}}) {
      for (DType ct : {DType::f16, DType::bf16}) {
        if (ct == DType::bf16 && !(batch == 32 && keys == 512)) continue;
        cases.push_back({cat("paged_attention/", dtype_name(ct), "/32h8kv_hd", hd, "/bs16_B", batch, "_keys", keys),
                         [=](OpContext& c) {
                           const std::vector<int32_t> lengths = batch_lengths(batch, keys);
                           PagedCase pc{kLlama, hd, 16, ct, lengths, decode_rows(lengths)};
                           pc.gpu_only = true;
                           run_paged(c, pc);
                         }});
      }
    }
  }
  // A long prefill chunk (GPU only): 200 rows of one sequence at positions 800..999, next
  // to 8 decode rows.
  cases.push_back({"paged_attention/f16/32h8kv_hd128/bs16_prefill200_decode8", [kLlama](OpContext& c) {
    std::vector<int32_t> lengths = batch_lengths(8, 700);
    lengths.push_back(1000);
    std::vector<QueryRow> rows = decode_rows(std::vector<int32_t>(lengths.begin(), lengths.end() - 1));
    for (int32_t pos = 800; pos < 1000; ++pos) rows.push_back({8, pos + 1});
    PagedCase pc{kLlama, 128, 16, DType::f16, lengths, rows};
    pc.gpu_only = true;
    run_paged(c, pc);
  }});
}

// A recorded paged_attention graph reads tables and lengths at run time: replaying it with
// new ones gives the new answer without re-recording.
TEST(PagedAttention, ReplayFollowsTablesAndLengths) {
  auto backend = cpu_backend();
  const ops::AttentionParams p = paged_params(kGqa3, 64, 0, 0.0f);
  constexpr int64_t kBlockSize = 16;
  constexpr int64_t kBlocks = 40;
  constexpr int64_t kSlots = kBlocks * kBlockSize;
  constexpr int64_t kTokens = 3;
  constexpr int64_t kMaxBlocks = 12;
  const int64_t hd = p.head_dim;
  auto upload = [&](DType t, Shape shape, uint64_t seed) {
    TensorView view = backend->alloc_tensor(t, shape);
    std::vector<float> values = random_floats(static_cast<size_t>(shape.numel()), seed, -1.0f, 1.0f);
    upload_floats(view, values);
    std::vector<double> host(values.size());
    for (size_t i = 0; i < values.size(); ++i) host[i] = round_to(t, values[i]);
    return std::pair{view, host};
  };
  const auto [q, q_host] = upload(DType::f32, {kTokens, p.n_head, hd}, 1);
  const auto [k, k_host] = upload(DType::f16, {p.n_kv_head, kSlots, hd}, 2);
  const auto [v, v_host] = upload(DType::f16, {p.n_kv_head, kSlots, hd}, 3);
  TensorView table = backend->alloc_tensor(DType::i32, {kTokens, kMaxBlocks});
  TensorView lengths = backend->alloc_tensor(DType::i32, {kTokens});
  TensorView out = backend->alloc_tensor(DType::f32, {kTokens, p.n_head, hd});

  GraphExecutor executor(backend);
  GraphSession session = executor.begin_recorded();
  ops::paged_attention(session, q, k, v, table, lengths, out, kBlockSize, p);
  CapturedGraph graph(*backend, session.take_graph());
  std::mt19937_64 rng(fresh_seed());
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> blocks(kBlocks);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<int32_t> table_values(blocks.begin(), blocks.begin() + kTokens * kMaxBlocks);
    const std::vector<int32_t> length_values{step * 40 + 1, 190 - step * 50, step == 2 ? 0 : 17 + step};
    table.view.write(table_values);
    lengths.view.write(length_values);
    graph.run();
    const std::vector<float> actual = download_floats(out);
    std::vector<double> expected(actual.size(), 0.0);
    const int64_t group = p.n_head / p.n_kv_head;
    for (int64_t t = 0; t < kTokens; ++t) {
      const std::vector<int32_t> row(table_values.begin() + t * kMaxBlocks, table_values.begin() + (t + 1) * kMaxBlocks);
      const std::vector<int64_t> keys = keys_of(row, length_values[static_cast<size_t>(t)], kBlockSize, kBlocks, 0);
      if (keys.empty()) continue;
      for (int64_t h = 0; h < p.n_head; ++h) {
        const int64_t kv = h / group;
        std::vector<double> s(keys.size());
        double max = -std::numeric_limits<double>::infinity();
        for (size_t j = 0; j < keys.size(); ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += q_host[static_cast<size_t>((t * p.n_head + h) * hd + d)] *
                   k_host[static_cast<size_t>((kv * kSlots + keys[j]) * hd + d)];
          s[j] = dot * p.scale;
          max = std::max(max, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - max));
        for (size_t j = 0; j < keys.size(); ++j) {
          for (int64_t d = 0; d < hd; ++d)
            expected[static_cast<size_t>((t * p.n_head + h) * hd + d)] +=
                s[j] / sum * v_host[static_cast<size_t>((kv * kSlots + keys[j]) * hd + d)];
        }
      }
    }
    const Tolerance tol = paged_tolerance();
    EXPECT_LE(max_scaled_error(actual, expected, tol.atol, tol.rtol), 1.0) << "step " << step;
  }
}

TEST(PagedAttentionValidation, RejectsBadArguments) {
  // A valid call (6 heads over 2 KV heads, head_dim 64, 3 tokens, 4 blocks of 16 slots,
  // tables of 2 entries) with one thing changed at a time.
  struct Setup {
    DType q_type = DType::f32;
    DType k_type = DType::f16;
    DType v_type = DType::f16;
    DType table_type = DType::i32;
    DType lengths_type = DType::i32;
    int32_t n_kv_head = 2;
    int32_t head_dim = 64;
    int64_t slots = 64;
    int64_t block_size = 16;
    Shape table_shape{3, 2};
    int64_t lengths_count = 3;
    int64_t q_heads = 6;
    float scale = 0.125f;
    int32_t window = 0;
    float softcap = 0.0f;
    bool out_is_q = false;
    bool strided_table = false;
    int64_t tokens = 3;
  };
  auto paged = [](Setup u) {
    return [=](GraphSession& s, Backend& b) {
      ops::AttentionParams p;
      p.n_head = 6;
      p.n_kv_head = u.n_kv_head;
      p.head_dim = u.head_dim;
      p.scale = u.scale;
      p.window = u.window;
      p.softcap = u.softcap;
      TensorView q = b.alloc_tensor(u.q_type, {u.tokens, u.q_heads, 64});
      TensorView table = b.alloc_tensor(u.table_type, u.table_shape);
      if (u.strided_table) table = TensorView(b.alloc(4096), DType::i32, u.table_shape, 64);
      ops::paged_attention(s, q, b.alloc_tensor(u.k_type, {2, u.slots, 64}), b.alloc_tensor(u.v_type, {2, u.slots, 64}),
                           table, b.alloc_tensor(u.lengths_type, {u.lengths_count}),
                           u.out_is_q ? q : b.alloc_tensor(DType::f32, {u.tokens, u.q_heads, 64}), u.block_size, p);
    };
  };
  const char* op = "paged_attention";
  expect_op_error(op, paged({.q_type = DType::f16}));            // q is f32
  expect_op_error(op, paged({.k_type = DType::i32, .v_type = DType::i32}));  // cache is a float type
  expect_op_error(op, paged({.v_type = DType::bf16}));           // k, v types differ
  expect_op_error(op, paged({.table_type = DType::f32}));        // block_table is i32
  expect_op_error(op, paged({.lengths_type = DType::f32}));      // lengths is i32
  expect_op_error(op, paged({.n_kv_head = 4}));                  // 6 % 4 != 0
  expect_op_error(op, paged({.n_kv_head = 3}));                  // the cache has 2 KV heads
  expect_op_error(op, paged({.head_dim = 80}));                  // shapes say 64
  expect_op_error(op, paged({.slots = 72}));                     // not a multiple of block_size
  expect_op_error(op, paged({.block_size = 0}));                 // block_size > 0
  expect_op_error(op, paged({.block_size = -16}));
  expect_op_error(op, paged({.block_size = int64_t{1} << 31}));  // positions are i32
  expect_op_error(op, paged({.table_shape = Shape{2, 2}}));      // one table row per token
  expect_op_error(op, paged({.table_shape = Shape{6}}));         // [tokens, max_blocks]
  expect_op_error(op, paged({.strided_table = true}));           // contiguous rows
  expect_op_error(op, paged({.lengths_count = 2}));              // one length per token
  expect_op_error(op, paged({.q_heads = 8}));                    // q has n_head heads
  expect_op_error(op, paged({.scale = 0.0f}));                   // scale unset
  expect_op_error(op, paged({.window = -1}));                    // window >= 0
  expect_op_error(op, paged({.softcap = -1.0f}));                // softcap >= 0
  expect_op_error(op, paged({.out_is_q = true}));                // out overlaps q
  expect_op_error(op, paged({.table_shape = Shape{0, 2}, .lengths_count = 0, .tokens = 0}));  // no tokens
  // The valid call itself is accepted.
  GraphExecutor executor(cpu_backend());
  GraphSession session = executor.begin();
  EXPECT_NO_THROW(paged({})(session, executor.backend()));
}

}  // namespace onepass::testing
