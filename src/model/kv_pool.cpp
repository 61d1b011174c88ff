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
  owner_.assign(static_cast<size_t>(blocks), -1);
  free_.reserve(static_cast<size_t>(blocks));
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
    alive_.push_back(false);
  }
  alive_[static_cast<size_t>(id)] = true;
  tables_[static_cast<size_t>(id)].clear();
  lengths_[static_cast<size_t>(id)] = 0;
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
  // Freed in reverse, so the sequence's first block is reused first.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    owner_[static_cast<size_t>(*it)] = -1;
    free_.push_back(*it);
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
    const int32_t b = free_.back();
    free_.pop_back();
    owner_[static_cast<size_t>(b)] = sequence;
    blocks.push_back(b);
  }
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
  return static_cast<int32_t>(blocks[static_cast<size_t>(position / block_size_)] * block_size_ +
                              position % block_size_);
}

}  // namespace onepass::model
