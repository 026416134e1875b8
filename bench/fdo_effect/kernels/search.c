/*
 * search: IP-address-to-region lookup, as in a GeoIP or routing table. The
 * table is a sorted array of 20000 disjoint address ranges; a query first
 * probes a small most-recently-used cache (linear scan with early exit),
 * then a per-/8 "hint" index narrows the binary search, and finally a short
 * linear scan handles the few ranges the hint leaves. Queries are skewed: a
 * handful of ranges (big CDNs, the local network) receive most traffic and
 * stay in the MRU cache; a small fraction of addresses fall in no range (the
 * miss path). Shape: searches with data-dependent early exits.
 */
#include "kernel_common.h"

#include <stdlib.h>

typedef struct {
  uint32_t lo, hi; /* inclusive */
  uint32_t region;
} Range;

enum { NRANGES = 20000, MRU = 8, QUERIES = 1 << 20 };

typedef struct {
  uint32_t lo[MRU], hi[MRU], region[MRU];
  uint32_t hits[MRU];
  int n;
} Mru;

/* Returns the region for addr or UINT32_MAX. */
static uint32_t mru_probe(Mru* m, uint32_t addr) {
  for (int i = 0; i < m->n; ++i) {
    if (addr >= m->lo[i] && addr <= m->hi[i]) {
      m->hits[i]++;
      /* Move a hit one slot toward the front: hot entries bubble up. */
      if (i > 0 && m->hits[i] > m->hits[i - 1]) {
        uint32_t t;
        t = m->lo[i];
        m->lo[i] = m->lo[i - 1];
        m->lo[i - 1] = t;
        t = m->hi[i];
        m->hi[i] = m->hi[i - 1];
        m->hi[i - 1] = t;
        t = m->region[i];
        m->region[i] = m->region[i - 1];
        m->region[i - 1] = t;
        t = m->hits[i];
        m->hits[i] = m->hits[i - 1];
        m->hits[i - 1] = t;
        return m->region[i - 1];
      }
      return m->region[i];
    }
  }
  return UINT32_MAX;
}

static void mru_insert(Mru* m, const Range* r) {
  int slot = m->n < MRU ? m->n++ : MRU - 1; /* replace the coldest (last) */
  m->lo[slot] = r->lo;
  m->hi[slot] = r->hi;
  m->region[slot] = r->region;
  m->hits[slot] = 0;
}

/* First index whose hi >= addr within [lo, hi), by binary search. */
static int lower_bound_hi(const Range* t, int lo, int hi, uint32_t addr) {
  while (hi - lo > 8) {
    int mid = lo + (hi - lo) / 2;
    if (t[mid].hi < addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  /* Short tail: linear scan with early exit. */
  while (lo < hi && t[lo].hi < addr)
    ++lo;
  return lo;
}

static uint32_t table_lookup(const Range* t, const int* hint, uint32_t addr, const Range** found) {
  uint32_t top = addr >> 24;
  int lo = hint[top], hi = hint[top + 1] + 1;
  if (hi > NRANGES) hi = NRANGES;
  int i = lower_bound_hi(t, lo, hi, addr);
  if (i < NRANGES && t[i].lo <= addr && addr <= t[i].hi) {
    *found = &t[i];
    return t[i].region;
  }
  *found = NULL;
  return UINT32_MAX;
}

uint64_t kernel_run(void) {
  Range* t = (Range*)malloc(sizeof(Range) * NRANGES);
  uint32_t* queries = (uint32_t*)malloc(sizeof(uint32_t) * QUERIES);
  int* hint = (int*)malloc(sizeof(int) * 257);
  if (!t || !queries || !hint) {
    free(t);
    free(queries);
    free(hint);
    return 0;
  }
  Rng r = {0x5ea4c4ULL};

  /* Disjoint ranges with gaps, increasing over the address space; sizes
   * shrink near the top so the table can never wrap around 2^32. */
  uint32_t addr = 1u << 24;
  for (int i = 0; i < NRANGES; ++i) {
    uint32_t gap =
        rng_below(&r, 64) == 0 ? (1u << 20) + rng_below(&r, 1 << 20) : rng_below(&r, 4096);
    uint32_t size = 2048u << rng_geometric(&r, 10);
    if (addr > 0xf0000000u) {
      gap = 1;
      size = 256;
    }
    addr += gap;
    t[i].lo = addr;
    t[i].hi = addr + size - 1;
    t[i].region = rng_below(&r, 250);
    addr += size;
  }
  /* hint[b] = first range whose hi reaches top byte b: a range holding an
   * address with top byte b lies in [hint[b], hint[b + 1]]. */
  int j = 0;
  for (int b = 0; b <= 256; ++b) {
    uint64_t start = (uint64_t)b << 24;
    while (j < NRANGES && (uint64_t)t[j].hi < start)
      ++j;
    hint[b] = j;
  }

  /* Queries: 70% to 6 hot ranges, 25% uniform over ranges, 5% anywhere
   * (mostly misses). */
  int hot[6];
  for (int k = 0; k < 6; ++k)
    hot[k] = (int)rng_below(&r, NRANGES);
  for (int q = 0; q < QUERIES; ++q) {
    uint32_t k = rng_below(&r, 100);
    const Range* rg;
    if (k < 70)
      rg = &t[hot[rng_geometric(&r, 5)]];
    else if (k < 95)
      rg = &t[rng_below(&r, NRANGES)];
    else {
      queries[q] = (uint32_t)rng_next(&r);
      continue;
    }
    queries[q] = rg->lo + rng_below(&r, rg->hi - rg->lo + 1);
  }

  Mru m = {{0}, {0}, {0}, {0}, 0};
  uint64_t h = 0, misses = 0, mru_hits = 0;
  uint32_t region_hist[256] = {0};
  for (int q = 0; q < QUERIES; ++q) {
    uint32_t a = queries[q];
    uint32_t region = mru_probe(&m, a);
    if (region != UINT32_MAX) {
      mru_hits++;
    } else {
      const Range* found;
      region = table_lookup(t, hint, a, &found);
      if (found)
        mru_insert(&m, found);
      else
        misses++;
    }
    region_hist[region & 255]++;
    h += region;
  }
  h = mix(h, misses);
  h = mix(h, mru_hits);
  for (int i = 0; i < 256; ++i)
    h = mix(h, region_hist[i]);
  free(t);
  free(queries);
  free(hint);
  return h;
}
