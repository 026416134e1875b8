/* fdo-calc: a tiny expression engine on top of libfdo, the way a language
 * runtime uses fdod.
 *
 * It turns a user's expression over `x` (integers, x, + - *, < > ==,
 * parentheses) into LLVM IR text for a kernel that sums the expression over a
 * run of values, registers that program with fdod and calls it batch after
 * batch. fdod compiles it, measures it and rewrites its profile from those
 * calls; every batch is checked against this program's own tree-walking
 * interpreter. Two modes (docs/runtimes.md):
 *
 *   --mode daemon   one `execute` through fdod per batch;
 *   --mode inproc   the compiled kernel is leased and linked into this
 *                   process and called natively through a plain C function
 *                   pointer (a native entry), CALC_CHUNK values per call;
 *                   between batches (the safe point, where the thread passes
 *                   a quiescent point) the counts are flushed to fdod, and
 *                   the newer code fdod compiles once it has rewritten the
 *                   profile is picked up at the next quiescent point.
 *
 *   fdo-calc [--socket PATH] [--batches N] [--batch-size N]
 *            [--mode daemon|inproc] EXPR
 *
 * Build against an installed libfdo:
 *   cc calc.c $(pkg-config --cflags --libs fdo) -o fdo-calc
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <ctype.h>
#include <fdo/fdo.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ the parser */

typedef enum { N_NUM, N_X, N_NEG, N_ADD, N_SUB, N_MUL, N_LT, N_GT, N_EQ } node_kind;

typedef struct node {
  node_kind kind;
  int64_t num;
  struct node* l;
  struct node* r;
} node;

typedef struct {
  const char* src;
  const char* p;
  char error[256];
} parser;

static node* make(node_kind k, node* l, node* r) {
  node* n = calloc(1, sizeof *n);
  if (!n) {
    fputs("fdo-calc: out of memory\n", stderr);
    exit(1);
  }
  n->kind = k;
  n->l = l;
  n->r = r;
  return n;
}

static void free_node(node* n) {
  if (!n) return;
  free_node(n->l);
  free_node(n->r);
  free(n);
}

static void skip_space(parser* ps) {
  while (isspace((unsigned char)*ps->p))
    ps->p++;
}

static node* parse_error(parser* ps, const char* what) {
  if (ps->error[0] == '\0')
    snprintf(ps->error, sizeof ps->error, "%s at column %d", what, (int)(ps->p - ps->src) + 1);
  return NULL;
}

static node* parse_cmp(parser* ps);

static node* parse_primary(parser* ps) {
  skip_space(ps);
  if (*ps->p == '(') {
    ps->p++;
    node* e = parse_cmp(ps);
    if (!e) return NULL;
    skip_space(ps);
    if (*ps->p != ')') {
      free_node(e);
      return parse_error(ps, "expected ')'");
    }
    ps->p++;
    return e;
  }
  if (*ps->p == 'x') {
    ps->p++;
    return make(N_X, NULL, NULL);
  }
  if (*ps->p == '-') {
    ps->p++;
    node* e = parse_primary(ps);
    return e ? make(N_NEG, e, NULL) : NULL;
  }
  if (isdigit((unsigned char)*ps->p)) {
    int64_t v = 0;
    while (isdigit((unsigned char)*ps->p)) {
      if (v > (INT64_MAX - 9) / 10) return parse_error(ps, "number too large");
      v = v * 10 + (*ps->p++ - '0');
    }
    node* n = make(N_NUM, NULL, NULL);
    n->num = v;
    return n;
  }
  return parse_error(ps, *ps->p ? "expected a number, x or '('" : "unexpected end of input");
}

static node* parse_term(parser* ps) {
  node* l = parse_primary(ps);
  while (l) {
    skip_space(ps);
    if (*ps->p != '*') return l;
    ps->p++;
    node* r = parse_primary(ps);
    if (!r) {
      free_node(l);
      return NULL;
    }
    l = make(N_MUL, l, r);
  }
  return NULL;
}

static node* parse_sum(parser* ps) {
  node* l = parse_term(ps);
  while (l) {
    skip_space(ps);
    char op = *ps->p;
    if (op != '+' && op != '-') return l;
    ps->p++;
    node* r = parse_term(ps);
    if (!r) {
      free_node(l);
      return NULL;
    }
    l = make(op == '+' ? N_ADD : N_SUB, l, r);
  }
  return NULL;
}

static node* parse_cmp(parser* ps) {
  node* l = parse_sum(ps);
  if (!l) return NULL;
  skip_space(ps);
  node_kind k;
  if (ps->p[0] == '<') {
    k = N_LT;
    ps->p += 1;
  } else if (ps->p[0] == '>') {
    k = N_GT;
    ps->p += 1;
  } else if (ps->p[0] == '=' && ps->p[1] == '=') {
    k = N_EQ;
    ps->p += 2;
  } else {
    return l;
  }
  node* r = parse_sum(ps);
  if (!r) {
    free_node(l);
    return NULL;
  }
  return make(k, l, r);
}

static node* parse(parser* ps) {
  node* e = parse_cmp(ps);
  if (!e) return NULL;
  skip_space(ps);
  if (*ps->p != '\0') {
    free_node(e);
    return parse_error(ps, "unexpected character");
  }
  return e;
}

/* ----------------------------------------------------- the interpreter */

/* Wrapping arithmetic, as the IR's add/sub/mul do. */
static int64_t eval(const node* n, int64_t x) {
  switch (n->kind) {
  case N_NUM:
    return n->num;
  case N_X:
    return x;
  case N_NEG:
    return (int64_t)(0u - (uint64_t)eval(n->l, x));
  case N_ADD:
    return (int64_t)((uint64_t)eval(n->l, x) + (uint64_t)eval(n->r, x));
  case N_SUB:
    return (int64_t)((uint64_t)eval(n->l, x) - (uint64_t)eval(n->r, x));
  case N_MUL:
    return (int64_t)((uint64_t)eval(n->l, x) * (uint64_t)eval(n->r, x));
  case N_LT:
    return eval(n->l, x) < eval(n->r, x);
  case N_GT:
    return eval(n->l, x) > eval(n->r, x);
  case N_EQ:
    return eval(n->l, x) == eval(n->r, x);
  }
  return 0;
}

/* ----------------------------------------------------- the IR generator */

typedef struct {
  char* text;
  size_t len, cap;
  int next_reg;
} ir_buf;

static void emit(ir_buf* b, const char* fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->text + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    b->cap = b->cap * 2 + (size_t)n + 64;
    b->text = realloc(b->text, b->cap);
    if (!b->text) {
      fputs("fdo-calc: out of memory\n", stderr);
      exit(1);
    }
  }
}

/* Emits the node's value as an i64 register; returns its number. */
static int gen(ir_buf* b, const node* n) {
  int l, r, t = 0;
  static const char* const bin[] = {[N_ADD] = "add", [N_SUB] = "sub", [N_MUL] = "mul"};
  static const char* const cmp[] = {[N_LT] = "slt", [N_GT] = "sgt", [N_EQ] = "eq"};
  switch (n->kind) {
  case N_NUM:
    t = b->next_reg++;
    emit(b, "  %%t%d = add i64 0, %lld\n", t, (long long)n->num);
    return t;
  case N_X:
    t = b->next_reg++;
    emit(b, "  %%t%d = add i64 0, %%x\n", t);
    return t;
  case N_NEG:
    l = gen(b, n->l);
    t = b->next_reg++;
    emit(b, "  %%t%d = sub i64 0, %%t%d\n", t, l);
    return t;
  case N_ADD:
  case N_SUB:
  case N_MUL:
    l = gen(b, n->l);
    r = gen(b, n->r);
    t = b->next_reg++;
    emit(b, "  %%t%d = %s i64 %%t%d, %%t%d\n", t, bin[n->kind], l, r);
    return t;
  case N_LT:
  case N_GT:
  case N_EQ:
    l = gen(b, n->l);
    r = gen(b, n->r);
    t = b->next_reg++;
    emit(b, "  %%c%d = icmp %s i64 %%t%d, %%t%d\n", t, cmp[n->kind], l, r);
    emit(b, "  %%t%d = zext i1 %%c%d to i64\n", t, t);
    return t;
  }
  return t;
}

/* i64 @calc_batch(ptr %xs, i64 %n): the sum of the expression over xs[0..n). */
static char* generate_ir(const node* e) {
  ir_buf b = {NULL, 0, 0, 0};
  emit(&b, "; fdo-calc kernel\n"
           "define i64 @calc_batch(ptr %%xs, i64 %%n) {\n"
           "entry:\n"
           "  %%empty = icmp sle i64 %%n, 0\n"
           "  br i1 %%empty, label %%done, label %%loop\n"
           "loop:\n"
           "  %%i = phi i64 [ 0, %%entry ], [ %%i.next, %%loop ]\n"
           "  %%acc = phi i64 [ 0, %%entry ], [ %%acc.next, %%loop ]\n"
           "  %%p = getelementptr inbounds i64, ptr %%xs, i64 %%i\n"
           "  %%x = load i64, ptr %%p\n");
  int v = gen(&b, e);
  emit(&b,
       "  %%acc.next = add i64 %%acc, %%t%d\n"
       "  %%i.next = add i64 %%i, 1\n"
       "  %%more = icmp slt i64 %%i.next, %%n\n"
       "  br i1 %%more, label %%loop, label %%done\n"
       "done:\n"
       "  %%sum = phi i64 [ 0, %%entry ], [ %%acc.next, %%loop ]\n"
       "  ret i64 %%sum\n"
       "}\n",
       v);
  return b.text;
}

/* ------------------------------------------------------- the runtime */

typedef enum { MODE_DAEMON, MODE_INPROC } run_mode;

/* Values per in-process call: a batch is many native calls, as a filter or a
 * query operator calls its compiled code per run of rows. */
enum { CALC_CHUNK = 256 };

typedef struct {
  const char* socket;
  const char* expr;
  long batches;
  long batch_size;
  run_mode mode;
} options;

static int usage(const char* why) {
  if (why) fprintf(stderr, "fdo-calc: %s\n", why);
  fputs("usage: fdo-calc [--socket PATH] [--batches N] [--batch-size N] [--mode daemon|inproc] "
        "EXPR\n"
        "  EXPR: integers, x, + - *, < > ==, parentheses; e.g. 'x*x - 3*x > 10'\n",
        stderr);
  return 2;
}

static int parse_count(const char* s, long max, long* out) {
  char* end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 1 || v > max) return -1;
  *out = v;
  return 0;
}

static int parse_options(int argc, char** argv, options* o) {
  o->socket = NULL;
  o->expr = NULL;
  o->batches = 20;
  o->batch_size = 4096;
  o->mode = MODE_DAEMON;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--socket") == 0 && v) {
      o->socket = v;
      ++i;
    } else if (strcmp(a, "--batches") == 0 && v) {
      if (parse_count(v, 1000000, &o->batches) != 0) return usage("--batches: 1..1000000");
      ++i;
    } else if (strcmp(a, "--batch-size") == 0 && v) {
      if (parse_count(v, 1 << 20, &o->batch_size) != 0) return usage("--batch-size: 1..1048576");
      ++i;
    } else if (strcmp(a, "--mode") == 0 && v) {
      if (strcmp(v, "daemon") == 0)
        o->mode = MODE_DAEMON;
      else if (strcmp(v, "inproc") == 0)
        o->mode = MODE_INPROC;
      else
        return usage("--mode: 'daemon' or 'inproc'");
      ++i;
    } else if (a[0] == '-' && a[1] == '-') {
      return usage("unknown option");
    } else if (!o->expr) {
      o->expr = a;
    } else {
      return usage("more than one expression");
    }
  }
  return o->expr ? 0 : usage("no expression");
}

static int report(const char* what, fdo_error* err) {
  fprintf(stderr, "fdo-calc: %s: %s (%s", what, fdo_error_message(err),
          fdo_error_code_name(fdo_error_get_code(err)));
  if (fdo_error_rpc_code(err) != 0)
    fprintf(stderr, ", JSON-RPC %lld", (long long)fdo_error_rpc_code(err));
  fputs(")\n", stderr);
  fdo_error_free(err);
  return 1;
}

/* "mode":"..." out of a stage's JSON; "?" when absent. */
static void stage_mode(const char* stage, char out[16]) {
  const char* m = stage ? strstr(stage, "\"mode\":\"") : NULL;
  strcpy(out, "?");
  if (!m) return;
  m += 8;
  size_t n = strcspn(m, "\"");
  if (n < 16) {
    memcpy(out, m, n);
    out[n] = '\0';
  }
}

/* The batch's values (a fixed pseudo-random sequence) and the interpreter's
 * sum over them. */
static int64_t fill_batch(const node* e, int64_t* xs, long n, uint64_t* seed) {
  int64_t expect = 0;
  for (long i = 0; i < n; ++i) {
    *seed = *seed * 6364136223846793005u + 1442695040888963407u;
    xs[i] = (int64_t)(*seed >> 33) % 1000 - 500;
    expect = (int64_t)((uint64_t)expect + (uint64_t)eval(e, xs[i]));
  }
  return expect;
}

typedef struct {
  int64_t total;
  long mismatches;
} tally;

static void tally_batch(tally* t, int64_t got, int ok) {
  t->mismatches += !ok;
  t->total = (int64_t)((uint64_t)t->total + (uint64_t)got);
}

/* One `execute` through fdod per batch. */
static int run_daemon(fdo_conn* conn, const char* id, const node* e, const options* o, int64_t* xs,
                      tally* t) {
  fdo_error* err = NULL;
  uint64_t seed = 12345;
  for (long batch = 0; batch < o->batches; ++batch) {
    int64_t expect = fill_batch(e, xs, o->batch_size, &seed);
    fdo_buffer buf = {FDO_ELEM_I64, xs, (size_t)o->batch_size};
    fdo_value args[2];
    args[0].type = FDO_BUFFER;
    args[0].as.buffer = 0;
    args[1].type = FDO_I64;
    args[1].as.i64 = o->batch_size;
    fdo_call call = {"calc_batch", args, 2, &buf, 1, 0};
    fdo_value ret;
    char* stage = NULL;
    if (fdo_execute(conn, id, &call, &ret, &stage, &err) != 0) return report("execute", err);
    char mode[16];
    stage_mode(stage, mode);
    fdo_string_free(stage);
    int64_t got = ret.type == FDO_I64 ? ret.as.i64 : 0;
    int ok = ret.type == FDO_I64 && got == expect;
    tally_batch(t, got, ok);
    printf("batch %ld: sum %lld (%s code) %s\n", batch, (long long)got, mode,
           ok ? "ok" : "MISMATCH");
  }
  return 0;
}

/* The kernel's own C type: i64 @calc_batch(ptr %xs, i64 %n). */
typedef int64_t (*calc_batch_fn)(const int64_t* xs, int64_t n);

/* The kernel linked into this process, called through its native entry (a
 * function pointer of its own C type, docs/runtimes.md "Native entries"): each
 * batch is a hot loop of native calls, CALC_CHUNK values each, timed as a
 * whole. The batch boundary is this runtime's safe point: the thread tells
 * the library of the batch's calls and passes a quiescent point (it keeps no
 * pointer across it), and the flush there sends the counts to fdod; once fdod
 * has rewritten the profile, the flush links the newer code and the next
 * quiescent point hands this thread its pointer. */
static int run_inproc(fdo_conn* conn, const char* id, const node* e, const options* o, int64_t* xs,
                      tally* t) {
  fdo_error* err = NULL;
  const char* const entries[] = {"calc_batch"};
  /* Flushes at the batch boundaries, where this runtime has its safe points;
   * FDO_INPROC_FLUSH_BACKGROUND would flush from a library thread instead. */
  fdo_inproc_options io = {FDO_INPROC_FLUSH_MANUAL, 0, 0};
  fdo_inproc* inproc = NULL;
  fdo_inproc_thread* thread = NULL;
  if (fdo_inproc_open(conn, id, entries, 1, &io, &inproc, &err) != 0)
    return report("in-process open", err);
  size_t entry = 0;
  int rc = 0;
  if (fdo_inproc_entry(inproc, "calc_batch", &entry, &err) != 0) {
    rc = report("in-process entry", err);
    goto out;
  }
  if (fdo_inproc_thread_open(inproc, &thread, &err) != 0) {
    rc = report("in-process native entries", err);
    goto out;
  }
  printf("in-process: generation %llu linked\n", (unsigned long long)fdo_inproc_generation(inproc));
  uint64_t seed = 12345;
  for (long batch = 0; batch < o->batches; ++batch) {
    int64_t expect = fill_batch(e, xs, o->batch_size, &seed);
    /* A quiescent point: newer code swapped in by the last flush reaches
     * this thread here. */
    if (fdo_inproc_thread_quiescent(thread) < 0) {
      rc = 1;
      goto out;
    }
    calc_batch_fn calc = (calc_batch_fn)fdo_inproc_thread_entry(thread, entry);
    if (!calc) {
      fputs("fdo-calc: no native entry (bad entry index)\n", stderr);
      rc = 1;
      goto out;
    }
    unsigned long long generation = (unsigned long long)fdo_inproc_thread_generation(thread);
    uint64_t sum = 0, calls = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long at = 0; at < o->batch_size; at += CALC_CHUNK) {
      long n = o->batch_size - at < CALC_CHUNK ? o->batch_size - at : CALC_CHUNK;
      sum += (uint64_t)calc(xs + at, n);
      ++calls;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
                  (uint64_t)t0.tv_nsec;
    /* The batch's calls, all timed together; then the batch's end is the
     * next quiescent point, which hands them over for the flush. */
    fdo_inproc_thread_count(thread, entry, calls, calls, ns);
    calc = NULL;
    fdo_inproc_thread_quiescent(thread);
    fdo_inproc_flush_result flushed;
    if (fdo_inproc_flush(inproc, &flushed, &err) != 0) {
      rc = report("in-process flush", err);
      goto out;
    }
    int ok = (int64_t)sum == expect;
    tally_batch(t, (int64_t)sum, ok);
    printf("batch %ld: sum %lld (generation %llu) %s | flush: profile version %lld", batch,
           (long long)(int64_t)sum, generation, ok ? "ok" : "MISMATCH",
           (long long)flushed.profile_version);
    if (flushed.swapped)
      printf(", swapped in generation %llu", (unsigned long long)flushed.generation);
    putchar('\n');
  }
  fdo_inproc_thread_quiescent(thread);
  printf("in-process: generation %llu at the end\n",
         (unsigned long long)fdo_inproc_thread_generation(thread));
  static const char* const kModes[] = {"plain", "instrumented", "optimized"};
  int mode = fdo_inproc_thread_mode(thread);
  printf("in-process: %s code, compiled with profile version %lld\n",
         mode >= 0 && mode <= 2 ? kModes[mode] : "unknown",
         (long long)fdo_inproc_thread_profile_version(thread));
  /* Threads still on older code (none here: this one passed its quiescent
   * point after the last swap). */
  fdo_inproc_lag lag;
  if (fdo_inproc_lagging(inproc, &lag, &err) != 0) {
    rc = report("in-process lag", err);
    goto out;
  }
  printf("in-process: %u thread(s) behind, %u older generation(s) linked\n", lag.threads,
         lag.generations_held);
  /* Whether fdod samples this process's threads in the kernel, and why (not). */
  /* Which variant fdod's guard planned for the code running now, and why. */
  char* variant = fdo_inproc_variant_json(inproc);
  if (variant) printf("in-process: variant %s\n", variant);
  fdo_string_free(variant);
  char* sampling = fdo_inproc_sampling_json(inproc);
  if (sampling) printf("in-process: sampling %s\n", sampling);
  fdo_string_free(sampling);
out:
  fdo_inproc_thread_close(thread);
  fdo_inproc_close(inproc);
  return rc;
}

int main(int argc, char** argv) {
  options o;
  int rc = parse_options(argc, argv, &o);
  if (rc != 0) return rc;

  parser ps = {o.expr, o.expr, {0}};
  node* e = parse(&ps);
  if (!e) {
    fprintf(stderr, "fdo-calc: %s\n", ps.error);
    return 2;
  }
  char* ir = generate_ir(e);
  int64_t* xs = NULL;

  fdo_conn* conn = NULL;
  fdo_error* err = NULL;
  if (fdo_connect_as(o.socket, "fdo-calc", &conn, &err) != 0) {
    rc = report("connect", err);
    goto out;
  }
  printf("connected to fdod %s\n", fdo_conn_server_version(conn));

  char id[FDO_KEY_SIZE], pk[FDO_KEY_SIZE];
  if (fdo_program_register(conn, "fdo-calc", ir, strlen(ir), FDO_IR_TEXT, id, pk, &err) != 0) {
    rc = report("register", err);
    goto out;
  }
  printf("program %.16s… profile %.16s…\n", id, pk);

  xs = malloc(sizeof(int64_t) * (size_t)o.batch_size);
  if (!xs) {
    fputs("fdo-calc: out of memory\n", stderr);
    rc = 1;
    goto out;
  }
  tally t = {0, 0};
  rc = o.mode == MODE_INPROC ? run_inproc(conn, id, e, &o, xs, &t)
                             : run_daemon(conn, id, e, &o, xs, &t);
  if (rc != 0) goto out;

  char* history = NULL;
  if (fdo_profile_history(conn, pk, &history, &err) != 0) {
    rc = report("profile history", err);
    goto out;
  }
  const char* cur = strstr(history, "\"current_version\":");
  printf("profile current_version %ld\n", cur ? strtol(cur + 18, NULL, 10) : -1L);
  fdo_string_free(history);
  printf("total %lld over %ld batches; %s\n", (long long)t.total, o.batches,
         t.mismatches ? "MISMATCHES against the interpreter" : "all batches match the interpreter");
  rc = t.mismatches ? 1 : 0;

out:
  free(xs);
  fdo_close(conn);
  free(ir);
  free_node(e);
  return rc;
}
