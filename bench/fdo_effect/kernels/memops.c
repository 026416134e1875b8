/*
 * memops: a record serialiser, as in a log shipper or an RPC encoder. Each
 * record has a handful of fields whose lengths come from the data; every
 * field is copied into an output buffer with memcpy and padded to 8 bytes
 * with memset. Lengths are skewed: most fields are 8 bytes (integers,
 * timestamps), some 16, a few 1..40 (short strings), so most pads are 0 and
 * the others short. Sizes are only known at run time, so -O2 calls the
 * library for every copy. Shape: hot small memcpy/memset of run-time size
 * with a dominant size (what memop size specialisation can use).
 */
#include "kernel_common.h"

#include <stdlib.h>
#include <string.h>

enum { NFIELDS = 1 << 14, PASSES = 90, SRC_BYTES = 1 << 16 };

uint64_t kernel_run(void) {
  Rng rng = {0x3e3095ULL};
  uint8_t* src = (uint8_t*)malloc(SRC_BYTES + 64);
  uint8_t* out = (uint8_t*)malloc((size_t)NFIELDS * 48);
  uint8_t* len = (uint8_t*)malloc(NFIELDS);
  uint32_t* from = (uint32_t*)malloc(sizeof(uint32_t) * NFIELDS);
  if (!src || !out || !len || !from) {
    free(src);
    free(out);
    free(len);
    free(from);
    return 0;
  }
  for (int i = 0; i < SRC_BYTES + 64; ++i)
    src[i] = (uint8_t)rng_next(&rng);
  static const uint32_t kWeights[4] = {75, 15, 6, 4};
  for (int i = 0; i < NFIELDS; ++i) {
    switch (rng_weighted(&rng, kWeights, 4, 100)) {
    case 0: len[i] = 8; break;
    case 1: len[i] = 16; break;
    case 2: len[i] = (uint8_t)(1 + rng_below(&rng, 8)); break;
    default: len[i] = (uint8_t)(9 + rng_below(&rng, 32)); break;
    }
    from[i] = rng_below(&rng, SRC_BYTES);
  }
  uint64_t sum = 0;
  for (int p = 0; p < PASSES; ++p) {
    size_t off = 0;
    for (int i = 0; i < NFIELDS; ++i) {
      size_t n = len[i];
      memcpy(out + off, src + ((from[i] + (uint32_t)p) & (SRC_BYTES - 1)), n);
      size_t pad = (8 - (n & 7)) & 7;
      memset(out + off + n, 0, pad);
      off += n + pad;
    }
    for (size_t k = 0; k + 8 <= off; k += 4096) {
      uint64_t w;
      memcpy(&w, out + k, 8);
      sum = mix(sum, w);
    }
    sum = mix(sum, off);
  }
  free(src);
  free(out);
  free(len);
  free(from);
  return sum;
}
