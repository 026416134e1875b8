/*
 * lz: an LZ77 compressor and decompressor in the style of LZ4 (hash-table
 * match finder, greedy parsing, token = literal run + match), run on
 * generated log-like text where repeats are common and matches are usually
 * short and near. Shape: a byte-oriented loop whose branches (match found?
 * long literal run? long match? overlapping copy?) depend on the data, with
 * skewed outcomes. The output is decompressed and verified.
 *
 * Format: token byte (literal length hi nibble, match length - 4 lo nibble;
 * 15 means "more length bytes follow, each added, 255 continues"), literals,
 * 2-byte little-endian offset. The last sequence has literals only.
 */
#include "kernel_common.h"

#include <stdlib.h>
#include <string.h>

enum { HASH_BITS = 14, MIN_MATCH = 4, MAX_OFFSET = 65535 };

static uint32_t read32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint32_t hash4(uint32_t v) {
  return (v * 2654435761u) >> (32 - HASH_BITS);
}

static uint8_t* put_length(uint8_t* op, int64_t len) {
  while (len >= 255) {
    *op++ = 255;
    len -= 255;
  }
  *op++ = (uint8_t)len;
  return op;
}

static uint8_t* emit_sequence(uint8_t* op, const uint8_t* lit, int64_t lit_len, int64_t offset,
                              int64_t match_len) {
  uint8_t* token = op++;
  int64_t ml = match_len - MIN_MATCH;
  *token = (uint8_t)((lit_len >= 15 ? 15 : lit_len) << 4);
  if (lit_len >= 15) op = put_length(op, lit_len - 15);
  memcpy(op, lit, (size_t)lit_len);
  op += lit_len;
  if (match_len == 0) return op; /* final literals-only sequence */
  *op++ = (uint8_t)(offset & 255);
  *op++ = (uint8_t)(offset >> 8);
  *token |= (uint8_t)(ml >= 15 ? 15 : ml);
  if (ml >= 15) op = put_length(op, ml - 15);
  return op;
}

/* Returns the compressed size; dst must hold n + n/255 + 16 bytes. */
static int64_t compress(const uint8_t* src, int64_t n, uint8_t* dst, int32_t* table) {
  for (int i = 0; i < (1 << HASH_BITS); ++i)
    table[i] = -1;
  const uint8_t *ip = src, *anchor = src, *end = src + n;
  uint8_t* op = dst;
  if (n >= MIN_MATCH + 8) {
    const uint8_t* limit = end - MIN_MATCH - 8;
    while (ip < limit) {
      uint32_t v = read32(ip);
      uint32_t hsh = hash4(v);
      int32_t cand = table[hsh];
      table[hsh] = (int32_t)(ip - src);
      if (cand < 0 || (ip - src) - cand > MAX_OFFSET || read32(src + cand) != v) {
        ++ip;
        continue;
      }
      /* Extend the match forward. */
      const uint8_t* m = src + cand;
      int64_t len = MIN_MATCH;
      while (ip + len < end - 8 && ip[len] == m[len])
        ++len;
      op = emit_sequence(op, anchor, ip - anchor, ip - m, len);
      /* Index a position inside the match so the next repeat is found. */
      if (len > 8) table[hash4(read32(ip + len - 2))] = (int32_t)(ip + len - 2 - src);
      ip += len;
      anchor = ip;
    }
  }
  op = emit_sequence(op, anchor, end - anchor, 0, 0);
  return op - dst;
}

/* Returns the decompressed size, or -1 on malformed input. */
static int64_t decompress(const uint8_t* src, int64_t n, uint8_t* dst, int64_t cap) {
  const uint8_t *ip = src, *end = src + n;
  uint8_t *op = dst, *oend = dst + cap;
  while (ip < end) {
    uint8_t token = *ip++;
    int64_t lit = token >> 4;
    if (lit == 15) {
      uint8_t b;
      do {
        if (ip >= end) return -1;
        b = *ip++;
        lit += b;
      } while (b == 255);
    }
    if (lit > end - ip || lit > oend - op) return -1;
    memcpy(op, ip, (size_t)lit);
    op += lit;
    ip += lit;
    if (ip >= end) break; /* last sequence */
    if (end - ip < 2) return -1;
    int64_t offset = ip[0] | (ip[1] << 8);
    ip += 2;
    if (offset == 0 || offset > op - dst) return -1;
    int64_t ml = token & 15;
    if (ml == 15) {
      uint8_t b;
      do {
        if (ip >= end) return -1;
        b = *ip++;
        ml += b;
      } while (b == 255);
    }
    ml += MIN_MATCH;
    if (ml > oend - op) return -1;
    const uint8_t* m = op - offset;
    if (offset >= ml) {
      memcpy(op, m, (size_t)ml);
      op += ml;
    } else {
      /* Overlapping copy (run-length-like): byte by byte. */
      for (int64_t i = 0; i < ml; ++i)
        op[i] = m[i];
      op += ml;
    }
  }
  return op - dst;
}

/* Log-like text: timestamps, a few levels, a few message templates with
 * numbers, occasional random noise. */
static int64_t gen_text(uint8_t* buf, int64_t cap, Rng* r) {
  static const char* const levels[] = {"INFO ", "INFO ", "INFO ", "DEBUG", "WARN ", "ERROR"};
  static const char* const msgs[] = {"request served path=/api/v1/items status=200 bytes=",
                                     "cache hit key=session: user=",
                                     "request served path=/static/app.js status=304 bytes=",
                                     "connection closed by peer after idle ms=",
                                     "slow query table=orders rows=",
                                     "retrying upstream attempt="};
  int64_t len = 0;
  uint32_t t = 1700000000;
  while (len < cap - 256) {
    t += rng_below(r, 3);
    char line[200];
    int n = 0;
    uint32_t x = t;
    char digits[12];
    int nd = 0;
    do {
      digits[nd++] = (char)('0' + x % 10);
      x /= 10;
    } while (x);
    while (nd)
      line[n++] = digits[--nd];
    line[n++] = ' ';
    const char* lv = levels[rng_geometric(r, 5)];
    while (*lv)
      line[n++] = *lv++;
    line[n++] = ' ';
    const char* m = msgs[rng_geometric(r, 5)];
    while (*m)
      line[n++] = *m++;
    x = rng_below(r, 1u << (4 * rng_geometric(r, 5) + 4));
    nd = 0;
    do {
      digits[nd++] = (char)('0' + x % 10);
      x /= 10;
    } while (x);
    while (nd)
      line[n++] = digits[--nd];
    if (rng_below(r, 16) == 0) { /* rare high-entropy tail */
      line[n++] = ' ';
      for (int i = 0; i < 12; ++i)
        line[n++] = (char)('!' + rng_below(r, 90));
    }
    line[n++] = '\n';
    memcpy(buf + len, line, (size_t)n);
    len += n;
  }
  return len;
}

uint64_t kernel_run(void) {
  enum { CAP = 1 << 20, PASSES = 10 };
  uint8_t* text = (uint8_t*)malloc(CAP);
  uint8_t* comp = (uint8_t*)malloc(CAP + CAP / 255 + 16);
  uint8_t* back = (uint8_t*)malloc(CAP);
  int32_t* table = (int32_t*)malloc(sizeof(int32_t) << HASH_BITS);
  if (!text || !comp || !back || !table) {
    free(text);
    free(comp);
    free(back);
    free(table);
    return 0;
  }
  Rng r = {0x1277ULL};
  int64_t n = gen_text(text, CAP, &r);
  uint64_t h = mix(0, (uint64_t)n);
  for (int pass = 0; pass < PASSES; ++pass) {
    /* Each pass compresses a different window so the work is not identical. */
    int64_t off = pass * 4096;
    int64_t clen = compress(text + off, n - off, comp, table);
    int64_t dlen = decompress(comp, clen, back, CAP);
    int ok = dlen == n - off && memcmp(back, text + off, (size_t)(n - off)) == 0;
    h = mix(h, (uint64_t)clen);
    h = mix(h, (uint64_t)ok);
    uint64_t s = 0;
    for (int64_t i = 0; i < clen; i += 61)
      s = s * 31 + comp[i];
    h = mix(h, s);
  }
  free(text);
  free(comp);
  free(back);
  free(table);
  return h;
}
