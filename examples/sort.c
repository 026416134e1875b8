/*
 * sort.c: a hybrid sort (a pdqsort-style introsort) as a language runtime's
 * standard library would ship it, run on skewed data: most inputs are nearly
 * sorted, so the cheap paths (already-sorted check, bounded insertion sort)
 * win most of the time and the partitioning path is comparatively cold.
 *
 * Algorithm: if the range is small, insertion sort; otherwise try a bounded
 * insertion sort that gives up after 8 element moves, and fall back to a
 * median-of-3 quicksort partition, with heapsort when recursion gets too deep
 * (guaranteed n log n).
 *
 * Entries:
 *
 *   uint64_t sort_run(void)
 *     Sorts 256 arrays of 16384 int64 values generated from a fixed seed in
 *     four shapes (mostly sorted with a few swaps, sorted with a reversed
 *     tail, sorted runs with random inserts, and, rarely, uniformly random),
 *     verifies each result, and returns a checksum of sampled positions and
 *     the total number of element moves. Returns 0 if a result is unsorted.
 *
 *   int64_t sort_i64(int64_t *data, int64_t n)
 *     Sorts data[0..n) ascending in place and returns the number of element
 *     moves it performed (a measure of how unsorted the input was), or -1 if
 *     n is negative.
 */
#include <stdint.h>
#include <stdlib.h>

typedef struct {
  int64_t moves;
} Stats;

static void insertion_sort(int64_t* a, int64_t lo, int64_t hi, Stats* st) {
  for (int64_t i = lo + 1; i < hi; ++i) {
    int64_t v = a[i];
    int64_t j = i;
    while (j > lo && a[j - 1] > v) {
      a[j] = a[j - 1];
      --j;
    }
    if (j != i) {
      a[j] = v;
      st->moves += i - j;
    }
  }
}

/* Insertion sort that gives up once it has moved more than `budget`
 * elements; returns 1 if the range ended up sorted. */
static int partial_insertion_sort(int64_t* a, int64_t lo, int64_t hi, int64_t budget, Stats* st) {
  int64_t moved = 0;
  for (int64_t i = lo + 1; i < hi; ++i) {
    if (a[i - 1] <= a[i]) continue;
    int64_t v = a[i];
    int64_t j = i;
    while (j > lo && a[j - 1] > v) {
      a[j] = a[j - 1];
      --j;
    }
    a[j] = v;
    moved += i - j;
    st->moves += i - j;
    if (moved > budget) return 0;
  }
  return 1;
}

static void sift_down(int64_t* a, int64_t start, int64_t n, int64_t root, Stats* st) {
  for (;;) {
    int64_t child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && a[start + child] < a[start + child + 1]) ++child;
    if (a[start + root] >= a[start + child]) return;
    int64_t t = a[start + root];
    a[start + root] = a[start + child];
    a[start + child] = t;
    st->moves += 2;
    root = child;
  }
}

static void heap_sort(int64_t* a, int64_t lo, int64_t hi, Stats* st) {
  int64_t n = hi - lo;
  for (int64_t i = n / 2 - 1; i >= 0; --i)
    sift_down(a, lo, n, i, st);
  for (int64_t end = n - 1; end > 0; --end) {
    int64_t t = a[lo];
    a[lo] = a[lo + end];
    a[lo + end] = t;
    st->moves += 2;
    sift_down(a, lo, end, 0, st);
  }
}

static void sort3(int64_t* a, int64_t i, int64_t j, int64_t k, Stats* st) {
  int64_t t;
  if (a[j] < a[i]) {
    t = a[i];
    a[i] = a[j];
    a[j] = t;
    st->moves += 2;
  }
  if (a[k] < a[j]) {
    t = a[j];
    a[j] = a[k];
    a[k] = t;
    st->moves += 2;
  }
  if (a[j] < a[i]) {
    t = a[i];
    a[i] = a[j];
    a[j] = t;
    st->moves += 2;
  }
}

enum { SMALL = 24 };

static void introsort(int64_t* a, int64_t lo, int64_t hi, int depth_left, Stats* st) {
  while (hi - lo > SMALL) {
    /* Already sorted or nearly so: the common case on this workload. */
    if (partial_insertion_sort(a, lo, hi, 8, st)) return;
    if (depth_left-- == 0) {
      heap_sort(a, lo, hi, st);
      return;
    }
    int64_t mid = lo + (hi - lo) / 2;
    sort3(a, lo, mid, hi - 1, st);
    int64_t pivot = a[mid];
    int64_t i = lo, j = hi - 1;
    /* Hoare partition */
    for (;;) {
      while (a[i] < pivot)
        ++i;
      while (a[j] > pivot)
        --j;
      if (i >= j) break;
      int64_t t = a[i];
      a[i] = a[j];
      a[j] = t;
      st->moves += 2;
      ++i;
      --j;
    }
    /* Recurse into the smaller half, loop on the larger (bounded stack). */
    if (j + 1 - lo < hi - (j + 1)) {
      introsort(a, lo, j + 1, depth_left, st);
      lo = j + 1;
    } else {
      introsort(a, j + 1, hi, depth_left, st);
      hi = j + 1;
    }
  }
  insertion_sort(a, lo, hi, st);
}

static int log2_floor(int64_t n) {
  int l = 0;
  while (n > 1) {
    n >>= 1;
    ++l;
  }
  return l;
}

static int64_t sort_impl(int64_t* data, int64_t n) {
  Stats st = {0};
  if (n > 1) introsort(data, 0, n, 2 * log2_floor(n), &st);
  return st.moves;
}

int64_t sort_i64(int64_t* data, int64_t n) {
  if (n < 0) return -1;
  return sort_impl(data, n);
}

typedef struct {
  uint64_t s;
} Rng;
static uint64_t rng_next(Rng* r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint32_t rng_below(Rng* r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * n) >> 32);
}

static void generate(int64_t* a, int64_t n, Rng* r) {
  uint32_t shape = rng_below(r, 16);
  for (int64_t i = 0; i < n; ++i)
    a[i] = i * 4 + (int64_t)(rng_next(r) & 3);
  if (shape < 9) { /* mostly sorted: a few nearby swaps */
    for (int k = 0; k < 12; ++k) {
      int64_t i = rng_below(r, (uint32_t)n - 8);
      int64_t j = i + 1 + rng_below(r, 7);
      int64_t t = a[i];
      a[i] = a[j];
      a[j] = t;
    }
  } else if (shape < 12) { /* sorted with a reversed tail of 16..80 elements */
    int64_t len = 16 + rng_below(r, 64);
    for (int64_t i = 0; i < len / 2; ++i) {
      int64_t t = a[n - 1 - i];
      a[n - 1 - i] = a[n - len + i];
      a[n - len + i] = t;
    }
  } else if (shape < 15) { /* sorted runs with scattered random values */
    for (int k = 0; k < 64; ++k)
      a[rng_below(r, (uint32_t)n)] = (int64_t)rng_below(r, (uint32_t)n * 4);
  } else { /* rare: uniformly random */
    for (int64_t i = 0; i < n; ++i)
      a[i] = (int64_t)(rng_next(r) >> 16);
  }
}

uint64_t sort_run(void) {
  enum { N = 16384, ARRAYS = 256 };
  int64_t* a = (int64_t*)malloc(sizeof(int64_t) * N);
  if (!a) return 0;
  Rng r = {0x50a7ed5eedULL};
  uint64_t h = 0xcbf29ce484222325ULL;
  int64_t moves = 0;
  for (int k = 0; k < ARRAYS; ++k) {
    generate(a, N, &r);
    moves += sort_impl(a, N);
    for (int64_t i = 1; i < N; ++i) {
      if (a[i - 1] > a[i]) {
        free(a);
        return 0;
      }
    }
    for (int64_t i = 0; i < N; i += 997)
      h = (h ^ (uint64_t)a[i]) * 0x100000001b3ULL;
  }
  free(a);
  return h ^ (uint64_t)moves;
}
