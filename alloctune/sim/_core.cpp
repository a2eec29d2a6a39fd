// The compiled core of the simulator: `allocator.py`'s Allocator and `simulate.py`'s replay loop in C++, with
// the structures of c10/cuda/CUDACachingAllocator.cpp (Block linked in address order within its segment,
// BlockPool holding the cached blocks ordered by (size, address) and a std::set of unmapped blocks by address,
// ExpandableSegment); only the container of the cached blocks differs (BlockSet: the same order, found faster).
// Pools are per stream, as in allocator.py, so the stream that leads upstream's comparator is constant within a
// set. Every decision mirrors allocator.py line for line; results must be
// identical (tests/sim/test_sim_cores.py), so change both together.
//
// Entry point: simulate(kinds, addrs, sizes, streams, device_memory, overhead, allowed (-1: none), max_split,
// non_split_rounding, large_segment, divisions (16 ints), divisions_one_rounds_512, expandable, expandable_private,
// gc_threshold, stop_at_retry[, marks]) -> (counters (allocator.COUNTERS order), ignored_frees, first_oom, first_retry, replayed,
// [allocator.MARK_COUNTERS at each mark reached]).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace {

using u64 = uint64_t;
using i64 = int64_t;

constexpr u64 MiB = 1ull << 20;
constexpr u64 kMinBlockSize = 512;
constexpr u64 kSmallSize = 1 * MiB;
constexpr u64 kSmallBuffer = 2 * MiB;
constexpr u64 kMinLargeAlloc = 10 * MiB;
constexpr u64 kRoundLarge = 2 * MiB;
constexpr u64 kNoLimit = ~0ull;
constexpr u64 kVaStart = 1ull << 32, kVaEnd = 1ull << 63;
constexpr u64 kMaxSegmentSpace = 1ull << 50;
constexpr u64 kLargestRequest = 1ull << 60;  // larger sizes: OverflowError, the Python core takes over
// The largest figures of a setting it takes (device memory, overhead, allowed, max_split, non_split_rounding,
// large_segment; larger ones: OverflowError, the Python core takes over): no sum it forms of three such figures
// (reserved + overhead + a segment) or of one and a request wraps 64 bits; nor does 512 * divisions.
constexpr u64 kLargestFigure = 1ull << 62;
constexpr i64 kLargestDivisions = i64{1} << 54;

struct BlockPool;
struct Block;

struct ExpandableSegment {
  u64 base, size, page;
};

using Key = unsigned __int128;  // a cached block's (size, address) as one number: one comparison, no branch on ties

// A pool's cached blocks ordered by (size, address), upstream's BlockComparatorSize order within one stream.
// A replay searches, inserts and erases here for nearly every event, and in upstream's red-black tree each of
// these is a chain of dependent loads with a hard-to-predict branch per level: most of the replay's time. So the
// set is cut by size into classes, as in a TLSF allocator: each power of two split into 16 ranges, each range
// a short vector sorted by (size, address), and a bitmap of the classes that are not empty. Class numbers grow
// with size, so the classes in order, each in order, are the (size, address) order: a search is one class's
// vector plus a find-first-set over the bitmap; an insert or erase touches one short vector, no rebalancing.
// Positions (Pos) are valid until the next insert or erase. A block's size must not change while it is here.
class BlockSet {
 public:
  struct Pos {
    size_t cls, slot;
    bool operator==(const Pos& o) const { return cls == o.cls && slot == o.slot; }
    bool operator!=(const Pos& o) const { return !(*this == o); }
  };
  Pos begin() const { return {next_class(0), 0}; }
  Pos end() const { return {kClasses, 0}; }
  Block* at(Pos p) const { return classes_[p.cls][p.slot].block; }
  u64 size_at(Pos p) const { return static_cast<u64>(classes_[p.cls][p.slot].key >> 64); }
  Pos next(Pos p) const {
    return p.slot + 1 < classes_[p.cls].size() ? Pos{p.cls, p.slot + 1} : Pos{next_class(p.cls + 1), 0};
  }
  Pos prev(Pos p) const {  // p must not be begin()
    if (p.slot > 0) return {p.cls, p.slot - 1};
    size_t c = prev_class(p.cls);
    return {c, classes_[c].size() - 1};
  }
  Pos lower_bound_size(u64 size) const { return lower_bound(static_cast<Key>(size) << 64); }
  void insert(Block* b);
  void erase(Block* b);  // nothing when b is not in the set
  void remove(Pos p);    // erase at p
  Pos take(Pos p);       // erase at p; returns the position of the block that followed
  std::vector<Block*> all() const;  // in order, for loops that change the set while they go

 private:
  static constexpr int kSubBits = 4;  // 16 classes per power of two
  static constexpr size_t kClasses = (64 - kSubBits + 1) << kSubBits;
  static constexpr size_t kWords = (kClasses + 63) / 64;
  struct Entry {
    Key key;
    Block* block;
  };
  std::vector<Entry> classes_[kClasses];
  u64 nonempty_[kWords] = {};  // bit c: classes_[c] holds blocks
  u64 nonempty_words_ = 0;     // bit w: nonempty_[w] != 0
  static_assert(kWords <= 64, "one summary word");

  static Key key(const Block* b);
  // Sizes below 16 have a class each; above, the power of two and the next 4 bits below the top one.
  static size_t class_of(u64 size) {
    if (size < (1u << kSubBits)) return static_cast<size_t>(size);
    int top = 63 - __builtin_clzll(size);
    size_t below_top = (size >> (top - kSubBits)) & ((1u << kSubBits) - 1);
    return (static_cast<size_t>(top - kSubBits + 1) << kSubBits) + below_top;
  }
  size_t next_class(size_t c) const;  // first non-empty class >= c, or kClasses
  size_t prev_class(size_t c) const;  // last non-empty class < c; there must be one
  void mark(size_t c, bool nonempty) {
    u64 bit = 1ull << (c % 64);
    u64& word = nonempty_[c / 64];
    word = nonempty ? word | bit : word & ~bit;
    u64 wbit = 1ull << (c / 64);
    nonempty_words_ = word ? nonempty_words_ | wbit : nonempty_words_ & ~wbit;
  }
  // The first entry not below k (std::lower_bound), halving without a jump on the comparison: the data decide
  // it, so a jump would be mispredicted half the time.
  static size_t slot_of(const std::vector<Entry>& v, Key k) {
    if (v.empty()) return 0;
    const Entry* base = v.data();
    for (size_t n = v.size(); n > 1; n -= n / 2) base += static_cast<size_t>(base[n / 2 - 1].key < k) * (n / 2);
    return static_cast<size_t>(base - v.data()) + (base->key < k);
  }
  Pos lower_bound(Key k) const {
    size_t c = class_of(static_cast<u64>(k >> 64));
    size_t slot = slot_of(classes_[c], k);
    if (slot < classes_[c].size()) return {c, slot};
    return {next_class(c + 1), 0};
  }
};
using AddrSet = std::set<Block*, bool (*)(const Block*, const Block*)>;  // unmapped blocks by address

struct Block {
  u64 addr = 0, size = 0, requested = 0, gc_base = 0;
  BlockPool* pool = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  ExpandableSegment* segment = nullptr;
  bool allocated = false, mapped = true;
  bool cached = false;  // in its pool's `blocks` set
  bool freed = false;   // its free was requested (allocator.py's free_requested), it is not back in its pool yet
  bool is_split() const { return prev != nullptr || next != nullptr; }
};

bool by_address(const Block* a, const Block* b) { return a->addr < b->addr; }

// A CUDA graph's private pool (pools.py's PrivatePool): the graphs that use it, the captures into it underway.
struct PrivatePool {
  u64 use_count = 0, capturing = 0;
};

struct BlockPool {
  bool is_small;
  BlockSet blocks;
  AddrSet unmapped{by_address};
  PrivatePool* owner;  // the private pool this is part of; nullptr: the default pools
  bool expandable;     // grows expandable segments
  BlockPool(bool small, PrivatePool* owner_pool, bool grows) : is_small(small), owner(owner_pool), expandable(grows) {}
};

Key BlockSet::key(const Block* b) { return static_cast<Key>(b->size) << 64 | b->addr; }

size_t BlockSet::next_class(size_t c) const {
  if (c >= kClasses) return kClasses;
  size_t w = c / 64;
  u64 bits = nonempty_[w] & (~0ull << (c % 64));
  if (bits == 0) {
    u64 words = w + 1 < 64 ? nonempty_words_ & (~0ull << (w + 1)) : 0;
    if (words == 0) return kClasses;
    w = static_cast<size_t>(__builtin_ctzll(words));
    bits = nonempty_[w];
  }
  return w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
}

size_t BlockSet::prev_class(size_t c) const {
  size_t w = (c - 1) / 64;
  u64 bits = nonempty_[w] & (~0ull >> (63 - (c - 1) % 64));
  if (bits == 0) {
    w = static_cast<size_t>(63 - __builtin_clzll(nonempty_words_ & ((1ull << w) - 1)));
    bits = nonempty_[w];
  }
  return w * 64 + static_cast<size_t>(63 - __builtin_clzll(bits));
}

void BlockSet::insert(Block* b) {
  Key k = key(b);
  size_t c = class_of(b->size);
  std::vector<Entry>& v = classes_[c];
  if (v.empty()) mark(c, true);
  v.insert(v.begin() + static_cast<std::ptrdiff_t>(slot_of(v, k)), Entry{k, b});
  b->cached = true;
}

void BlockSet::remove(Pos p) {
  std::vector<Entry>& v = classes_[p.cls];
  v[p.slot].block->cached = false;
  v.erase(v.begin() + static_cast<std::ptrdiff_t>(p.slot));
  if (v.empty()) mark(p.cls, false);
}

BlockSet::Pos BlockSet::take(Pos p) {
  remove(p);
  return p.slot < classes_[p.cls].size() ? p : Pos{next_class(p.cls + 1), 0};
}

void BlockSet::erase(Block* b) {
  if (!b->cached) return;
  size_t c = class_of(b->size);  // b is in this class: no search beyond it
  remove({c, slot_of(classes_[c], key(b))});
}

std::vector<Block*> BlockSet::all() const {
  std::vector<Block*> out;
  for (Pos p = begin(); p != end(); p = next(p)) out.push_back(at(p));
  return out;
}

u64 ceil_to(u64 x, u64 step) { return (x + step - 1) / step * step; }
int bit_length(u64 x) { return x ? 64 - __builtin_clzll(x) : 0; }

// AddressSpace of blocks.py: free ranges start -> end, segments taken from the top down.
struct AddressSpace {
  std::map<u64, u64> free{{kVaStart, kVaEnd}};
  u64 take(u64 size) {
    size = ceil_to(size, kRoundLarge);
    for (auto it = free.end(); it != free.begin();) {
      --it;
      u64 start = it->first, end = it->second;
      if (end - start >= size) {
        if (end - start == size) free.erase(it);
        else it->second = end - size;
        return end - size;
      }
    }
    throw std::bad_alloc();  // "virtual address space exhausted", as MemoryError
  }
  void give(u64 addr, u64 size) {
    size = ceil_to(size, kRoundLarge);
    u64 start = addr, end = addr + size;
    auto it = free.lower_bound(addr);
    if (it != free.end() && it->first == end) {
      end = it->second;
      it = free.erase(it);
    }
    if (it != free.begin()) {
      auto before = std::prev(it);
      if (before->second == start) {
        start = before->first;
        free.erase(before);
      }
    }
    free[start] = end;
  }
};

struct Config {
  u64 device_memory, overhead;
  bool has_allowed;
  u64 allowed;
  u64 max_split, non_split_rounding, large_segment;
  u64 divisions[16];
  bool divisions_one_rounds_512, expandable, expandable_private;
  double gc_threshold;
};

class Allocator {
 public:
  explicit Allocator(const Config& c) : c_(c) {}
  ~Allocator() {
    for (Block* b : all_blocks_) delete b;
  }

  // counters, allocator.COUNTERS order
  u64 reserved = 0, reserved_peak = 0, allocated = 0, allocated_peak = 0, requested = 0, requested_peak = 0;
  u64 segments = 0, segments_peak = 0, num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0;
  u64 num_device_free = 0, num_sync_all_streams = 0;
  // the driver calls behind those, and the waits for the device (allocator.py's comments say what each counts)
  u64 cuda_mallocs = 0, cuda_malloc_bytes = 0, cuda_frees = 0, cuda_free_bytes = 0, maps = 0, map_bytes = 0;
  u64 unmaps = 0, unmap_bytes = 0, syncs = 0, gc_passes = 0;
  u64 active = 0, active_peak = 0;  // allocated, and freed blocks not yet back in their pool
  // allocator.MARK_COUNTERS, in its order: the driver counters, then the peak reserved so far
  std::vector<u64> mark_counters() const {
    return {cuda_mallocs, cuda_malloc_bytes, cuda_frees,   cuda_free_bytes,   maps,     map_bytes,
            unmaps,       unmap_bytes,       syncs,        num_alloc_retries, gc_passes, reserved_peak};
  }

  Block* malloc(u64 size, i64 stream) {
    u64 rsize = round_size(size);
    bool small = rsize <= kSmallSize;
    BlockPool* pool = get_pool(stream, small);
    Block* block = get_free_block(pool, rsize);
    if (block == nullptr) {
      if (c_.gc_threshold > 0) garbage_collect_cached_blocks();
      u64 alloc_size = get_allocation_size(rsize, small);
      block = alloc_block(pool, rsize, alloc_size, false);
      if (block == nullptr && release_available_cached_blocks(pool, rsize))
        block = alloc_block(pool, rsize, alloc_size, false);
      if (block == nullptr && capturing_ == 0) {  // skipped while a CUDA graph is being captured
        release_cached_blocks();
        block = alloc_block(pool, rsize, alloc_size, true);
      }
      if (block == nullptr) {
        num_ooms += 1;
        return nullptr;
      }
    }
    return alloc_found_block(block, pool, size, rsize);
  }

  void empty_cache() { release_cached_blocks(); }

  // pools.py's GraphPools.event: kinds 3-6 (POOL_BEGIN, POOL_END, POOL_RELEASE, POOL_STREAM) of pool `number`.
  void graph_event(i64 kind, i64 number, i64 stream) {
    auto it = graph_pools_.find(number);
    PrivatePool* pool = it == graph_pools_.end() ? nullptr : it->second.get();
    if (kind == 3) {
      if (pool == nullptr) pool = graph_pools_.emplace(number, std::make_unique<PrivatePool>()).first->second.get();
      pool->use_count += 1;
      pool->capturing += 1;
      capturing_ += 1;
    } else if (pool == nullptr) {
      return;
    } else if (kind == 4 && pool->capturing > 0) {
      pool->capturing -= 1;
      capturing_ -= 1;
    } else if (kind == 5 && pool->use_count > 0) {
      pool->use_count -= 1;
    } else if (kind == 6) {
      pool_of_stream_.emplace(stream, pool);
    }
  }

  // allocator.py's free_requested: out of the allocated bytes now, back in its pool at `free`.
  void free_requested(Block* block) {
    if (block->freed) return;
    block->freed = true;
    allocated -= block->size;
  }

  void free(Block* block) {
    block->allocated = false;
    if (block->freed) block->freed = false;
    else allocated -= block->size;
    active -= block->size;
    requested -= block->requested;
    BlockPool* pool = block->pool;
    Block* prev = block->prev;
    Block* nxt = block->next;
    if (prev != nullptr && !prev->allocated && prev->mapped) {
      pool->blocks.erase(prev);
      absorb_next(prev, block);
      block = prev;
    }
    if (nxt != nullptr && !nxt->allocated && nxt->mapped) {
      pool->blocks.erase(nxt);
      absorb_next(block, nxt);
    }
    if (c_.gc_threshold > 0) block->gc_base = gc_searches_[pool->is_small];
    pool->blocks.insert(block);
  }

 private:
  Config c_;
  std::vector<std::unique_ptr<BlockPool>> large_pools_, small_pools_;  // in creation order
  std::unordered_map<i64, BlockPool*> pool_by_stream_[2];                // [is_small]
  BlockPool* last_pool_[2] = {nullptr, nullptr};  // the pool of the last request of each kind, and its stream
  i64 last_stream_[2] = {0, 0};
  std::vector<Block*> all_blocks_, spare_blocks_;
  std::vector<std::unique_ptr<ExpandableSegment>> segments_;
  AddressSpace va_;
  u64 gc_searches_[2] = {0, 0};  // get_free_block calls per pool kind [is_small], in the default pools
  std::unordered_map<i64, std::unique_ptr<PrivatePool>> graph_pools_;  // by pool number
  std::unordered_map<i64, PrivatePool*> pool_of_stream_;               // the stream indexes in private pools
  u64 capturing_ = 0;                                                  // captures underway

  Block* new_block(u64 addr, u64 size, BlockPool* pool, ExpandableSegment* segment, bool mapped) {
    Block* b;
    if (spare_blocks_.empty()) {
      b = new Block();
      all_blocks_.push_back(b);
    } else {
      b = spare_blocks_.back();
      spare_blocks_.pop_back();
      *b = Block();
    }
    b->addr = addr;
    b->size = size;
    b->pool = pool;
    b->segment = segment;
    b->mapped = mapped;
    return b;
  }
  void delete_block(Block* b) { spare_blocks_.push_back(b); }

  BlockPool* get_pool(i64 stream, bool small) {
    if (last_pool_[small] != nullptr && last_stream_[small] == stream) return last_pool_[small];
    last_stream_[small] = stream;
    return last_pool_[small] = find_pool(stream, small);
  }

  BlockPool* find_pool(i64 stream, bool small) {
    auto& by_stream = pool_by_stream_[small];
    auto it = by_stream.find(stream);
    if (it != by_stream.end()) return it->second;
    auto& pools = small ? small_pools_ : large_pools_;
    auto owner = pool_of_stream_.find(stream);
    PrivatePool* private_pool = owner == pool_of_stream_.end() ? nullptr : owner->second;
    pools.push_back(std::make_unique<BlockPool>(small, private_pool,
                                                private_pool ? c_.expandable_private : c_.expandable));
    by_stream.emplace(stream, pools.back().get());
    return pools.back().get();
  }

  u64 round_size(u64 size) const {
    if (size < kMinBlockSize) return kMinBlockSize;
    int bits = bit_length(size) - 1;
    int interval = bits - 20 < 0 ? 0 : (bits - 20 > 15 ? 15 : bits - 20);
    u64 div = c_.divisions[interval];
    if (div > 1 && size > kMinBlockSize * div) {
      if ((size & (size - 1)) == 0) return size;
      u64 step = (1ull << bits) >> (bit_length(div) - 1);
      return ceil_to(size, step);
    }
    if (div == 1 && !c_.divisions_one_rounds_512 && size > kMinBlockSize) return size;
    return ceil_to(size, kMinBlockSize);
  }

  u64 get_allocation_size(u64 rsize, bool small) const {
    if (small) return kSmallBuffer;
    if (rsize < kMinLargeAlloc) return c_.large_segment;
    return ceil_to(rsize, kRoundLarge);
  }

  static u64 expandable_size(const Block* b) {
    return b->next == nullptr || b->next->mapped ? b->size : b->size + b->next->size;
  }

  Block* get_free_block(BlockPool* pool, u64 rsize) {
    if (c_.gc_threshold > 0 && pool->owner == nullptr) gc_searches_[pool->is_small] += 1;
    BlockSet& blocks = pool->blocks;
    auto it = blocks.lower_bound_size(rsize);
    if (it == blocks.end()) return nullptr;
    if (c_.expandable) {  // best fit by the size a block could grow to
      u64 best = expandable_size(blocks.at(it));
      for (auto next = blocks.next(it); next != blocks.end(); next = blocks.next(next)) {
        u64 size = expandable_size(blocks.at(next));
        if (size >= best) break;
        it = next;
        best = size;
      }
    }
    Block* block = blocks.at(it);
    u64 bsize = block->size, max_split = c_.max_split;
    if (bsize < max_split || (max_split <= rsize && bsize < rsize + c_.non_split_rounding)) {
      blocks.remove(it);
      return block;
    }
    return nullptr;
  }

  Block* alloc_found_block(Block* block, BlockPool* pool, u64 size, u64 rsize) {
    u64 remaining = block->size - rsize;
    bool split = pool->is_small || c_.expandable ? remaining >= kMinBlockSize
                                                 : remaining > kSmallSize && rsize < c_.max_split;
    if (split) {
      Block* rest = new_block(block->addr + rsize, remaining, pool, block->segment, true);
      rest->next = block->next;
      if (rest->next != nullptr) rest->next->prev = rest;
      rest->prev = block;
      block->next = rest;
      block->size = rsize;
      if (c_.gc_threshold > 0) rest->gc_base = gc_searches_[pool->is_small];
      pool->blocks.insert(rest);
    }
    block->allocated = true;
    block->requested = size;
    allocated += block->size;
    if (allocated > allocated_peak) allocated_peak = allocated;
    active += block->size;
    if (active > active_peak) active_peak = active;
    requested += size;
    if (requested > requested_peak) requested_peak = requested;
    return block;
  }

  void absorb_next(Block* lo, Block* hi) {
    lo->size += hi->size;
    lo->next = hi->next;
    if (hi->next != nullptr) hi->next->prev = lo;
    delete_block(hi);
  }

  Block* alloc_block(BlockPool* pool, u64 rsize, u64 alloc_size, bool is_retry) {
    if (is_retry) num_alloc_retries += 1;
    if (c_.has_allowed && reserved + alloc_size > c_.allowed) return nullptr;
    if (pool->expandable) return try_allocate_expandable_block(pool, rsize);
    if (reserved + c_.overhead + alloc_size > c_.device_memory) return nullptr;
    Block* block = new_block(va_.take(alloc_size), alloc_size, pool, nullptr, true);
    grow_reserved(alloc_size);
    cuda_mallocs += 1;
    cuda_malloc_bytes += alloc_size;
    segments += 1;
    if (segments > segments_peak) segments_peak = segments;
    return block;
  }

  void grow_reserved(u64 size) {
    reserved += size;
    if (reserved > reserved_peak) reserved_peak = reserved;
    num_device_alloc += 1;
  }

  void release_block(Block* block) {
    va_.give(block->addr, block->size);
    reserved -= block->size;
    segments -= 1;
    num_device_free += 1;
    cuda_frees += 1;
    cuda_free_bytes += block->size;
    delete_block(block);
  }

  bool release_available_cached_blocks(BlockPool* pool, u64 rsize) {
    if (c_.max_split == kNoLimit || pool->expandable) return false;
    u64 want = rsize > c_.max_split ? rsize : c_.max_split;
    BlockSet& blocks = pool->blocks;
    auto it = blocks.lower_bound_size(want);
    if (it != blocks.end()) {
      Block* block = blocks.at(it);
      blocks.remove(it);
      syncs += 1;
      release_block(block);
      return true;
    }
    u64 released = 0;
    while (released < want && it != blocks.begin() && blocks.size_at(blocks.prev(it)) >= c_.max_split) {
      it = blocks.prev(it);
      Block* block = blocks.at(it);
      released += block->size;
      it = blocks.take(it);
      release_block(block);
    }
    if (released > 0) syncs += 1;
    return released >= want;
  }

  void release_cached_blocks() {
    num_sync_all_streams += 1;
    syncs += 1;
    for (auto* pools : {&large_pools_, &small_pools_}) {
      for (auto& pool : *pools) {
        // pools.py's releasable: a private pool once no graph uses it, the default pools when no capture is underway
        if (pool->owner != nullptr ? pool->owner->use_count > 0 : capturing_ > 0) continue;
        BlockSet& blocks = pool->blocks;
        if (pool->expandable) {
          for (Block* block : blocks.all()) unmap_block(block);
          continue;
        }
        for (auto it = blocks.begin(); it != blocks.end();) {
          Block* block = blocks.at(it);
          if (block->is_split()) {
            it = blocks.next(it);
          } else {
            it = blocks.take(it);
            release_block(block);
          }
        }
      }
    }
  }

  void garbage_collect_cached_blocks() {
    u64 limit = static_cast<u64>(c_.gc_threshold * static_cast<double>(c_.allowed));
    if (reserved <= limit) return;
    u64 target = reserved - limit;
    u64 now = gc_searches_[0];
    std::vector<Block*> candidates;
    for (auto& pool : large_pools_) {
      if (pool->owner != nullptr) continue;
      const BlockSet& blocks = pool->blocks;
      for (auto it = blocks.begin(); it != blocks.end(); it = blocks.next(it)) {
        Block* block = blocks.at(it);
        if (!block->is_split() && block->segment == nullptr) candidates.push_back(block);
      }
    }
    u64 total_age = 0;
    for (Block* b : candidates) total_age += now - b->gc_base;
    u64 count = candidates.size();
    u64 reclaimed = 0;
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
      double threshold = static_cast<double>(total_age) / static_cast<double>(count);
      freed = false;
      std::vector<Block*> kept;
      for (Block* block : candidates) {
        u64 age = now - block->gc_base;
        if (static_cast<double>(age) >= threshold) {
          freed = true;
          reclaimed += block->size;
          total_age -= age;
          count -= 1;
          block->pool->blocks.erase(block);
          release_block(block);
        } else {
          kept.push_back(block);
        }
      }
      candidates.swap(kept);
    }
    if (reclaimed > 0) {
      gc_passes += 1;
      syncs += 1;
    }
  }

  Block* try_allocate_expandable_block(BlockPool* pool, u64 rsize) {
    Block* candidate = find_expandable_block(pool, rsize);
    if (!candidate->mapped) {
      candidate = map_block(candidate, candidate->size < rsize ? candidate->size : rsize);
      if (candidate == nullptr) return nullptr;
    }
    while (candidate->size < rsize) {
      Block* nxt = candidate->next;
      u64 want = rsize - candidate->size;
      candidate = map_block(nxt, want < nxt->size ? want : nxt->size);
      if (candidate == nullptr) return nullptr;
    }
    pool->blocks.erase(candidate);
    return candidate;
  }

  Block* find_expandable_block(BlockPool* pool, u64 rsize) {
    for (Block* start : pool->unmapped) {
      if (start->prev != nullptr && !start->prev->allocated) start = start->prev;
      u64 room = 0;
      Block* block = start;
      while (room < rsize && block != nullptr && !block->allocated) {
        room += block->size;
        block = block->next;
      }
      if (room >= rsize) return start;
    }
    u64 page = pool->is_small ? kSmallBuffer : c_.large_segment;
    u64 total = c_.device_memory < kMaxSegmentSpace ? c_.device_memory : kMaxSegmentSpace;
    u64 size = ceil_to(total + total / 8, page);
    segments_.push_back(std::make_unique<ExpandableSegment>(ExpandableSegment{va_.take(size), size, page}));
    ExpandableSegment* segment = segments_.back().get();
    Block* block = new_block(segment->base, size, pool, segment, false);
    pool->unmapped.insert(block);
    return block;
  }

  Block* map_block(Block* block, u64 size) {
    ExpandableSegment* segment = block->segment;
    BlockPool* pool = block->pool;
    u64 page = segment->page;
    u64 mapped = ceil_to(block->addr + size - segment->base, page) - (block->addr - segment->base);
    if (reserved + c_.overhead + mapped > c_.device_memory) return nullptr;
    pool->unmapped.erase(block);
    block->mapped = true;
    if (mapped < block->size) {
      Block* rest = new_block(block->addr + mapped, block->size - mapped, pool, segment, false);
      rest->prev = block;
      rest->next = block->next;
      if (block->next != nullptr) block->next->prev = rest;
      block->next = rest;
      block->size = mapped;
      pool->unmapped.insert(rest);
    }
    Block* prev = block->prev;
    if (prev != nullptr && !prev->allocated && prev->mapped) {
      pool->blocks.erase(prev);
      absorb_next(prev, block);
      block = prev;
    }
    Block* nxt = block->next;
    if (nxt != nullptr && !nxt->allocated && nxt->mapped) {
      pool->blocks.erase(nxt);
      absorb_next(block, nxt);
    }
    pool->blocks.insert(block);
    grow_reserved(mapped);
    maps += 1;
    map_bytes += mapped;
    return block;
  }

  void unmap_block(Block* block) {
    ExpandableSegment* segment = block->segment;
    BlockPool* pool = block->pool;
    u64 page = segment->page;
    u64 first = ceil_to(block->addr - segment->base, page) / page;
    u64 last = (block->addr + block->size - segment->base) / page;
    if (first >= last) return;
    u64 start = segment->base + first * page, length = (last - first) * page;
    pool->blocks.erase(block);
    u64 end = block->addr + block->size;
    Block* hole;
    if (start > block->addr) {  // the partial page in front stays a free mapped block
      hole = new_block(start, length, pool, segment, false);
      hole->prev = block;
      hole->next = block->next;
      if (block->next != nullptr) block->next->prev = hole;
      block->next = hole;
      block->size = start - block->addr;
      pool->blocks.insert(block);
    } else {
      hole = block;
      hole->mapped = false;
      hole->size = length;
    }
    if (end > start + length) {  // and so does the one behind
      Block* tail = new_block(start + length, end - start - length, pool, segment, true);
      tail->prev = hole;
      tail->next = hole->next;
      if (hole->next != nullptr) hole->next->prev = tail;
      hole->next = tail;
      pool->blocks.insert(tail);
    }
    Block* prev = hole->prev;
    if (prev != nullptr && !prev->mapped) {  // prev stays in the unmapped set: its address is unchanged
      absorb_next(prev, hole);
      hole = prev;
    } else {
      pool->unmapped.insert(hole);
    }
    Block* nxt = hole->next;
    if (nxt != nullptr && !nxt->mapped) {
      pool->unmapped.erase(nxt);
      absorb_next(hole, nxt);
    }
    reserved -= length;
    num_device_free += 1;
    unmaps += 1;
    unmap_bytes += length;
    if (!hole->is_split()) {
      pool->unmapped.erase(hole);
      delete_block(hole);
      va_.give(segment->base, segment->size);
    }
  }
};

// A trace column: a contiguous int64 buffer (a numpy array from simulate.pack), else any sequence of ints.
class Column {
 public:
  bool open(PyObject* obj, const char* name) {
    if (PyObject_CheckBuffer(obj)) {
      if (PyObject_GetBuffer(obj, &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return false;
      has_view_ = true;
      const char* f = view_.format;
      if (view_.itemsize != 8 || f == nullptr || (f[0] != 'l' && f[0] != 'q' && !(f[0] == '<' && f[1] == 'i'))) {
        PyErr_Format(PyExc_TypeError, "%s: expected int64 items", name);
        return false;
      }
      data_ = static_cast<const i64*>(view_.buf);
      size = view_.len / 8;
      return true;
    }
    seq_ = PySequence_Fast(obj, name);
    if (seq_ == nullptr) return false;
    items_ = PySequence_Fast_ITEMS(seq_);
    size = PySequence_Fast_GET_SIZE(seq_);
    return true;
  }
  const i64* raw() const { return data_; }  // the int64 items, or nullptr when they are Python ints
  bool get(Py_ssize_t i, i64* out) const {
    if (data_ != nullptr) {
      *out = data_[i];
      return true;
    }
    *out = PyLong_AsLongLong(items_[i]);
    return !(*out == -1 && PyErr_Occurred());
  }
  ~Column() {
    if (has_view_) PyBuffer_Release(&view_);
    Py_XDECREF(seq_);
  }
  Py_ssize_t size = 0;

 private:
  Py_buffer view_{};
  bool has_view_ = false;
  const i64* data_ = nullptr;
  PyObject* seq_ = nullptr;
  PyObject** items_ = nullptr;
};

// Trace address -> live block: a vector when the addresses are small ids (alloctune's traces number their
// allocations 0, 1, 2, ...), a hash map otherwise.
class LiveBlocks {
 public:
  explicit LiveBlocks(i64 dense_limit) : dense_(dense_limit > 0 ? dense_limit : 0, nullptr), limit_(dense_limit) {}
  void put(i64 addr, Block* b) {
    if (addr >= 0 && addr < limit_) dense_[addr] = b;
    else sparse_[addr] = b;
  }
  Block* get(i64 addr) const {
    if (addr >= 0 && addr < limit_) return dense_[addr];
    auto it = sparse_.find(addr);
    return it == sparse_.end() ? nullptr : it->second;
  }
  Block* pop(i64 addr) {
    if (addr >= 0 && addr < limit_) {
      Block* b = dense_[addr];
      dense_[addr] = nullptr;
      return b;
    }
    auto it = sparse_.find(addr);
    if (it == sparse_.end()) return nullptr;
    Block* b = it->second;
    sparse_.erase(it);
    return b;
  }

 private:
  std::vector<Block*> dense_;
  std::unordered_map<i64, Block*> sparse_;
  i64 limit_;
};

// Marks: event indices in order, none past the trace's end (`n`); the replay takes the mark counters as it
// reaches each one (before replaying that event; `n`: at the end).
bool read_marks(PyObject* obj, Py_ssize_t n, std::vector<i64>* marks) {
  Column column;
  if (!column.open(obj, "marks must be a sequence")) return false;
  for (Py_ssize_t i = 0; i < column.size; ++i) {
    i64 mark;
    if (!column.get(i, &mark)) return false;
    if (mark < 0 || mark > n || (!marks->empty() && mark < marks->back())) {
      PyErr_SetString(PyExc_ValueError, "marks must be event indices in order, within the trace");
      return false;
    }
    marks->push_back(mark);
  }
  return true;
}

// A byte figure of the setting (`unlimited`: or kNoLimit, max_split unset), into `out`; false with OverflowError
// beyond kLargestFigure, which simulate.py answers by replaying on the Python core.
bool read_figure(PyObject* obj, bool unlimited, u64* out) {
  *out = PyLong_AsUnsignedLongLong(obj);  // OverflowError when negative or beyond 64 bits, TypeError if no int
  if (PyErr_Occurred()) return false;
  if (*out >= kLargestFigure && !(unlimited && *out == kNoLimit)) {
    PyErr_SetString(PyExc_OverflowError, "a setting's figure beyond the compiled core's range");
    return false;
  }
  return true;
}

// The trace's four columns by position, then the setting by name: the fields of sim/config.py's AllocatorConfig
// (all but its label; `allowed` None for no limit), whether to stop at the first release-and-retry, and the marks.
PyObject* simulate(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"kinds", "addrs", "sizes", "streams", "device_memory", "overhead", "allowed",
                                "max_split", "non_split_rounding", "large_segment", "divisions",
                                "divisions_one_rounds_512", "expandable", "expandable_private", "gc_threshold",
                                "stop_at_retry", "marks", nullptr};
  PyObject *kinds_obj, *addrs_obj, *sizes_obj, *streams_obj, *allowed_obj, *divisions_obj, *marks_obj;
  PyObject *device_memory, *overhead, *max_split, *non_split_rounding, *large_segment;
  int rounds_512, expandable, expandable_private, stop_at_retry;
  double gc_threshold;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO$OOOOOOOpppdpO", const_cast<char**>(names), &kinds_obj,
                                   &addrs_obj, &sizes_obj, &streams_obj, &device_memory, &overhead, &allowed_obj,
                                   &max_split, &non_split_rounding, &large_segment, &divisions_obj, &rounds_512,
                                   &expandable, &expandable_private, &gc_threshold, &stop_at_retry, &marks_obj))
    return nullptr;
  Config c{};
  c.has_allowed = allowed_obj != Py_None;
  if (!read_figure(device_memory, false, &c.device_memory) || !read_figure(overhead, false, &c.overhead) ||
      (c.has_allowed && !read_figure(allowed_obj, false, &c.allowed)) ||
      !read_figure(max_split, true, &c.max_split) || !read_figure(non_split_rounding, false, &c.non_split_rounding) ||
      !read_figure(large_segment, false, &c.large_segment))
    return nullptr;
  c.divisions_one_rounds_512 = rounds_512;
  c.expandable = expandable;
  c.expandable_private = expandable_private;
  c.gc_threshold = gc_threshold;
  Column divisions;
  if (!divisions.open(divisions_obj, "divisions must be a sequence")) return nullptr;
  if (divisions.size != 16) {
    PyErr_SetString(PyExc_ValueError, "divisions must hold 16 intervals");
    return nullptr;
  }
  for (int i = 0; i < 16; ++i) {
    i64 d;
    if (!divisions.get(i, &d)) return nullptr;
    if (d < 0 || d > kLargestDivisions) {  // 512 * divisions must not wrap
      PyErr_SetString(PyExc_OverflowError, "divisions beyond the compiled core's range");
      return nullptr;
    }
    c.divisions[i] = static_cast<u64>(d);
  }
  Column kinds, addrs, sizes, streams;
  if (!kinds.open(kinds_obj, "kinds must be a sequence") || !addrs.open(addrs_obj, "addrs must be a sequence") ||
      !sizes.open(sizes_obj, "sizes must be a sequence") || !streams.open(streams_obj, "streams must be a sequence"))
    return nullptr;
  Py_ssize_t n = kinds.size;
  if (addrs.size < n || sizes.size < n || streams.size < n) {
    PyErr_SetString(PyExc_ValueError, "trace columns are shorter than its kinds");
    return nullptr;
  }

  std::vector<i64> marks;
  if (!read_marks(marks_obj, n, &marks)) return nullptr;
  std::vector<std::vector<u64>> at_marks;  // the mark counters at each mark the replay reached

  i64 ignored = 0, first_oom = -1, first_retry = -1, replayed = 0;
  std::unique_ptr<Allocator> alloc_owner;
  // The loop, for a way of reading a column's item i (false: a Python error is set). Instantiated twice, so
  // that packed columns are read as plain arrays, with no check per item.
  auto replay_all = [&](auto get) -> bool {
    Allocator& alloc = *alloc_owner;
    LiveBlocks live(static_cast<i64>(n) + 1024);
    size_t next_mark = 0;
    bool stopped = false;
    auto reach = [&](i64 i) {  // the counters at every mark before event i
      for (; next_mark < marks.size() && marks[next_mark] == i; ++next_mark)
        at_marks.push_back(alloc.mark_counters());
    };
    for (Py_ssize_t i = 0; i < n; ++i) {
      reach(i);
      i64 kind, addr;
      if (!get(kinds, i, &kind) || !get(addrs, i, &addr)) return false;
      replayed = i + 1;
      if (kind == 0) {
        i64 size, stream;
        if (!get(sizes, i, &size) || !get(streams, i, &stream)) return false;
        if (size < 0) {
          PyErr_Format(PyExc_ValueError, "cannot allocate a negative size: %lld", static_cast<long long>(size));
          return false;
        }
        if (static_cast<u64>(size) >= kLargestRequest) {
          PyErr_SetString(PyExc_OverflowError, "request size beyond the compiled core's range");
          return false;
        }
        Block* block = alloc.malloc(static_cast<u64>(size), stream);
        if (first_retry < 0 && alloc.num_alloc_retries) {
          first_retry = i;
          if (stop_at_retry) {
            if (block == nullptr) first_oom = i;
            stopped = true;
            break;
          }
        }
        if (block == nullptr) {
          first_oom = i;
          stopped = true;
          break;
        }
        live.put(addr, block);
      } else if (kind == 1) {
        Block* block = live.pop(addr);
        if (block == nullptr) ++ignored;
        else alloc.free(block);
      } else if (kind == 2) {
        alloc.empty_cache();
      } else if (kind == 7) {  // FREE_REQUESTED
        Block* block = live.get(addr);
        if (block != nullptr) alloc.free_requested(block);
      } else {
        i64 stream;
        if (!get(streams, i, &stream)) return false;
        alloc.graph_event(kind, addr, stream);
      }
    }
    if (!stopped) reach(n);
    return true;
  };
  try {
    alloc_owner = std::make_unique<Allocator>(c);
    bool ok;
    if (kinds.raw() && addrs.raw() && sizes.raw() && streams.raw())
      ok = replay_all([](const Column& col, Py_ssize_t i, i64* out) { *out = col.raw()[i]; return true; });
    else
      ok = replay_all([](const Column& col, Py_ssize_t i, i64* out) { return col.get(i, out); });
    if (!ok) return nullptr;
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "simulated virtual address space exhausted");
    return nullptr;
  }
  Allocator& a = *alloc_owner;
  PyObject* reached = PyList_New(0);
  for (const auto& counters : at_marks) {
    PyObject* row = PyTuple_New(static_cast<Py_ssize_t>(counters.size()));
    for (size_t k = 0; k < counters.size(); ++k)
      PyTuple_SET_ITEM(row, static_cast<Py_ssize_t>(k), PyLong_FromUnsignedLongLong(counters[k]));
    PyList_Append(reached, row);
    Py_DECREF(row);
  }
  return Py_BuildValue("(KKKKKKKKKKKKKKKKKKKKKKKKK)LLLLN", a.reserved, a.reserved_peak, a.allocated,
                       a.allocated_peak, a.requested, a.requested_peak, a.segments, a.segments_peak,
                       a.num_alloc_retries, a.num_ooms, a.num_device_alloc, a.num_device_free, a.num_sync_all_streams,
                       a.cuda_mallocs, a.cuda_malloc_bytes, a.cuda_frees, a.cuda_free_bytes, a.maps, a.map_bytes,
                       a.unmaps, a.unmap_bytes, a.syncs, a.gc_passes, a.active, a.active_peak,
                       static_cast<long long>(ignored),
                       static_cast<long long>(first_oom), static_cast<long long>(first_retry),
                       static_cast<long long>(replayed), reached);
}

PyMethodDef methods[] = {
    {"simulate", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(simulate)), METH_VARARGS | METH_KEYWORDS,
     "Replay a trace under one allocator setting (see simulate.py)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", "The compiled core of alloctune's allocator simulator.", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__core() { return PyModule_Create(&module); }
