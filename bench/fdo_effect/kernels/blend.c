/*
 * blend: alpha-blending rows of interleaved pixels, as in an image pipeline
 * that handles any channel count: blend_row(dst, src, pixels, channels,
 * alpha) mixes every channel of every pixel. The pipeline supports grey, RGB
 * and RGBA images, but the images it is fed are RGBA (4 channels) 96% of the
 * time. Shape: an inner loop whose trip count is an argument with a dominant
 * value (value specialization unrolls it and vectorizes the pixel loop; the
 * profile of branches only says the inner loop runs a few times).
 */
#include "kernel_common.h"

#include <stdlib.h>

enum { ROWS = 1 << 9, PIXELS = 256, PASSES = 40, MAXCH = 4 };

__attribute__((noinline)) static void blend_row(uint8_t* dst, const uint8_t* src, int pixels,
                                                int channels, uint32_t alpha) {
  for (int p = 0; p < pixels; ++p)
    for (int c = 0; c < channels; ++c) {
      const int i = p * channels + c;
      dst[i] = (uint8_t)((src[i] * alpha + dst[i] * (256 - alpha)) >> 8);
    }
}

uint64_t kernel_run(void) {
  Rng rng = {0xb1e4dULL};
  const size_t row_bytes = PIXELS * MAXCH;
  uint8_t* src = (uint8_t*)malloc(ROWS * row_bytes);
  uint8_t* dst = (uint8_t*)malloc(ROWS * row_bytes);
  uint8_t* channels = (uint8_t*)malloc(ROWS);
  if (!src || !dst || !channels) {
    free(src);
    free(dst);
    free(channels);
    return 0;
  }
  for (size_t i = 0; i < ROWS * row_bytes; ++i) {
    src[i] = (uint8_t)rng_next(&rng);
    dst[i] = (uint8_t)rng_next(&rng);
  }
  static const uint32_t kWeights[3] = {96, 3, 1};
  static const uint8_t kChannels[3] = {4, 3, 1};
  for (int r = 0; r < ROWS; ++r)
    channels[r] = kChannels[rng_weighted(&rng, kWeights, 3, 100)];
  uint64_t sum = 0;
  for (int p = 0; p < PASSES; ++p) {
    for (int r = 0; r < ROWS; ++r)
      blend_row(dst + (size_t)r * row_bytes, src + (size_t)((r + p) % ROWS) * row_bytes, PIXELS,
                channels[r], 64 + (uint32_t)(p & 127));
    for (int r = 0; r < ROWS; r += 7)
      sum = mix(sum, dst[(size_t)r * row_bytes + (size_t)(p % PIXELS)]);
  }
  free(src);
  free(dst);
  free(channels);
  return sum;
}
