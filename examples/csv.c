/*
 * csv.c: an RFC 4180 CSV reader written as an explicit state machine, the
 * loader of a data-processing runtime. It parses quoted fields (with ""
 * escapes and embedded separators/newlines), CRLF or LF line ends, and sums
 * every column that holds an integer.
 *
 * Entries:
 *
 *   uint64_t csv_run(void)
 *     Generates about 512 KiB of CSV (8 columns: ids, small counts, prices,
 *     names that are occasionally quoted, rarely with escaped quotes or
 *     embedded commas), parses it 16 times and returns a checksum of the record
 *     count, the field count and the per-column integer sums.
 *
 *   int64_t csv_parse(const uint8_t *text, int64_t len, int64_t *col_sums,
 *                     int64_t ncols)
 *     Parses `text[0..len)`. For each record, every field in column c < ncols
 *     that is an optionally signed decimal integer is added to col_sums[c]
 *     (col_sums is overwritten, not accumulated into). Returns the number of
 *     records (a final line without a newline counts; empty lines do not), -1
 *     if a quoted field is unterminated or a quote appears after a quoted
 *     field's closing quote, -2 if len or ncols is negative.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
  S_FIELD_START, /* at the start of a field */
  S_UNQUOTED,    /* inside an unquoted field */
  S_QUOTED,      /* inside a quoted field */
  S_QUOTE_SEEN,  /* a quote inside a quoted field: end or escaped quote */
  S_CR           /* after a CR: expect LF */
} State;

typedef struct {
  int64_t records, fields;
  int64_t col;         /* current column */
  int64_t value;       /* integer value of the current field so far */
  int digits, neg, ok; /* numeric-field tracking */
  int64_t field_chars; /* characters in the current record so far */
} Parser;

static void field_begin(Parser* p) {
  p->value = 0;
  p->digits = 0;
  p->neg = 0;
  p->ok = 1;
}

static void field_char(Parser* p, uint8_t c) {
  p->field_chars++;
  if (!p->ok) return;
  if (c >= '0' && c <= '9') {
    p->value = p->value * 10 + (c - '0');
    p->digits++;
    if (p->digits > 18) p->ok = 0; /* would overflow: not an integer field */
  } else if ((c == '-' || c == '+') && p->digits == 0 && !p->neg) {
    p->neg = c == '-' ? 1 : 2;
  } else {
    p->ok = 0;
  }
}

static void field_end(Parser* p, int64_t* sums, int64_t ncols) {
  if (p->ok && p->digits > 0 && p->col < ncols) sums[p->col] += p->neg == 1 ? -p->value : p->value;
  p->fields++;
  p->col++;
}

static void record_end(Parser* p, int64_t* sums, int64_t ncols) {
  /* An empty line is not a record. */
  if (p->col == 0 && p->field_chars == 0) return;
  field_end(p, sums, ncols);
  p->records++;
  p->col = 0;
  p->field_chars = 0;
}

static int64_t parse(const uint8_t* t, int64_t n, int64_t* sums, int64_t ncols, int64_t* fields) {
  Parser p;
  memset(&p, 0, sizeof p);
  for (int64_t c = 0; c < ncols; ++c)
    sums[c] = 0;
  State s = S_FIELD_START;
  field_begin(&p);
  for (int64_t i = 0; i < n; ++i) {
    uint8_t c = t[i];
    switch (s) {
    case S_FIELD_START:
      if (c == '"') {
        s = S_QUOTED;
        p.field_chars++;
        p.ok = 0; /* quoted fields are text */
      } else if (c == ',') {
        p.field_chars++;
        field_end(&p, sums, ncols);
        field_begin(&p);
      } else if (c == '\n') {
        record_end(&p, sums, ncols);
        field_begin(&p);
      } else if (c == '\r') {
        s = S_CR;
      } else {
        field_char(&p, c);
        s = S_UNQUOTED;
      }
      break;
    case S_UNQUOTED:
      if (c == ',') {
        field_end(&p, sums, ncols);
        field_begin(&p);
        s = S_FIELD_START;
      } else if (c == '\n') {
        record_end(&p, sums, ncols);
        field_begin(&p);
        s = S_FIELD_START;
      } else if (c == '\r') {
        s = S_CR;
      } else {
        field_char(&p, c);
      }
      break;
    case S_QUOTED:
      if (c == '"')
        s = S_QUOTE_SEEN;
      else
        p.field_chars++;
      break;
    case S_QUOTE_SEEN:
      if (c == '"') { /* escaped quote */
        p.field_chars++;
        s = S_QUOTED;
      } else if (c == ',') {
        field_end(&p, sums, ncols);
        field_begin(&p);
        s = S_FIELD_START;
      } else if (c == '\n') {
        record_end(&p, sums, ncols);
        field_begin(&p);
        s = S_FIELD_START;
      } else if (c == '\r') {
        s = S_CR;
      } else {
        return -1; /* text after a closing quote */
      }
      break;
    case S_CR:
      /* A lone CR is treated as a line end too. */
      record_end(&p, sums, ncols);
      field_begin(&p);
      s = S_FIELD_START;
      if (c != '\n') --i; /* reprocess this byte */
      break;
    }
  }
  if (s == S_QUOTED) return -1;
  if (s != S_FIELD_START || p.col > 0 || p.field_chars > 0) record_end(&p, sums, ncols);
  *fields = p.fields;
  return p.records;
}

int64_t csv_parse(const uint8_t* text, int64_t len, int64_t* col_sums, int64_t ncols) {
  if (len < 0 || ncols < 0) return -2;
  int64_t fields = 0;
  return parse(text, len, col_sums, ncols, &fields);
}

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
static void put_int(Out* o, int64_t v) {
  char tmp[24];
  int n = 0;
  if (v < 0) {
    put(o, "-");
    v = -v;
  }
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n && o->len < o->cap)
    o->buf[o->len++] = (uint8_t)tmp[--n];
}

static void gen_record(Out* o, Rng* r, int64_t id) {
  static const char* const names[] = {"alpha", "bravo",   "charlie", "delta",
                                      "echo",  "foxtrot", "golf",    "hotel"};
  put_int(o, id);
  put(o, ",");
  put_int(o, rng_below(r, 8));
  put(o, ",");
  put_int(o, 100 + rng_below(r, 9900));
  put(o, ".");
  put_int(o, 10 + rng_below(r, 90));
  put(o, ",");
  uint32_t k = rng_below(r, 32);
  if (k < 24) {
    put(o, names[k & 7]);
  } else if (k < 30) {
    put(o, "\"");
    put(o, names[k & 7]);
    put(o, " ");
    put(o, names[(k + 3) & 7]);
    put(o, "\"");
  } else if (k == 30) {
    put(o, "\"said \"\"hi\"\", left\"");
  } else {
    put(o, "\"multi\nline\"");
  }
  put(o, ",");
  put_int(o, (int64_t)rng_below(r, 2000) - 1000);
  put(o, ",,");
  put_int(o, rng_below(r, 3));
  put(o, ",");
  put(o, (rng_below(r, 64) == 0) ? "N/A" : "ok");
  put(o, rng_below(r, 16) == 0 ? "\r\n" : "\n");
}

uint64_t csv_run(void) {
  enum { CAP = 512 * 1024, NCOLS = 8, REPS = 16 };
  uint8_t* text = (uint8_t*)malloc(CAP);
  if (!text) return 0;
  Out o = {text, 0, CAP};
  Rng r = {0xc5fc5fULL};
  put(&o, "id,count,price,name,delta,empty,flag,status\n");
  for (int64_t id = 1; o.len < CAP - 256; ++id)
    gen_record(&o, &r, id);

  uint64_t h = 0xcbf29ce484222325ULL;
  for (int rep = 0; rep < REPS; ++rep) {
    int64_t sums[NCOLS];
    int64_t fields = 0;
    int64_t records = parse(text, o.len, sums, NCOLS, &fields);
    h = (h ^ (uint64_t)records) * 0x100000001b3ULL;
    h = (h ^ (uint64_t)fields) * 0x100000001b3ULL;
    for (int c = 0; c < NCOLS; ++c)
      h = (h ^ (uint64_t)sums[c]) * 0x100000001b3ULL;
  }
  free(text);
  return h;
}
