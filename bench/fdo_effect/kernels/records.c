/*
 * records: a fixed-width record parser, as in a bank-statement or telemetry
 * importer. parse_record(p, width, fields, out) reads `fields` decimal fields
 * of `width` ASCII digits each; the importer handles several layouts, but the
 * feed it is run on is one layout (width 8, 6 fields) 97% of the time, with a
 * legacy layout (width 6, 8 fields) for the rest. Shape: a hot generic parser
 * whose digit loops depend on two arguments that are nearly always the same
 * values (value specialization unrolls them; a branch profile cannot).
 */
#include "kernel_common.h"

#include <stdlib.h>

enum { NRECS = 1 << 12, PASSES = 480, MAXFIELDS = 8, MAXWIDTH = 8 };

__attribute__((noinline)) static uint64_t parse_record(const uint8_t* p, int width, int fields,
                                                       uint32_t* out) {
  uint64_t check = 0;
  for (int f = 0; f < fields; ++f) {
    uint32_t v = 0;
    for (int d = 0; d < width; ++d)
      v = v * 10 + (uint32_t)(p[f * width + d] - '0');
    out[f] = v;
    check += v;
  }
  return check;
}

uint64_t kernel_run(void) {
  Rng rng = {0x7ec0dULL};
  const size_t rec_bytes = MAXFIELDS * MAXWIDTH;
  uint8_t* text = (uint8_t*)malloc(NRECS * rec_bytes);
  uint8_t* layout = (uint8_t*)malloc(NRECS);
  if (!text || !layout) {
    free(text);
    free(layout);
    return 0;
  }
  for (size_t i = 0; i < NRECS * rec_bytes; ++i)
    text[i] = (uint8_t)('0' + rng_below(&rng, 10));
  static const uint32_t kWeights[2] = {97, 3};
  for (int i = 0; i < NRECS; ++i)
    layout[i] = (uint8_t)rng_weighted(&rng, kWeights, 2, 100);
  uint32_t out[MAXFIELDS];
  uint64_t sum = 0;
  for (int p = 0; p < PASSES; ++p)
    for (int i = 0; i < NRECS; ++i) {
      const int width = layout[i] ? 6 : 8;
      const int fields = layout[i] ? 8 : 6;
      uint64_t c = parse_record(text + (size_t)i * rec_bytes, width, fields, out);
      sum = mix(sum, c ^ out[(i + p) % fields]);
    }
  free(text);
  free(layout);
  return sum;
}
