/*
 * kernel_common.h: what every FDO-effect kernel shares. Header-only and
 * static, so each kernel stays one self-contained module for fdod (one .c in,
 * one .ll out) with no global state: all data is built inside kernel_run.
 *
 * Every kernel defines `uint64_t kernel_run(void)`: a fixed, deterministic
 * amount of work (about 30-100 ms at -O2 on one core) returning a checksum
 * that must not depend on the compiler, the flags or the profile.
 */
#ifndef FDO_BENCH_KERNEL_COMMON_H
#define FDO_BENCH_KERNEL_COMMON_H

#include <stdint.h>

uint64_t kernel_run(void);

typedef struct {
  uint64_t s;
} Rng;

/* splitmix64: small state, fast, good statistical quality for workloads. */
static inline uint64_t rng_next(Rng* r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, n) without division (Lemire's multiply-shift). */
static inline uint32_t rng_below(Rng* r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Geometric in [0, cap]: P(k) = 2^-(k+1). The cheapest strong skew there is:
 * rank 0 half the time, rank 1 a quarter, ... */
static inline uint32_t rng_geometric(Rng* r, uint32_t cap) {
  uint32_t k = (uint32_t)__builtin_ctzll(rng_next(r) | (1ULL << 63));
  return k > cap ? cap : k;
}

/* Picks index i with probability weights[i] / sum(weights). */
static inline uint32_t rng_weighted(Rng* r, const uint32_t* weights, uint32_t n, uint32_t total) {
  uint32_t x = rng_below(r, total);
  for (uint32_t i = 0; i < n; ++i) {
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  return n - 1;
}

static inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v;
  h *= 0x100000001b3ULL;
  return h ^ (h >> 29);
}

#endif
