/*
 * lexer.c: a hand-written tokenizer for a C-like language, the first stage of
 * any compiler or query engine. Character-class dispatch, keyword recognition,
 * longest-match operators, numbers, strings with escapes and comments.
 *
 * Entries:
 *
 *   uint64_t lex_run(void)
 *     Generates about 192 KiB of source text from a fixed seed (identifiers
 *     and spaces dominate; block comments, hex literals and string escapes
 *     are rare), tokenizes it 30 times and returns a checksum of every
 *     token's kind and length.
 *
 *   int64_t lex_tokens(const uint8_t *text, int64_t len, int32_t *kinds,
 *                      int64_t cap)
 *     Tokenizes `text[0..len)`. Writes the kind of the first `cap` tokens to
 *     `kinds` and returns the total number of tokens (whitespace and comments
 *     are not tokens), or -1 if len or cap is negative. Kinds:
 *       1 identifier  2 keyword  3 integer  4 float  5 string  6 char
 *       7 operator/punctuation  8 error (a byte that starts no token, or an
 *       unterminated string/char/comment)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { T_IDENT = 1, T_KEYWORD, T_INT, T_FLOAT, T_STRING, T_CHAR, T_OP, T_ERROR };

enum { C_OTHER = 0, C_SPACE, C_ALPHA, C_DIGIT, C_QUOTE, C_APOS, C_SLASH, C_OP, C_NEWLINE };

/* A function instead of a static table: keeps the module free of mutable
 * globals and is what many hand-written lexers do. */
static int char_class(uint8_t c) {
  if (c == ' ' || c == '\t' || c == '\r') return C_SPACE;
  if (c == '\n') return C_NEWLINE;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return C_ALPHA;
  if (c >= '0' && c <= '9') return C_DIGIT;
  if (c == '"') return C_QUOTE;
  if (c == '\'') return C_APOS;
  if (c == '/') return C_SLASH;
  switch (c) {
  case '+':
  case '-':
  case '*':
  case '%':
  case '=':
  case '!':
  case '<':
  case '>':
  case '&':
  case '|':
  case '^':
  case '~':
  case '?':
  case ':':
  case ';':
  case ',':
  case '.':
  case '(':
  case ')':
  case '[':
  case ']':
  case '{':
  case '}':
    return C_OP;
  default:
    return C_OTHER;
  }
}

static int is_ident_char(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9');
}
static int is_hex(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int is_keyword(const uint8_t* s, int64_t n) {
  switch (n) {
  case 2:
    return (s[0] == 'i' && s[1] == 'f') || (s[0] == 'd' && s[1] == 'o');
  case 3:
    return memcmp(s, "for", 3) == 0 || memcmp(s, "int", 3) == 0;
  case 4:
    return memcmp(s, "else", 4) == 0 || memcmp(s, "char", 4) == 0 || memcmp(s, "void", 4) == 0 ||
           memcmp(s, "case", 4) == 0;
  case 5:
    return memcmp(s, "while", 5) == 0 || memcmp(s, "break", 5) == 0 || memcmp(s, "const", 5) == 0;
  case 6:
    return memcmp(s, "return", 6) == 0 || memcmp(s, "struct", 6) == 0 ||
           memcmp(s, "switch", 6) == 0 || memcmp(s, "static", 6) == 0;
  case 8:
    return memcmp(s, "continue", 8) == 0;
  default:
    return 0;
  }
}

/* Length of the operator starting at s (longest match), 1..3. */
static int64_t op_length(const uint8_t* s, int64_t avail) {
  uint8_t a = s[0], b = avail > 1 ? s[1] : 0, c = avail > 2 ? s[2] : 0;
  switch (a) {
  case '<':
  case '>':
    if (b == a) return c == '=' ? 3 : 2; /* << >> <<= >>= */
    return b == '=' ? 2 : 1;
  case '+':
  case '-':
    if (b == a || b == '=') return 2;
    if (a == '-' && b == '>') return 2;
    return 1;
  case '&':
  case '|':
    return (b == a || b == '=') ? 2 : 1;
  case '=':
  case '!':
  case '*':
  case '%':
  case '^':
  case '/':
    return b == '=' ? 2 : 1;
  case '.':
    return (b == '.' && c == '.') ? 3 : 1;
  default:
    return 1;
  }
}

typedef struct {
  int32_t kind;
  int64_t len;
} Tok;

/* Scans one token at text[*pos]; skips whitespace/comments first. Returns 0 at
 * end of input. */
static int next_token(const uint8_t* t, int64_t n, int64_t* pos, Tok* out) {
  int64_t p = *pos;
  for (;;) {
    if (p >= n) {
      *pos = p;
      return 0;
    }
    int cls = char_class(t[p]);
    if (cls == C_SPACE || cls == C_NEWLINE) {
      ++p;
      continue;
    }
    if (cls == C_SLASH && p + 1 < n && t[p + 1] == '/') {
      p += 2;
      while (p < n && t[p] != '\n')
        ++p;
      continue;
    }
    if (cls == C_SLASH && p + 1 < n && t[p + 1] == '*') {
      int64_t start = p;
      p += 2;
      while (p + 1 < n && !(t[p] == '*' && t[p + 1] == '/'))
        ++p;
      if (p + 1 >= n) { /* unterminated comment */
        out->kind = T_ERROR;
        out->len = n - start;
        *pos = n;
        return 1;
      }
      p += 2;
      continue;
    }
    int64_t start = p;
    switch (cls) {
    case C_ALPHA:
      while (p < n && is_ident_char(t[p]))
        ++p;
      out->kind = is_keyword(t + start, p - start) ? T_KEYWORD : T_IDENT;
      break;
    case C_DIGIT:
      if (t[p] == '0' && p + 1 < n && (t[p + 1] == 'x' || t[p + 1] == 'X')) {
        p += 2;
        while (p < n && is_hex(t[p]))
          ++p;
        out->kind = T_INT;
        break;
      }
      while (p < n && t[p] >= '0' && t[p] <= '9')
        ++p;
      out->kind = T_INT;
      if (p < n && t[p] == '.') {
        ++p;
        while (p < n && t[p] >= '0' && t[p] <= '9')
          ++p;
        out->kind = T_FLOAT;
      }
      if (p < n && (t[p] == 'e' || t[p] == 'E')) {
        int64_t q = p + 1;
        if (q < n && (t[q] == '+' || t[q] == '-')) ++q;
        if (q < n && t[q] >= '0' && t[q] <= '9') {
          p = q;
          while (p < n && t[p] >= '0' && t[p] <= '9')
            ++p;
          out->kind = T_FLOAT;
        }
      }
      break;
    case C_QUOTE:
    case C_APOS: {
      uint8_t quote = t[p++];
      int closed = 0;
      while (p < n) {
        uint8_t c = t[p++];
        if (c == '\\') {
          if (p < n) ++p;
        } else if (c == quote) {
          closed = 1;
          break;
        } else if (c == '\n') {
          break;
        }
      }
      out->kind = closed ? (quote == '"' ? T_STRING : T_CHAR) : T_ERROR;
      break;
    }
    case C_SLASH:
    case C_OP:
      p += op_length(t + p, n - p);
      out->kind = T_OP;
      break;
    default:
      ++p;
      out->kind = T_ERROR;
      break;
    }
    out->len = p - start;
    *pos = p;
    return 1;
  }
}

int64_t lex_tokens(const uint8_t* text, int64_t len, int32_t* kinds, int64_t cap) {
  if (len < 0 || cap < 0) return -1;
  int64_t pos = 0, count = 0;
  Tok tok;
  while (next_token(text, len, &pos, &tok)) {
    if (count < cap) kinds[count] = tok.kind;
    ++count;
  }
  return count;
}

/* ---- deterministic source generator ---- */

typedef struct {
  uint64_t s;
} Rng;
static uint64_t rng_next(Rng* r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545f4914f6cdd1dULL;
}
static uint32_t rng_below(Rng* r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * n) >> 32);
}

typedef struct {
  uint8_t* buf;
  int64_t len, cap;
} Out;
static void put(Out* o, const char* s) {
  while (*s && o->len < o->cap)
    o->buf[o->len++] = (uint8_t)*s++;
}
static void putc_(Out* o, char c) {
  if (o->len < o->cap) o->buf[o->len++] = (uint8_t)c;
}

static void gen_ident(Out* o, Rng* r) {
  static const char* const stems[] = {"i",     "n",     "len",    "buf", "count", "node",
                                      "value", "next",  "result", "tmp", "x",     "y",
                                      "ptr",   "state", "index",  "key"};
  put(o, stems[rng_below(r, 16)]);
  if (rng_below(r, 4) == 0) {
    putc_(o, '_');
    putc_(o, (char)('a' + rng_below(r, 26)));
    putc_(o, (char)('0' + rng_below(r, 10)));
  }
}

static void gen_number(Out* o, Rng* r) {
  uint32_t k = rng_below(r, 20);
  char tmp[24];
  int n = 0;
  if (k == 0) { /* rare hex literal */
    put(o, "0x");
    uint32_t v = (uint32_t)rng_next(r);
    for (int i = 0; i < 8; ++i)
      tmp[n++] = "0123456789abcdef"[(v >> (4 * i)) & 15];
  } else {
    uint32_t v = k < 14 ? rng_below(r, 10) : rng_below(r, 100000);
    do {
      tmp[n++] = (char)('0' + v % 10);
      v /= 10;
    } while (v);
  }
  while (n)
    putc_(o, tmp[--n]);
  if (k == 1) put(o, ".5e-3"); /* rare float */
}

static void gen_expr(Out* o, Rng* r, int depth) {
  static const char* const ops[] = {" + ",  " - ",  " * ",  " < ", " == ", " && ",
                                    " << ", " != ", " >= ", " / ", " | ",  "->"};
  uint32_t k = rng_below(r, 10);
  if (depth > 2 || k < 4) {
    gen_ident(o, r);
  } else if (k < 6) {
    gen_number(o, r);
  } else if (k == 6) {
    gen_ident(o, r);
    putc_(o, '(');
    gen_expr(o, r, depth + 1);
    put(o, ", ");
    gen_expr(o, r, depth + 1);
    putc_(o, ')');
  } else if (k == 7 && rng_below(r, 8) == 0) {
    put(o, rng_below(r, 2) ? "\"hello, world\\n\"" : "'\\''");
  } else {
    gen_expr(o, r, depth + 1);
    put(o, ops[rng_below(r, 12)]);
    gen_expr(o, r, depth + 1);
  }
}

static void gen_statement(Out* o, Rng* r, int indent) {
  for (int i = 0; i < indent; ++i)
    put(o, "    ");
  uint32_t k = rng_below(r, 16);
  if (k < 8) {
    gen_ident(o, r);
    put(o, k < 6 ? " = " : " += ");
    gen_expr(o, r, 0);
    put(o, ";\n");
  } else if (k < 10) {
    put(o, "if (");
    gen_expr(o, r, 0);
    put(o, ") {\n");
    if (indent < 3) gen_statement(o, r, indent + 1);
    for (int i = 0; i < indent; ++i)
      put(o, "    ");
    put(o, "} else {\n");
    if (indent < 3) gen_statement(o, r, indent + 1);
    for (int i = 0; i < indent; ++i)
      put(o, "    ");
    put(o, "}\n");
  } else if (k < 12) {
    put(o, "for (int i = 0; i < ");
    gen_expr(o, r, 1);
    put(o, "; ++i) {\n");
    if (indent < 3) gen_statement(o, r, indent + 1);
    for (int i = 0; i < indent; ++i)
      put(o, "    ");
    put(o, "}\n");
  } else if (k < 14) {
    put(o, "return ");
    gen_expr(o, r, 0);
    put(o, ";\n");
  } else if (k == 14) {
    put(o, "// ");
    gen_ident(o, r);
    put(o, " is updated below\n");
  } else if (rng_below(r, 4) == 0) {
    put(o, "/* rare block\n   comment */\n");
  } else {
    put(o, "while (");
    gen_expr(o, r, 1);
    put(o, ") break;\n");
  }
}

uint64_t lex_run(void) {
  enum { CAP = 192 * 1024, REPS = 30 };
  uint8_t* text = (uint8_t*)malloc(CAP);
  if (!text) return 0;
  Out o = {text, 0, CAP};
  Rng r = {0x1e8e4c0de5ULL};
  while (o.len < CAP - 512)
    gen_statement(&o, &r, 0);

  uint64_t h = 14695981039346656037ULL;
  for (int rep = 0; rep < REPS; ++rep) {
    int64_t pos = 0;
    Tok tok;
    uint64_t count = 0;
    while (next_token(text, o.len, &pos, &tok)) {
      h = (h ^ (uint64_t)(tok.kind * 131 + tok.len)) * 1099511628211ULL;
      ++count;
    }
    h ^= count;
  }
  free(text);
  return h;
}
