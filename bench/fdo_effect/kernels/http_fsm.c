/*
 * http_fsm: an HTTP/1.1 request parser written as a byte-at-a-time state
 * machine (the shape of http-parser/llhttp and of most protocol decoders),
 * run over a generated stream of pipelined requests. Traffic is skewed: GET
 * dominates, header lines are mostly a handful of common names, request
 * bodies are rare, and malformed requests (which take the error/recovery
 * path) are rarer still. Shape: a switch over ~20 states in a byte loop with
 * per-state character-class tests.
 */
#include "kernel_common.h"

#include <stdlib.h>
#include <string.h>

typedef enum {
  S_START,
  S_METHOD,
  S_SP_URI,
  S_URI,
  S_QUERY,
  S_SP_VERSION,
  S_VERSION,
  S_REQ_LF,
  S_HEADER_START,
  S_HEADER_NAME,
  S_HEADER_COLON_SP,
  S_HEADER_VALUE,
  S_HEADER_LF,
  S_HEADERS_END_LF,
  S_BODY,
  S_ERROR_SKIP /* resynchronise at the next blank line */
} State;

typedef struct {
  uint64_t requests, errors, headers, body_bytes;
  uint64_t method_hash, uri_hash, header_hash;
  uint64_t gets, posts, others;
  uint64_t keepalive;
} Stats;

typedef struct {
  State s;
  int64_t content_length;
  int64_t remaining;
  uint32_t method_len;
  uint32_t name_len;
  uint64_t name_hash, token_hash;
  int in_content_length, in_connection;
  int64_t cl_value;
  int blank_run; /* for error resync: consecutive newlines seen */
} Parser;

static int is_token_char(uint8_t c) {
  /* RFC 7230 tchar, written as the range tests a hand-written parser uses */
  if (c >= 'a' && c <= 'z') return 1;
  if (c >= 'A' && c <= 'Z') return 1;
  if (c >= '0' && c <= '9') return 1;
  switch (c) {
  case '!':
  case '#':
  case '$':
  case '%':
  case '&':
  case '\'':
  case '*':
  case '+':
  case '-':
  case '.':
  case '^':
  case '_':
  case '`':
  case '|':
  case '~':
    return 1;
  default:
    return 0;
  }
}

static int is_uri_char(uint8_t c) {
  return c > 32 && c < 127 && c != '?';
}

static uint8_t lower(uint8_t c) {
  return (c >= 'A' && c <= 'Z') ? (uint8_t)(c | 0x20) : c;
}

/* Methods are told apart by length, which is all the statistics need:
 * 3 = GET/PUT, 4 = POST/HEAD, anything else = the rest. */
static void finish_request(Parser* p, Stats* st) {
  st->requests++;
  if (p->method_len == 3)
    st->gets++;
  else if (p->method_len == 4)
    st->posts++;
  else
    st->others++;
}

static void parse(Parser* p, Stats* st, const uint8_t* buf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint8_t c = buf[i];
    switch (p->s) {
    case S_START:
      if (c == '\r' || c == '\n') break; /* tolerate empty lines between requests */
      p->method_len = 0;
      p->token_hash = 0;
      p->content_length = 0;
      p->s = S_METHOD;
      /* fall through */
    case S_METHOD:
      if (c >= 'A' && c <= 'Z') {
        p->method_len++;
        p->token_hash = p->token_hash * 31 + c;
      } else if (c == ' ' && p->method_len > 0) {
        st->method_hash = mix(st->method_hash, p->token_hash);
        p->s = S_SP_URI;
      } else {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_SP_URI:
      if (c == '/' || c == '*') {
        p->token_hash = c;
        p->s = S_URI;
      } else {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_URI:
      if (c == ' ') {
        st->uri_hash = mix(st->uri_hash, p->token_hash);
        p->s = S_SP_VERSION;
      } else if (c == '?') {
        p->s = S_QUERY;
      } else if (is_uri_char(c)) {
        p->token_hash = p->token_hash * 131 + c;
      } else {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_QUERY:
      if (c == ' ') {
        st->uri_hash = mix(st->uri_hash, p->token_hash ^ 0x55);
        p->s = S_SP_VERSION;
      } else if (!(c > 32 && c < 127)) {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_SP_VERSION:
      if (c == 'H') {
        p->s = S_VERSION;
      } else {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_VERSION:
      if (c == '\r') {
        p->s = S_REQ_LF;
      } else if (c == '\n') {
        p->s = S_HEADER_START;
      } else if (!(c == 'T' || c == 'P' || c == '/' || c == '.' || (c >= '0' && c <= '9'))) {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_REQ_LF:
      if (c == '\n') {
        p->s = S_HEADER_START;
      } else {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_HEADER_START:
      if (c == '\r') {
        p->s = S_HEADERS_END_LF;
        break;
      }
      if (c == '\n') goto headers_done;
      p->name_len = 0;
      p->name_hash = 0;
      p->s = S_HEADER_NAME;
      /* fall through */
    case S_HEADER_NAME:
      if (c == ':') {
        /* Recognise the two headers the parser acts on by length + hash. */
        p->in_content_length = p->name_len == 14 && p->name_hash == 0x2bbb00d540f430a4ULL;
        p->in_connection = p->name_len == 10 && p->name_hash == 0xf2dbd4a70b395e38ULL;
        p->cl_value = 0;
        st->headers++;
        st->header_hash = mix(st->header_hash, p->name_hash);
        p->s = S_HEADER_COLON_SP;
      } else if (is_token_char(c)) {
        p->name_len++;
        p->name_hash = (p->name_hash ^ lower(c)) * 0x100000001b3ULL;
      } else {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_HEADER_COLON_SP:
      if (c == ' ' || c == '\t') break;
      p->s = S_HEADER_VALUE;
      /* fall through */
    case S_HEADER_VALUE:
      if (c == '\r') {
        p->s = S_HEADER_LF;
      } else if (c == '\n') {
        p->s = S_HEADER_START;
      } else if (p->in_content_length) {
        if (c >= '0' && c <= '9' && p->cl_value < 100000000) {
          p->cl_value = p->cl_value * 10 + (c - '0');
          p->content_length = p->cl_value;
        } else {
          p->s = S_ERROR_SKIP;
          p->blank_run = 0;
        }
      } else if (p->in_connection) {
        if (lower(c) == 'k') st->keepalive++;
        p->in_connection = 0;
      }
      break;
    case S_HEADER_LF:
      if (c == '\n') {
        p->s = S_HEADER_START;
      } else {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
      }
      break;
    case S_HEADERS_END_LF:
      if (c != '\n') {
        p->s = S_ERROR_SKIP;
        p->blank_run = 0;
        break;
      }
    headers_done:
      if (p->content_length > 0) {
        p->remaining = p->content_length;
        p->s = S_BODY;
      } else {
        finish_request(p, st);
        p->s = S_START;
      }
      break;
    case S_BODY: {
      /* Bodies are consumed in bulk: the state machine only needs lengths. */
      int64_t take = n - i < p->remaining ? n - i : p->remaining;
      st->body_bytes += (uint64_t)take;
      for (int64_t k = 0; k < take; ++k)
        st->header_hash += buf[i + k];
      p->remaining -= take;
      i += take - 1;
      if (p->remaining == 0) {
        finish_request(p, st);
        p->s = S_START;
      }
      break;
    }
    case S_ERROR_SKIP:
      if (c == '\n') {
        if (++p->blank_run == 2) {
          st->errors++;
          p->s = S_START;
        }
      } else if (c != '\r') {
        p->blank_run = 0;
      }
      break;
    }
  }
}

/* ---- traffic generator ---- */

typedef struct {
  uint8_t* buf;
  int64_t len, cap;
} Out;

static void put(Out* o, const char* s) {
  size_t n = strlen(s);
  if (o->len + (int64_t)n > o->cap) n = (size_t)(o->cap - o->len);
  memcpy(o->buf + o->len, s, n);
  o->len += (int64_t)n;
}

static void put_u(Out* o, uint32_t v) {
  char tmp[12];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n && o->len < o->cap)
    o->buf[o->len++] = (uint8_t)tmp[--n];
}

static void gen_request(Out* o, Rng* r) {
  static const char* const paths[] = {"/",
                                      "/index.html",
                                      "/api/v1/items",
                                      "/static/app.js",
                                      "/static/style.css",
                                      "/favicon.ico",
                                      "/api/v1/users/42",
                                      "/healthz"};
  static const char* const headers[] = {"Host: example.com\r\n",
                                        "User-Agent: curl/8.1.2\r\n",
                                        "Accept: */*\r\n",
                                        "Accept-Encoding: gzip, deflate, br\r\n",
                                        "Accept-Language: en-US,en;q=0.9\r\n",
                                        "Cache-Control: no-cache\r\n",
                                        "Cookie: session=8f2c1a9e4b7d; theme=dark\r\n",
                                        "X-Request-Id: 5b8e2f6a-19c4\r\n"};
  uint32_t k = rng_below(r, 1000);
  int post = 0;
  if (k < 820) {
    put(o, "GET ");
  } else if (k < 940) {
    put(o, "POST ");
    post = 1;
  } else if (k < 985) {
    put(o, "HEAD ");
  } else if (k < 998) {
    put(o, "OPTIONS ");
  } else {
    put(o, "G@T "); /* malformed: takes the error path */
  }
  put(o, paths[rng_geometric(r, 7)]);
  if (rng_below(r, 8) == 0) {
    put(o, "?q=");
    put_u(o, rng_below(r, 100000));
  }
  put(o, " HTTP/1.1\r\n");
  uint32_t nh = 2 + rng_below(r, 6);
  for (uint32_t h = 0; h < nh; ++h)
    put(o, headers[h < 3 ? h : rng_below(r, 8)]);
  if (rng_below(r, 4) == 0) put(o, "Connection: keep-alive\r\n");
  if (post) {
    uint32_t len = 16 + rng_below(r, 200);
    put(o, "Content-Type: application/json\r\nContent-Length: ");
    put_u(o, len);
    put(o, "\r\n\r\n");
    for (uint32_t b = 0; b < len && o->len < o->cap; ++b)
      o->buf[o->len++] = (uint8_t)('a' + b % 26);
  } else {
    put(o, "\r\n");
  }
}

/* Precomputed by the same hash the parser uses (see S_HEADER_NAME); checked
 * at startup so a typo cannot silently disable the Content-Length path. */
static uint64_t name_hash(const char* s) {
  uint64_t h = 0;
  for (; *s; ++s)
    h = (h ^ lower((uint8_t)*s)) * 0x100000001b3ULL;
  return h;
}

uint64_t kernel_run(void) {
  enum { CAP = 2 << 20, PASSES = 6 };
  uint8_t* buf = (uint8_t*)malloc(CAP);
  if (!buf) return 0;
  if (name_hash("content-length") != 0x2bbb00d540f430a4ULL ||
      name_hash("connection") != 0xf2dbd4a70b395e38ULL) {
    free(buf);
    return 0;
  }
  Out o = {buf, 0, CAP};
  Rng r = {0x477e7ULL};
  while (o.len < CAP - 1024)
    gen_request(&o, &r);

  Stats st;
  memset(&st, 0, sizeof st);
  for (int pass = 0; pass < PASSES; ++pass) {
    Parser p;
    memset(&p, 0, sizeof p);
    p.s = S_START;
    /* Feed in uneven chunks, as a socket would deliver them. */
    int64_t pos = 0;
    while (pos < o.len) {
      int64_t chunk = 512 + (int64_t)rng_below(&r, 4096);
      if (chunk > o.len - pos) chunk = o.len - pos;
      parse(&p, &st, buf + pos, chunk);
      pos += chunk;
    }
  }
  uint64_t h = 0;
  h = mix(h, st.requests);
  h = mix(h, st.errors);
  h = mix(h, st.headers);
  h = mix(h, st.body_bytes);
  h = mix(h, st.method_hash);
  h = mix(h, st.uri_hash);
  h = mix(h, st.header_hash);
  h = mix(h, st.gets);
  h = mix(h, st.posts);
  h = mix(h, st.others);
  h = mix(h, st.keepalive);
  free(buf);
  return h;
}
