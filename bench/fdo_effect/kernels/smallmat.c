/*
 * smallmat: a generic small-matrix routine, as in a geometry or physics
 * library: mat_mul(a, b, c, n) multiplies n x n integer matrices for any n,
 * and the library calls it from many places, so it stays one out-of-line
 * function. The workload is almost all 4 x 4 (transforms): 95% of the calls
 * have n = 4, the rest 3 or 5. Shape: a hot generic routine whose loop trip
 * counts come from an argument that is nearly always the same value -- what
 * no offline profile can use (the branch profile only says the loops are
 * short), and what value specialization turns into straight-line 4 x 4 code.
 */
#include "kernel_common.h"

#include <stdlib.h>

enum { NMATS = 1 << 10, CALLS = 1 << 20, MAXN = 5 };

__attribute__((noinline)) static void mat_mul(const int32_t* a, const int32_t* b, int32_t* c,
                                              int n) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      int32_t s = 0;
      for (int k = 0; k < n; ++k)
        s += a[i * n + k] * b[k * n + j];
      c[i * n + j] = s;
    }
}

uint64_t kernel_run(void) {
  Rng rng = {0x5a11ULL};
  int32_t* mats = (int32_t*)malloc(sizeof(int32_t) * NMATS * MAXN * MAXN);
  uint8_t* size = (uint8_t*)malloc(CALLS);
  if (!mats || !size) {
    free(mats);
    free(size);
    return 0;
  }
  for (int i = 0; i < NMATS * MAXN * MAXN; ++i)
    mats[i] = (int32_t)rng_below(&rng, 17) - 8;
  static const uint32_t kWeights[3] = {95, 3, 2};
  for (int i = 0; i < CALLS; ++i) {
    static const uint8_t kSizes[3] = {4, 3, 5};
    size[i] = kSizes[rng_weighted(&rng, kWeights, 3, 100)];
  }
  int32_t out[MAXN * MAXN];
  uint64_t sum = 0;
  for (int i = 0; i < CALLS; ++i) {
    const int32_t* a = mats + (size_t)(i & (NMATS - 1)) * MAXN * MAXN;
    const int32_t* b = mats + (size_t)((i * 7 + 3) & (NMATS - 1)) * MAXN * MAXN;
    const int n = size[i];
    mat_mul(a, b, out, n);
    sum = mix(sum, (uint32_t)out[(i & 3) * n + (i >> 2 & 3)]);
  }
  free(mats);
  free(size);
  return sum;
}
