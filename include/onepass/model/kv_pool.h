// The block allocator of a paged KV cache shared by many sequences. The cache of each layer
// is one pool of `blocks` blocks of `block_size` positions (ops/paged_attention.h); a
// sequence owns a list of blocks, its block table, that grows block by block as tokens are
// appended and returns to the free list when the sequence is released. This class is the
// host bookkeeping only: LlamaModel owns the device caches it describes.
//
// Prefix caching: a full block whose positions are final can be committed with the tokens
// it holds. It is then known by a hash chained over the blocks before it (the hash of the
// previous block and this block's token ids; the chain starts at position 0, so a block's
// depth is its position, and the model is fixed per pool). A new sequence whose tokens
// start with committed blocks shares them (share_prefix): its block table points at them,
// each block counts its sequences, and nobody writes into a shared or committed block. A
// committed block that no sequence holds stays cached with its content and counts as free:
// it is evicted, least recently released first, when a sequence needs a block and none is
// free otherwise.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
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

  int64_t blocks() const { return static_cast<int64_t>(references_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t max_tokens() const { return max_tokens_; }
  /// Block-table entries of one sequence: ceil(max_tokens / block_size).
  int64_t max_blocks() const { return (max_tokens_ + block_size_ - 1) / block_size_; }
  /// Blocks a sequence can take: the empty ones and the cached ones (evicted on demand).
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()) + cached_blocks_; }
  /// Blocks held by sequences.
  int64_t used_blocks() const { return blocks() - free_blocks(); }
  /// Committed blocks no sequence holds, kept for their content until evicted.
  int64_t cached_blocks() const { return cached_blocks_; }
  /// Blocks that hold `tokens` positions.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  /// A new sequence with no blocks; ids are reused after release.
  int32_t add_sequence();
  /// Drops the sequence's hold on its blocks and forgets it: a block no other sequence
  /// holds returns to the free list, or, when committed, to the cached blocks.
  void release(int32_t sequence);
  bool has_sequence(int32_t sequence) const;
  /// Sequences alive now.
  int64_t sequences() const;

  /// Positions the sequence's blocks cover (a multiple of block_size).
  int64_t capacity(int32_t sequence) const;
  /// New blocks the sequence needs to hold `tokens` positions (0 when it has them).
  int64_t blocks_needed(int32_t sequence, int64_t tokens) const;
  /// Grows the sequence's block table to hold `tokens` positions, taking empty blocks
  /// first, then evicting cached ones. Throws KvPoolFull (nothing allocated) when fewer
  /// blocks are free than it needs, Error when `tokens` exceeds max_tokens.
  void reserve(int32_t sequence, int64_t tokens);
  /// Positions of the sequence written so far (LlamaModel::step sets it after each step).
  int64_t length(int32_t sequence) const;
  void set_length(int32_t sequence, int64_t length);
  /// The sequence's block table, in position order.
  std::span<const int32_t> block_table(int32_t sequence) const;
  /// The cache row the sequence writes its position to (block * block_size + offset). The
  /// position must lie within capacity(), in a block that is neither shared nor committed.
  int32_t slot(int32_t sequence, int64_t position) const;

  /// Gives a sequence that holds no blocks yet the longest run of committed blocks that
  /// hold the full blocks of `tokens` from position 0, and sets its length to their
  /// positions, which it returns (a multiple of block_size; 0 when none match).
  int64_t share_prefix(int32_t sequence, std::span<const int32_t> tokens);
  /// Commits the sequence's full blocks that `tokens` (its token ids from position 0, all
  /// within length()) cover and that are not committed yet: later sequences may share
  /// them, and their positions are read-only from now on. A block whose content another
  /// block holds already stays private. Returns the blocks committed by this call.
  int64_t commit(int32_t sequence, std::span<const int32_t> tokens);
  /// Sequences holding the block.
  int32_t references(int32_t block) const;

 private:
  static constexpr int32_t kNone = -1;
  static constexpr uint64_t kChainStart = 0x6f6e65706173734bULL;

  std::vector<int32_t>& table(int32_t sequence);
  const std::vector<int32_t>& table(int32_t sequence) const;
  uint64_t chain(uint64_t previous, std::span<const int32_t> block_tokens) const;
  /// The committed block holding `block_tokens` after the chain hash `previous`, or kNone.
  int32_t find_cached(uint64_t previous, uint64_t hash, std::span<const int32_t> block_tokens) const;
  int32_t take_block();
  void cached_unlink(int32_t block);
  void cached_push(int32_t block);

  int64_t block_size_;
  int64_t max_tokens_;
  std::vector<int32_t> references_;  // per block: sequences holding it
  std::vector<int32_t> free_;        // a stack of empty blocks: the most recently freed is reused first
  // Committed blocks: their hash, the hash of the chain before them and their token ids.
  std::vector<bool> committed_;
  std::vector<uint64_t> hash_;
  std::vector<uint64_t> previous_hash_;
  std::vector<int32_t> tokens_;  // blocks x block_size
  std::unordered_map<uint64_t, int32_t> by_hash_;
  // Cached blocks (committed, held by none): a list from the next to evict to the last released.
  std::vector<int32_t> cached_prev_, cached_next_;
  int32_t cached_first_ = kNone, cached_last_ = kNone;
  int64_t cached_blocks_ = 0;
  // Per sequence id.
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int64_t> lengths_;
  std::vector<int64_t> committed_blocks_;  // its leading blocks whose chain hash is known
  std::vector<uint64_t> chain_hash_;       // the hash after them
  std::vector<bool> alive_;
  std::vector<int32_t> free_ids_;
};

}  // namespace onepass::model
