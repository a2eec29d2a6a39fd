// The compiled core of the simulator: `allocator.py`'s Allocator and `simulate.py`'s replay loop in C++, with
// the structures of c10/cuda/CUDACachingAllocator.cpp (Block linked in address order within its segment,
// BlockPool holding std::sets of cached blocks ordered by (size, address) and of unmapped blocks by address,
// ExpandableSegment). Pools are per stream, as in allocator.py, so the stream that leads upstream's
// comparator is constant within a set. Every decision mirrors allocator.py line for line; results must be
// identical (tests/test_sim_cores.py), so change both together.
//
// Entry point: simulate(kinds, addrs, sizes, streams, device_memory, overhead, allowed (-1: none), max_split,
// non_split_rounding, large_segment, divisions (16 ints), divisions_one_rounds_512, expandable, gc_threshold,
// stop_at_retry) -> (counters (allocator.COUNTERS order), ignored_frees, first_oom, first_retry, replayed).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

struct BlockPool;
struct Block;

struct ExpandableSegment {
  u64 base, size, page;
};

// An entry of a pool's set of cached blocks carries the block's (size, address), so that a search compares
// without reading the blocks themselves (half the cache misses of a set of Block* with upstream's comparator).
struct SizeKey {
  u64 size, addr;
  Block* block;
};
struct BlockComparatorSize {
  bool operator()(const SizeKey& a, const SizeKey& b) const {
    // (size, addr) as one 128-bit number: one comparison, no branch on whether the sizes tie
    using u128 = unsigned __int128;
    return (static_cast<u128>(a.size) << 64 | a.addr) < (static_cast<u128>(b.size) << 64 | b.addr);
  }
};
struct BlockComparatorAddress {
  bool operator()(const Block* a, const Block* b) const;
};

// The sets' nodes come from a free list of equal-sized slots owned by the allocator: a replay inserts and
// erases a node for nearly every event, and the general-purpose heap is what would cost the most.
class NodeArena {
 public:
  void* get(size_t bytes) {
    if (bytes != slot_) {
      if (slot_ != 0) return ::operator new(bytes);
      slot_ = bytes < sizeof(void*) ? sizeof(void*) : bytes;
    }
    if (free_ == nullptr) refill();
    void* p = free_;
    free_ = *static_cast<void**>(free_);
    return p;
  }
  void put(void* p, size_t bytes) {
    if (bytes != slot_) return ::operator delete(p);
    *static_cast<void**>(p) = free_;
    free_ = p;
  }

 private:
  size_t slot_ = 0;
  void* free_ = nullptr;
  std::vector<std::unique_ptr<char[]>> chunks_;
  void refill() {
    constexpr size_t kSlots = 4096;
    chunks_.emplace_back(new char[slot_ * kSlots]);
    char* chunk = chunks_.back().get();
    for (size_t i = 0; i < kSlots; ++i) put(chunk + i * slot_, slot_);
  }
};

template <class T>
struct ArenaAllocator {
  using value_type = T;
  NodeArena* arena;
  explicit ArenaAllocator(NodeArena* a) : arena(a) {}
  template <class U>
  ArenaAllocator(const ArenaAllocator<U>& other) : arena(other.arena) {}
  T* allocate(size_t n) { return static_cast<T*>(arena->get(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { arena->put(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const ArenaAllocator<U>& other) const { return arena == other.arena; }
  template <class U>
  bool operator!=(const ArenaAllocator<U>& other) const { return arena != other.arena; }
};

// Cached blocks ordered by (size, address). A block's size must not change while it is in the set.
class BlockSet : public std::set<SizeKey, BlockComparatorSize, ArenaAllocator<SizeKey>> {
 public:
  using Base = std::set<SizeKey, BlockComparatorSize, ArenaAllocator<SizeKey>>;
  using Base::Base;
  void insert(Block* b);
  void erase(Block* b);
  iterator take(iterator it);  // erase at `it`; returns the next position
  iterator lower_bound_size(u64 size) { return lower_bound(SizeKey{size, 0, nullptr}); }
};
using AddrSet = std::set<Block*, BlockComparatorAddress, ArenaAllocator<Block*>>;

struct Block {
  u64 addr = 0, size = 0, requested = 0, gc_base = 0;
  BlockPool* pool = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  ExpandableSegment* segment = nullptr;
  bool allocated = false, mapped = true;
  bool cached = false;      // in its pool's `blocks` set, at `where`
  BlockSet::iterator where;  // kept so that taking a block off the set needs no search
  bool is_split() const { return prev != nullptr || next != nullptr; }
};

bool BlockComparatorAddress::operator()(const Block* a, const Block* b) const { return a->addr < b->addr; }

struct BlockPool {
  bool is_small;
  BlockSet blocks;
  AddrSet unmapped;
  BlockPool(bool small, NodeArena* arena)
      : is_small(small), blocks(ArenaAllocator<SizeKey>(arena)), unmapped(ArenaAllocator<Block*>(arena)) {}
};

void BlockSet::insert(Block* b) {
  b->where = Base::insert(SizeKey{b->size, b->addr, b}).first;
  b->cached = true;
}
BlockSet::iterator BlockSet::take(iterator it) {
  it->block->cached = false;
  return Base::erase(it);
}
void BlockSet::erase(Block* b) {
  if (!b->cached) return;
  Base::erase(b->where);
  b->cached = false;
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
  bool divisions_one_rounds_512, expandable;
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
      if (block == nullptr) {
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

  void free(Block* block) {
    block->allocated = false;
    allocated -= block->size;
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
  NodeArena arena_;  // before the pools: they give their nodes back to it when destroyed
  std::vector<std::unique_ptr<BlockPool>> large_pools_, small_pools_;  // in creation order
  std::unordered_map<i64, BlockPool*> pool_by_stream_[2];                // [is_small]
  BlockPool* last_pool_[2] = {nullptr, nullptr};  // the pool of the last request of each kind, and its stream
  i64 last_stream_[2] = {0, 0};
  std::vector<Block*> all_blocks_, spare_blocks_;
  std::vector<std::unique_ptr<ExpandableSegment>> segments_;
  AddressSpace va_;
  u64 gc_searches_[2] = {0, 0};  // get_free_block calls per pool kind [is_small]

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
    pools.push_back(std::make_unique<BlockPool>(small, &arena_));
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
    if (c_.gc_threshold > 0) gc_searches_[pool->is_small] += 1;
    auto it = pool->blocks.lower_bound_size(rsize);
    if (it == pool->blocks.end()) return nullptr;
    if (c_.expandable) {  // best fit by the size a block could grow to
      u64 best = expandable_size(it->block);
      for (auto next = std::next(it); next != pool->blocks.end(); ++next) {
        u64 size = expandable_size(next->block);
        if (size >= best) break;
        it = next;
        best = size;
      }
    }
    Block* block = it->block;
    u64 bsize = block->size, max_split = c_.max_split;
    if (bsize < max_split || (max_split <= rsize && bsize < rsize + c_.non_split_rounding)) {
      pool->blocks.take(it);
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
    if (c_.expandable) return try_allocate_expandable_block(pool, rsize);
    if (reserved + c_.overhead + alloc_size > c_.device_memory) return nullptr;
    Block* block = new_block(va_.take(alloc_size), alloc_size, pool, nullptr, true);
    grow_reserved(alloc_size);
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
    delete_block(block);
  }

  bool release_available_cached_blocks(BlockPool* pool, u64 rsize) {
    if (c_.max_split == kNoLimit || c_.expandable) return false;
    u64 want = rsize > c_.max_split ? rsize : c_.max_split;
    auto it = pool->blocks.lower_bound_size(want);
    if (it != pool->blocks.end()) {
      Block* block = it->block;
      pool->blocks.take(it);
      release_block(block);
      return true;
    }
    u64 released = 0;
    while (released < want && it != pool->blocks.begin() && std::prev(it)->size >= c_.max_split) {
      --it;
      Block* block = it->block;
      released += block->size;
      it = pool->blocks.take(it);
      release_block(block);
    }
    return released >= want;
  }

  void release_cached_blocks() {
    num_sync_all_streams += 1;
    for (auto* pools : {&large_pools_, &small_pools_}) {
      for (auto& pool : *pools) {
        if (c_.expandable) {
          std::vector<SizeKey> cached(pool->blocks.begin(), pool->blocks.end());
          for (const SizeKey& entry : cached) unmap_block(entry.block);
          continue;
        }
        for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
          Block* block = it->block;
          if (block->is_split()) {
            ++it;
          } else {
            it = pool->blocks.take(it);
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
    for (auto& pool : large_pools_)
      for (const SizeKey& entry : pool->blocks)
        if (!entry.block->is_split() && entry.block->segment == nullptr) candidates.push_back(entry.block);
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

PyObject* simulate(PyObject*, PyObject* args) {
  PyObject *kinds_obj, *addrs_obj, *sizes_obj, *streams_obj, *divisions_obj;
  unsigned long long device_memory, overhead, max_split, non_split_rounding, large_segment;
  long long allowed;
  int rounds_512, expandable, stop_at_retry;
  double gc_threshold;
  if (!PyArg_ParseTuple(args, "OOOOKKLKKKOppdp", &kinds_obj, &addrs_obj, &sizes_obj, &streams_obj, &device_memory,
                        &overhead, &allowed, &max_split, &non_split_rounding, &large_segment, &divisions_obj,
                        &rounds_512, &expandable, &gc_threshold, &stop_at_retry))
    return nullptr;
  Config c{};
  c.device_memory = device_memory;
  c.overhead = overhead;
  c.has_allowed = allowed >= 0;
  c.allowed = allowed >= 0 ? static_cast<u64>(allowed) : 0;
  c.max_split = max_split;
  c.non_split_rounding = non_split_rounding;
  c.large_segment = large_segment;
  c.divisions_one_rounds_512 = rounds_512;
  c.expandable = expandable;
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

  i64 ignored = 0, first_oom = -1, first_retry = -1, replayed = 0;
  std::unique_ptr<Allocator> alloc_owner;
  // The loop, for a way of reading a column's item i (false: a Python error is set). Instantiated twice, so
  // that packed columns are read as plain arrays, with no check per item.
  auto replay_all = [&](auto get) -> bool {
    Allocator& alloc = *alloc_owner;
    LiveBlocks live(static_cast<i64>(n) + 1024);
    for (Py_ssize_t i = 0; i < n; ++i) {
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
            break;
          }
        }
        if (block == nullptr) {
          first_oom = i;
          break;
        }
        live.put(addr, block);
      } else {
        Block* block = live.pop(addr);
        if (block == nullptr) ++ignored;
        else alloc.free(block);
      }
    }
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
  return Py_BuildValue("(KKKKKKKKKKKKK)LLLL", a.reserved, a.reserved_peak, a.allocated, a.allocated_peak,
                       a.requested, a.requested_peak, a.segments, a.segments_peak, a.num_alloc_retries, a.num_ooms,
                       a.num_device_alloc, a.num_device_free, a.num_sync_all_streams, static_cast<long long>(ignored),
                       static_cast<long long>(first_oom), static_cast<long long>(first_retry),
                       static_cast<long long>(replayed));
}

PyMethodDef methods[] = {
    {"simulate", simulate, METH_VARARGS, "Replay a trace under one allocator setting (see simulate.py)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", "The compiled core of alloctune's allocator simulator.", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__core() { return PyModule_Create(&module); }
