/*
 * ifchain: a packet classifier written as a first-match rule chain, the way
 * firewall and routing rules are usually compiled: an if/else-if chain in
 * rule order. The traffic is skewed (most packets are HTTPS, which matches the
 * ninth rule), rare classes take a heavy logging path, and every class updates
 * a token bucket. Shape: long if-chains whose hot exit is late, plus cold
 * code inline in the hot loop.
 */
#include "kernel_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P_ICMP = 1, P_TCP = 6, P_UDP = 17, P_GRE = 47 };
enum { F_SYN = 1, F_ACK = 2, F_FIN = 4, F_RST = 8 };

enum Class {
  C_ICMP,
  C_DNS,
  C_NTP,
  C_SSH,
  C_SMTP,
  C_INTERNAL_ALT,
  C_HTTP,
  C_HTTPS_NEW,
  C_HTTPS,
  C_QUIC,
  C_GRE,
  C_HIGH_PORT,
  C_BOGON,
  C_OTHER,
  C_COUNT
};

typedef struct {
  uint32_t src, dst;
  uint16_t sport, dport;
  uint16_t len;
  uint8_t proto, flags;
} Pkt;

typedef struct {
  int64_t tokens;
  int64_t rate;
  int64_t burst;
  uint64_t passed, dropped, bytes;
} Bucket;

static int classify(const Pkt* p) {
  if (p->proto == P_ICMP) return C_ICMP;
  if (p->proto == P_UDP && p->dport == 53) return C_DNS;
  if (p->proto == P_UDP && p->dport == 123) return C_NTP;
  if (p->proto == P_TCP && p->dport == 22) return C_SSH;
  if (p->proto == P_TCP && (p->dport == 25 || p->dport == 587)) return C_SMTP;
  if ((p->src >> 24) == 10 && p->dport >= 8000 && p->dport < 9000) return C_INTERNAL_ALT;
  if (p->proto == P_TCP && p->dport == 80) return C_HTTP;
  if (p->proto == P_TCP && p->dport == 443 && (p->flags & F_SYN) && !(p->flags & F_ACK))
    return C_HTTPS_NEW;
  if (p->proto == P_TCP && p->dport == 443) return C_HTTPS;
  if (p->proto == P_UDP && p->dport == 443) return C_QUIC;
  if (p->proto == P_GRE) return C_GRE;
  if (p->dport >= 49152) return C_HIGH_PORT;
  if ((p->src >> 24) == 0 || (p->src >> 24) == 127 || (p->src >> 28) == 0xe) return C_BOGON;
  return C_OTHER;
}

/* Rare path: build a log line the way a real classifier would (formatting
 * is expensive, which is exactly why it must stay out of the hot layout). */
static uint64_t log_event(char* ring, int* ring_pos, const Pkt* p, int cls, const char* why) {
  char line[128];
  int n = snprintf(line, sizeof line, "%s class=%d %u.%u.%u.%u:%u -> %u.%u.%u.%u:%u len=%u", why,
                   cls, p->src >> 24, (p->src >> 16) & 255, (p->src >> 8) & 255, p->src & 255,
                   p->sport, p->dst >> 24, (p->dst >> 16) & 255, (p->dst >> 8) & 255, p->dst & 255,
                   p->dport, p->len);
  if (n < 0) return 0;
  if (n >= (int)sizeof line) n = (int)sizeof line - 1;
  if (*ring_pos + n > 4096) *ring_pos = 0;
  memcpy(ring + *ring_pos, line, (size_t)n);
  *ring_pos += n;
  uint64_t h = 0;
  for (int i = 0; i < n; ++i)
    h = h * 31 + (uint8_t)line[i];
  return h;
}

static void gen_packet(Rng* r, Pkt* p) {
  /* Traffic mix (per 1000): HTTPS 610, HTTP 140, QUIC 90, DNS 60, new HTTPS
   * 40, internal-alt 20, high port 15, SSH 10, NTP 5, SMTP 4, ICMP 3, GRE 1,
   * bogon 1, other 1. */
  static const uint32_t weights[] = {610, 140, 90, 60, 40, 20, 15, 10, 5, 4, 3, 1, 1, 1};
  uint32_t k = rng_weighted(r, weights, 14, 1000);
  uint64_t x = rng_next(r);
  p->src = (uint32_t)(0x5d000000u | (x & 0x00ffffffu));
  p->dst = (uint32_t)(0xc0a80000u | ((x >> 24) & 0xffffu));
  p->sport = (uint16_t)(1024 + ((x >> 40) % 60000));
  p->len = (uint16_t)(40 + ((x >> 52) & 1023));
  p->flags = F_ACK;
  p->proto = P_TCP;
  switch (k) {
  case 0:
    p->dport = 443;
    break;
  case 1:
    p->dport = 80;
    break;
  case 2:
    p->proto = P_UDP;
    p->dport = 443;
    break;
  case 3:
    p->proto = P_UDP;
    p->dport = 53;
    break;
  case 4:
    p->dport = 443;
    p->flags = F_SYN;
    break;
  case 5:
    p->src = 0x0a000000u | (p->src & 0xffffffu);
    p->dport = (uint16_t)(8000 + (x & 511));
    break;
  case 6:
    p->dport = (uint16_t)(49152 + (x & 8191));
    break;
  case 7:
    p->dport = 22;
    break;
  case 8:
    p->proto = P_UDP;
    p->dport = 123;
    break;
  case 9:
    p->dport = 25;
    break;
  case 10:
    p->proto = P_ICMP;
    p->dport = 0;
    break;
  case 11:
    p->proto = P_GRE;
    p->dport = 0;
    break;
  case 12:
    p->src = 0x7f000001u;
    p->dport = 1234;
    break;
  default:
    p->dport = (uint16_t)(1024 + (x & 4095));
    break;
  }
}

uint64_t kernel_run(void) {
  enum { NPKT = 1 << 16, PASSES = 36 };
  Pkt* pkts = (Pkt*)malloc(sizeof(Pkt) * NPKT);
  char* ring = (char*)malloc(4096 + 128);
  if (!pkts || !ring) {
    free(pkts);
    free(ring);
    return 0;
  }
  Rng r = {0x1fc4a1cULL};
  for (int i = 0; i < NPKT; ++i)
    gen_packet(&r, &pkts[i]);

  Bucket b[C_COUNT];
  for (int c = 0; c < C_COUNT; ++c) {
    b[c].rate = 40 + 13 * c;
    b[c].burst = 4000 + 500 * c;
    b[c].tokens = b[c].burst;
    b[c].passed = b[c].dropped = b[c].bytes = 0;
  }
  int ring_pos = 0;
  uint64_t log_hash = 0;

  for (int pass = 0; pass < PASSES; ++pass) {
    for (int i = 0; i < NPKT; ++i) {
      const Pkt* p = &pkts[i];
      int cls = classify(p);
      Bucket* bk = &b[cls];
      bk->tokens += bk->rate;
      if (bk->tokens > bk->burst) bk->tokens = bk->burst;
      if (bk->tokens >= p->len) {
        bk->tokens -= p->len;
        bk->passed++;
        bk->bytes += p->len;
      } else {
        bk->dropped++;
        if ((bk->dropped & 255) == 1) log_hash ^= log_event(ring, &ring_pos, p, cls, "drop");
      }
      if (cls == C_BOGON || cls == C_ICMP || cls == C_GRE)
        log_hash += log_event(ring, &ring_pos, p, cls, "audit");
    }
  }

  uint64_t h = log_hash;
  for (int c = 0; c < C_COUNT; ++c) {
    h = mix(h, b[c].passed);
    h = mix(h, b[c].dropped);
    h = mix(h, b[c].bytes);
  }
  free(pkts);
  free(ring);
  return h;
}
