// The block allocator of a paged KV cache shared by many sequences. The cache of each layer
// is one pool of `blocks` blocks of `block_size` positions (ops/paged_attention.h); a
// sequence owns a list of blocks, its block table, that grows block by block as tokens are
// appended and returns to the free list when the sequence is released. This class is the
// host bookkeeping only: LlamaModel owns the device caches it describes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "onepass/core/error.h"

namespace onepass::model {

/// Thrown when the pool has too few free blocks for a request: the caller waits for
/// sequences to finish, or releases (preempts) one, and tries again.
class KvPoolFull : public Error {
 public:
  using Error::Error;
};

class KvBlockPool {
 public:
  /// A pool of `blocks` blocks of `block_size` positions; a sequence holds at most
  /// `max_tokens` positions (its block table has max_blocks() entries).
  KvBlockPool(int64_t blocks, int64_t block_size, int64_t max_tokens);

  int64_t blocks() const { return static_cast<int64_t>(owner_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t max_tokens() const { return max_tokens_; }
  /// Block-table entries of one sequence: ceil(max_tokens / block_size).
  int64_t max_blocks() const { return (max_tokens_ + block_size_ - 1) / block_size_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return blocks() - free_blocks(); }
  /// Blocks that hold `tokens` positions.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  /// A new sequence with no blocks; ids are reused after release.
  int32_t add_sequence();
  /// Returns the sequence's blocks to the free list and forgets it.
  void release(int32_t sequence);
  bool has_sequence(int32_t sequence) const;
  /// Sequences alive now.
  int64_t sequences() const;

  /// Positions the sequence's blocks cover (a multiple of block_size).
  int64_t capacity(int32_t sequence) const;
  /// New blocks the sequence needs to hold `tokens` positions (0 when it has them).
  int64_t blocks_needed(int32_t sequence, int64_t tokens) const;
  /// Grows the sequence's block table to hold `tokens` positions. Throws KvPoolFull
  /// (nothing allocated) when fewer blocks are free than it needs, Error when `tokens`
  /// exceeds max_tokens.
  void reserve(int32_t sequence, int64_t tokens);
  /// Positions of the sequence written so far (LlamaModel::step sets it after each step).
  int64_t length(int32_t sequence) const;
  void set_length(int32_t sequence, int64_t length);
  /// The sequence's block table, in position order.
  std::span<const int32_t> block_table(int32_t sequence) const;
  /// The cache row of the sequence's position (block * block_size + offset); the
  /// position must lie within capacity().
  int32_t slot(int32_t sequence, int64_t position) const;

 private:
  std::vector<int32_t>& table(int32_t sequence);
  const std::vector<int32_t>& table(int32_t sequence) const;

  int64_t block_size_;
  int64_t max_tokens_;
  std::vector<int32_t> owner_;  // per block: its sequence, -1 when free (checks release)
  std::vector<int32_t> free_;   // a stack: the most recently freed block is reused first
  std::vector<std::vector<int32_t>> tables_;  // per sequence id
  std::vector<int64_t> lengths_;              // per sequence id
  std::vector<bool> alive_;
  std::vector<int32_t> free_ids_;
};

}  // namespace onepass::model
