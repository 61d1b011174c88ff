#include "onepass/model/kv_pool.h"

#include <algorithm>
#include <climits>

namespace onepass::model {

KvBlockPool::KvBlockPool(int64_t blocks, int64_t block_size, int64_t max_tokens)
    : block_size_(block_size), max_tokens_(max_tokens) {
  check(block_size > 0, "kv_pool", "block size must be positive, got ", block_size);
  check(blocks > 0, "kv_pool", "a pool needs at least one block, got ", blocks);
  check(max_tokens > 0, "kv_pool", "a sequence's length limit must be positive, got ", max_tokens);
  check(blocks <= INT32_MAX / block_size, "kv_pool", blocks, " blocks of ", block_size,
        " positions exceed the i32 slots of the block table");
  const auto n = static_cast<size_t>(blocks);
  references_.assign(n, 0);
  committed_.assign(n, false);
  hash_.assign(n, 0);
  previous_hash_.assign(n, 0);
  tokens_.assign(n * static_cast<size_t>(block_size), 0);
  cached_prev_.assign(n, kNone);
  cached_next_.assign(n, kNone);
  free_.reserve(n);
  // Block 0 on top of the stack: a fresh pool hands out blocks in order.
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t KvBlockPool::add_sequence() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int32_t>(tables_.size());
    tables_.emplace_back();
    lengths_.push_back(0);
    committed_blocks_.push_back(0);
    chain_hash_.push_back(kChainStart);
    alive_.push_back(false);
  }
  const auto i = static_cast<size_t>(id);
  alive_[i] = true;
  tables_[i].clear();
  lengths_[i] = 0;
  committed_blocks_[i] = 0;
  chain_hash_[i] = kChainStart;
  return id;
}

bool KvBlockPool::has_sequence(int32_t sequence) const {
  return sequence >= 0 && static_cast<size_t>(sequence) < alive_.size() && alive_[static_cast<size_t>(sequence)];
}

int64_t KvBlockPool::sequences() const { return static_cast<int64_t>(std::count(alive_.begin(), alive_.end(), true)); }

std::vector<int32_t>& KvBlockPool::table(int32_t sequence) {
  check(has_sequence(sequence), "kv_pool", "sequence ", sequence, " does not exist (released or never added)");
  return tables_[static_cast<size_t>(sequence)];
}

const std::vector<int32_t>& KvBlockPool::table(int32_t sequence) const {
  check(has_sequence(sequence), "kv_pool", "sequence ", sequence, " does not exist (released or never added)");
  return tables_[static_cast<size_t>(sequence)];
}

void KvBlockPool::release(int32_t sequence) {
  std::vector<int32_t>& blocks = table(sequence);
  // In reverse: an empty first block is reused first, and a cached last block is evicted
  // before the blocks that lead to it.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const int32_t b = *it;
    if (--references_[static_cast<size_t>(b)] > 0) continue;
    if (committed_[static_cast<size_t>(b)]) {
      cached_push(b);
    } else {
      free_.push_back(b);
    }
  }
  blocks.clear();
  alive_[static_cast<size_t>(sequence)] = false;
  free_ids_.push_back(sequence);
}

int64_t KvBlockPool::capacity(int32_t sequence) const {
  return static_cast<int64_t>(table(sequence).size()) * block_size_;
}

int64_t KvBlockPool::blocks_needed(int32_t sequence, int64_t tokens) const {
  return std::max<int64_t>(0, blocks_for(tokens) - static_cast<int64_t>(table(sequence).size()));
}

void KvBlockPool::reserve(int32_t sequence, int64_t tokens) {
  check(tokens <= max_tokens_, "kv_pool", "sequence ", sequence, " would hold ", tokens,
        " positions, more than the limit of ", max_tokens_, " per sequence");
  const int64_t needed = blocks_needed(sequence, tokens);
  if (needed > free_blocks()) {
    throw KvPoolFull("kv_pool", cat("pool full: sequence ", sequence, " needs ", needed, " more blocks of ",
                                    block_size_, " positions, ", free_blocks(), " of ", blocks(),
                                    " are free; wait for a sequence to finish or release one"));
  }
  std::vector<int32_t>& blocks = table(sequence);
  for (int64_t i = 0; i < needed; ++i) {
    const int32_t b = take_block();
    references_[static_cast<size_t>(b)] = 1;
    blocks.push_back(b);
  }
}

int32_t KvBlockPool::take_block() {
  if (!free_.empty()) {
    const int32_t b = free_.back();
    free_.pop_back();
    return b;
  }
  // Evict the cached block released longest ago.
  const int32_t b = cached_first_;
  cached_unlink(b);
  const auto i = static_cast<size_t>(b);
  by_hash_.erase(hash_[i]);
  committed_[i] = false;
  return b;
}

void KvBlockPool::cached_unlink(int32_t block) {
  const auto i = static_cast<size_t>(block);
  const int32_t prev = cached_prev_[i], next = cached_next_[i];
  (prev == kNone ? cached_first_ : cached_next_[static_cast<size_t>(prev)]) = next;
  (next == kNone ? cached_last_ : cached_prev_[static_cast<size_t>(next)]) = prev;
  cached_prev_[i] = cached_next_[i] = kNone;
  --cached_blocks_;
}

void KvBlockPool::cached_push(int32_t block) {
  const auto i = static_cast<size_t>(block);
  cached_prev_[i] = cached_last_;
  cached_next_[i] = kNone;
  (cached_last_ == kNone ? cached_first_ : cached_next_[static_cast<size_t>(cached_last_)]) = block;
  cached_last_ = block;
  ++cached_blocks_;
}

std::span<const int32_t> KvBlockPool::block_table(int32_t sequence) const { return table(sequence); }

int64_t KvBlockPool::length(int32_t sequence) const {
  table(sequence);  // checks the id
  return lengths_[static_cast<size_t>(sequence)];
}

void KvBlockPool::set_length(int32_t sequence, int64_t length) {
  check(length >= 0 && length <= capacity(sequence), "kv_pool", "sequence ", sequence, " cannot hold ", length,
        " positions with ", capacity(sequence), " reserved");
  lengths_[static_cast<size_t>(sequence)] = length;
}

int32_t KvBlockPool::slot(int32_t sequence, int64_t position) const {
  const std::vector<int32_t>& blocks = table(sequence);
  check(position >= 0 && position < static_cast<int64_t>(blocks.size()) * block_size_, "kv_pool", "position ",
        position, " of sequence ", sequence, " is outside its ", blocks.size() * static_cast<size_t>(block_size_),
        " reserved positions");
  const int32_t block = blocks[static_cast<size_t>(position / block_size_)];
  check(references_[static_cast<size_t>(block)] == 1 && !committed_[static_cast<size_t>(block)], "kv_pool",
        "position ", position, " of sequence ", sequence, " lies in block ", block,
        ", which is shared or committed for reuse and so read-only; expected a position after its shared prefix");
  return static_cast<int32_t>(block * block_size_ + position % block_size_);
}

// ---- prefix caching -------------------------------------------------------------------

namespace {

// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t KvBlockPool::chain(uint64_t previous, std::span<const int32_t> block_tokens) const {
  uint64_t h = previous;
  for (const int32_t t : block_tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

int32_t KvBlockPool::find_cached(uint64_t previous, uint64_t hash, std::span<const int32_t> block_tokens) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return kNone;
  // The hash picks the block; its own tokens and the chain before it must match too.
  const auto i = static_cast<size_t>(it->second);
  const auto stored = std::span<const int32_t>(tokens_).subspan(i * static_cast<size_t>(block_size_),
                                                                 static_cast<size_t>(block_size_));
  if (previous_hash_[i] != previous || !std::equal(stored.begin(), stored.end(), block_tokens.begin())) return kNone;
  return it->second;
}

int64_t KvBlockPool::share_prefix(int32_t sequence, std::span<const int32_t> tokens) {
  std::vector<int32_t>& blocks = table(sequence);
  check(blocks.empty(), "kv_pool", "sequence ", sequence, " holds ", blocks.size(),
        " blocks; a shared prefix goes to a sequence with none");
  const auto s = static_cast<size_t>(sequence);
  const int64_t full = std::min<int64_t>(static_cast<int64_t>(tokens.size()) / block_size_, max_blocks());
  uint64_t h = kChainStart;
  for (int64_t k = 0; k < full; ++k) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(k * block_size_), static_cast<size_t>(block_size_));
    const uint64_t next = chain(h, block_tokens);
    const int32_t b = find_cached(h, next, block_tokens);
    if (b == kNone) break;
    if (references_[static_cast<size_t>(b)]++ == 0) cached_unlink(b);
    blocks.push_back(b);
    h = next;
  }
  committed_blocks_[s] = static_cast<int64_t>(blocks.size());
  chain_hash_[s] = h;
  lengths_[s] = static_cast<int64_t>(blocks.size()) * block_size_;
  return lengths_[s];
}

int64_t KvBlockPool::commit(int32_t sequence, std::span<const int32_t> tokens) {
  const std::vector<int32_t>& blocks = table(sequence);
  const auto s = static_cast<size_t>(sequence);
  check(static_cast<int64_t>(tokens.size()) <= lengths_[s], "kv_pool", "sequence ", sequence, " commits ",
        tokens.size(), " tokens but holds ", lengths_[s], " written positions; expected at most that many");
  const int64_t full = static_cast<int64_t>(tokens.size()) / block_size_;
  int64_t added = 0;
  for (int64_t k = committed_blocks_[s]; k < full; ++k) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(k * block_size_), static_cast<size_t>(block_size_));
    const uint64_t previous = chain_hash_[s];
    const uint64_t h = chain(previous, block_tokens);
    chain_hash_[s] = h;
    committed_blocks_[s] = k + 1;
    // The first block with this content stays its cached copy; a duplicate stays private.
    if (by_hash_.contains(h)) continue;
    const int32_t b = blocks[static_cast<size_t>(k)];
    const auto i = static_cast<size_t>(b);
    committed_[i] = true;
    hash_[i] = h;
    previous_hash_[i] = previous;
    std::copy(block_tokens.begin(), block_tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(i) * block_size_);
    by_hash_.emplace(h, b);
    ++added;
  }
  return added;
}

int32_t KvBlockPool::references(int32_t block) const {
  check(block >= 0 && block < blocks(), "kv_pool", "block ", block, " is outside the pool of ", blocks(), " blocks");
  return references_[static_cast<size_t>(block)];
}

}  // namespace onepass::model
