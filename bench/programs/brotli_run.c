/* The entry fdod calls for the Brotli program (bench/programs/README.md):
 * run(n) makes n KiB of word-like text from a fixed seed, compresses it at
 * quality 6 (window 22), decompresses it, checks the round trip and returns
 * compressed size * 1000003 + a checksum of the text (negative on failure).
 * The same file is built natively with bench_main.h's main() (-DFDO_BENCH_MAIN). */
#include <brotli/decode.h>
#include <brotli/encode.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const words[] = {
    "the",   "profile", "daemon", "compile", "stage",  "guard", "branch", "counter",
    "value", "cache",   "key",    "store",   "worker", "loop",  "object", "program",
    "a",     "of",      "to",     "and",     "in",     "is",    "it",     "for"};

long run(long n) {
  if (n < 1 || n > (1L << 20)) return -1;
  const size_t size = (size_t)n * 1024;
  uint8_t *text = malloc(size);
  uint8_t *packed = malloc(BrotliEncoderMaxCompressedSize(size));
  uint8_t *back = malloc(size);
  long result = -2;
  if (text == NULL || packed == NULL || back == NULL) goto done;
  uint32_t state = 12345;
  size_t at = 0;
  while (at < size) {
    state = state * 1103515245u + 12345u;
    const char *w = words[(state >> 16) % (sizeof words / sizeof words[0])];
    for (; *w && at < size; ++w) text[at++] = (uint8_t)*w;
    if (at < size) text[at++] = (state & 0x700) ? ' ' : '\n';
  }
  size_t packed_size = BrotliEncoderMaxCompressedSize(size);
  if (!BrotliEncoderCompress(6, 22, BROTLI_MODE_TEXT, size, text, &packed_size, packed)) {
    result = -3;
    goto done;
  }
  size_t back_size = size;
  if (BrotliDecoderDecompress(packed_size, packed, &back_size, back) != BROTLI_DECODER_RESULT_SUCCESS ||
      back_size != size || memcmp(back, text, size) != 0) {
    result = -4;
    goto done;
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < size; ++i) sum = (sum * 31 + text[i]) % 1000003;
  result = (long)packed_size * 1000003 + (long)sum;
done:
  free(text);
  free(packed);
  free(back);
  return result;
}

#ifdef FDO_BENCH_MAIN
#include "bench_main.h"
#endif
