/*
 * interp: a register-machine bytecode interpreter with switch dispatch, as in
 * the inner loop of Lua or a query engine's expression evaluator. The opcode
 * mix is skewed: a few opcodes (load, add, compare-and-branch) execute most
 * of the time, a long tail of opcodes (division, bit counting, checked
 * arithmetic with overflow traps, table calls) is rare. Shape: one big switch
 * whose hot cases are a small, data-dependent subset.
 *
 * The bytecode implements three routines over a 4096-element array: a
 * histogram with a running hash, a bounded prefix-sum with overflow checks,
 * and a "rare ops" scan that exercises the long tail on a few elements.
 */
#include "kernel_common.h"

#include <stdlib.h>
#include <string.h>

enum Op {
  OP_HALT,
  OP_LOADI,  /* r[a] = imm */
  OP_MOV,    /* r[a] = r[b] */
  OP_LD,     /* r[a] = mem[r[b] & mask] */
  OP_ST,     /* mem[r[b] & mask] = r[a] */
  OP_ADD,    /* r[a] = r[b] + r[c] */
  OP_ADDI,   /* r[a] = r[b] + imm */
  OP_SUB,    /* r[a] = r[b] - r[c] */
  OP_MUL,    /* r[a] = r[b] * r[c] */
  OP_AND,    /* r[a] = r[b] & r[c] */
  OP_XOR,    /* r[a] = r[b] ^ r[c] */
  OP_SHRI,   /* r[a] = r[b] >> imm */
  OP_SHLI,   /* r[a] = r[b] << imm */
  OP_DIV,    /* r[a] = r[b] / r[c] (trap on zero) */
  OP_MOD,    /* r[a] = r[b] % r[c] (trap on zero) */
  OP_POPCNT, /* r[a] = popcount(r[b]) */
  OP_CLZ,    /* r[a] = clz(r[b] | 1) */
  OP_ADDCHK, /* r[a] = r[b] + r[c], trap on signed overflow */
  OP_MIN,    /* r[a] = min(r[b], r[c]) */
  OP_MAX,    /* r[a] = max(r[b], r[c]) */
  OP_BLT,    /* if r[a] < r[b] goto imm */
  OP_BNE,    /* if r[a] != r[b] goto imm */
  OP_JMP,    /* goto imm */
  OP_CALLT,  /* r[a] = table[imm](r[b]) : a tiny "native call" table */
  OP_COUNT
};

typedef struct {
  uint8_t op, a, b, c;
  int32_t imm;
} Insn;

enum { NREG = 16, MEM = 4096, MASK = MEM - 1 };

typedef struct {
  int64_t traps;
} VmStats;

static int64_t native_call(int32_t which, int64_t x) {
  switch (which & 3) {
  case 0:
    return x * 3 + 1;
  case 1:
    return x ^ (x >> 7);
  case 2:
    return x < 0 ? -x : x;
  default:
    return (x << 5) - x;
  }
}

/* Returns r[0] at HALT. */
static int64_t run(const Insn* code, int64_t* mem, int64_t* regs, VmStats* st) {
  int64_t pc = 0;
  for (;;) {
    const Insn* in = &code[pc++];
    int64_t* r = regs;
    switch (in->op) {
    case OP_HALT:
      return r[0];
    case OP_LOADI:
      r[in->a] = in->imm;
      break;
    case OP_MOV:
      r[in->a] = r[in->b];
      break;
    case OP_LD:
      r[in->a] = mem[r[in->b] & MASK];
      break;
    case OP_ST:
      mem[r[in->b] & MASK] = r[in->a];
      break;
    case OP_ADD:
      r[in->a] = (int64_t)((uint64_t)r[in->b] + (uint64_t)r[in->c]);
      break;
    case OP_ADDI:
      r[in->a] = (int64_t)((uint64_t)r[in->b] + (uint64_t)(int64_t)in->imm);
      break;
    case OP_SUB:
      r[in->a] = (int64_t)((uint64_t)r[in->b] - (uint64_t)r[in->c]);
      break;
    case OP_MUL:
      r[in->a] = (int64_t)((uint64_t)r[in->b] * (uint64_t)r[in->c]);
      break;
    case OP_AND:
      r[in->a] = r[in->b] & r[in->c];
      break;
    case OP_XOR:
      r[in->a] = r[in->b] ^ r[in->c];
      break;
    case OP_SHRI:
      r[in->a] = (int64_t)((uint64_t)r[in->b] >> (in->imm & 63));
      break;
    case OP_SHLI:
      r[in->a] = (int64_t)((uint64_t)r[in->b] << (in->imm & 63));
      break;
    case OP_DIV:
      if (r[in->c] == 0 || (r[in->c] == -1 && r[in->b] == INT64_MIN)) {
        st->traps++;
        r[in->a] = 0;
      } else {
        r[in->a] = r[in->b] / r[in->c];
      }
      break;
    case OP_MOD:
      if (r[in->c] == 0 || r[in->c] == -1) {
        st->traps++;
        r[in->a] = 0;
      } else {
        r[in->a] = r[in->b] % r[in->c];
      }
      break;
    case OP_POPCNT:
      r[in->a] = __builtin_popcountll((uint64_t)r[in->b]);
      break;
    case OP_CLZ:
      r[in->a] = __builtin_clzll((uint64_t)r[in->b] | 1);
      break;
    case OP_ADDCHK: {
      int64_t v;
      if (__builtin_add_overflow(r[in->b], r[in->c], &v)) {
        st->traps++;
        v = r[in->b] > 0 ? INT64_MAX : INT64_MIN;
      }
      r[in->a] = v;
      break;
    }
    case OP_MIN:
      r[in->a] = r[in->b] < r[in->c] ? r[in->b] : r[in->c];
      break;
    case OP_MAX:
      r[in->a] = r[in->b] > r[in->c] ? r[in->b] : r[in->c];
      break;
    case OP_BLT:
      if (r[in->a] < r[in->b]) pc = in->imm;
      break;
    case OP_BNE:
      if (r[in->a] != r[in->b]) pc = in->imm;
      break;
    case OP_JMP:
      pc = in->imm;
      break;
    case OP_CALLT:
      r[in->a] = native_call(in->imm, r[in->b]);
      break;
    default:
      st->traps++;
      return -1;
    }
  }
}

typedef struct {
  Insn* code;
  int n;
} Builder;

static int emit(Builder* b, uint8_t op, uint8_t a, uint8_t bb, uint8_t c, int32_t imm) {
  Insn in = {op, a, bb, c, imm};
  b->code[b->n] = in;
  return b->n++;
}

/* r1 = i, r2 = n, r3 = value, r4 = hash, r5 = bucket, r6 = tmp, r7 = 1,
 * r8 = mul constant, r9 = histogram base offset. */
static void build_histogram(Builder* b, int32_t n) {
  emit(b, OP_LOADI, 1, 0, 0, 0);
  emit(b, OP_LOADI, 2, 0, 0, n);
  emit(b, OP_LOADI, 4, 0, 0, 17);
  emit(b, OP_LOADI, 7, 0, 0, 1);
  emit(b, OP_LOADI, 8, 0, 0, 0x01000193);
  emit(b, OP_LOADI, 9, 0, 0, 2048);
  int loop = b->n;
  emit(b, OP_LD, 3, 1, 0, 0);
  emit(b, OP_XOR, 4, 4, 3, 0);
  emit(b, OP_MUL, 4, 4, 8, 0);
  emit(b, OP_SHRI, 5, 3, 0, 4);
  emit(b, OP_LOADI, 6, 0, 0, 255);
  emit(b, OP_AND, 5, 5, 6, 0);
  emit(b, OP_ADD, 5, 5, 9, 0);
  emit(b, OP_LD, 6, 5, 0, 0);
  emit(b, OP_ADD, 6, 6, 7, 0);
  emit(b, OP_ST, 6, 5, 0, 0);
  emit(b, OP_ADDI, 1, 1, 0, 1);
  emit(b, OP_BLT, 1, 2, 0, loop);
  emit(b, OP_XOR, 0, 0, 4, 0);
}

/* Prefix sums with checked adds and a clamp: r1 = i, r2 = n, r3 = x,
 * r4 = acc, r5 = lo, r6 = hi. */
static void build_prefix(Builder* b, int32_t n) {
  emit(b, OP_LOADI, 1, 0, 0, 0);
  emit(b, OP_LOADI, 2, 0, 0, n);
  emit(b, OP_LOADI, 4, 0, 0, 0);
  emit(b, OP_LOADI, 5, 0, 0, -1000000);
  emit(b, OP_LOADI, 6, 0, 0, 1000000);
  int loop = b->n;
  emit(b, OP_LD, 3, 1, 0, 0);
  emit(b, OP_ADDCHK, 4, 4, 3, 0);
  emit(b, OP_MIN, 4, 4, 6, 0);
  emit(b, OP_MAX, 4, 4, 5, 0);
  emit(b, OP_ADDI, 1, 1, 0, 1);
  emit(b, OP_BLT, 1, 2, 0, loop);
  emit(b, OP_ADD, 0, 0, 4, 0);
}

/* The long tail: divisions, popcounts and table calls on every 64th element.
 * r1 = i, r2 = n, r3 = x, r4 = acc, r5 = step, r6 = divisor, r7 = tmp. */
static void build_rare(Builder* b, int32_t n) {
  emit(b, OP_LOADI, 1, 0, 0, 0);
  emit(b, OP_LOADI, 2, 0, 0, n);
  emit(b, OP_LOADI, 4, 0, 0, 0);
  emit(b, OP_LOADI, 5, 0, 0, 64);
  int loop = b->n;
  emit(b, OP_LD, 3, 1, 0, 0);
  emit(b, OP_POPCNT, 7, 3, 0, 0);
  emit(b, OP_ADD, 4, 4, 7, 0);
  emit(b, OP_ADDI, 6, 7, 0, 1);
  emit(b, OP_DIV, 7, 3, 6, 0);
  emit(b, OP_MOD, 7, 7, 6, 0);
  emit(b, OP_ADD, 4, 4, 7, 0);
  emit(b, OP_CLZ, 7, 3, 0, 0);
  emit(b, OP_SUB, 4, 4, 7, 0);
  emit(b, OP_CALLT, 7, 3, 0, 1);
  emit(b, OP_XOR, 4, 4, 7, 0);
  emit(b, OP_ADD, 1, 1, 5, 0);
  emit(b, OP_BLT, 1, 2, 0, loop);
  emit(b, OP_ADD, 0, 0, 4, 0);
}

uint64_t kernel_run(void) {
  enum { DATA = 2048, REPS = 300, MAX_CODE = 128 };
  Insn* code = (Insn*)malloc(sizeof(Insn) * MAX_CODE);
  int64_t* mem = (int64_t*)malloc(sizeof(int64_t) * MEM);
  if (!code || !mem) {
    free(code);
    free(mem);
    return 0;
  }
  /* Data: mostly small values (geometric magnitudes), a few huge ones that
   * make the checked add trap and the clamps fire. */
  Rng rng = {0x1e7e4b7e1ULL};
  memset(mem, 0, sizeof(int64_t) * MEM);
  for (int i = 0; i < DATA; ++i) {
    uint32_t mag = rng_geometric(&rng, 40);
    int64_t v = (int64_t)(rng_next(&rng) & ((1ULL << (mag + 4)) - 1));
    if (rng_below(&rng, 512) == 0) v = INT64_MAX - (int64_t)rng_below(&rng, 1000);
    mem[i] = (rng_next(&rng) & 3) == 0 ? -v : v;
  }

  Builder b = {code, 0};
  emit(&b, OP_LOADI, 0, 0, 0, 0);
  emit(&b, OP_LOADI, 10, 0, 0, 0);
  emit(&b, OP_LOADI, 11, 0, 0, REPS);
  int outer = b.n;
  build_histogram(&b, DATA);
  build_prefix(&b, DATA);
  build_rare(&b, DATA);
  emit(&b, OP_ADDI, 10, 10, 0, 1);
  emit(&b, OP_BLT, 10, 11, 0, outer);
  emit(&b, OP_HALT, 0, 0, 0, 0);

  int64_t regs[NREG];
  memset(regs, 0, sizeof regs);
  VmStats st = {0};
  int64_t result = run(code, mem, regs, &st);

  uint64_t h = mix(0, (uint64_t)result);
  h = mix(h, (uint64_t)st.traps);
  for (int i = DATA; i < DATA + 256; ++i)
    h = mix(h, (uint64_t)mem[i]);
  free(code);
  free(mem);
  return h;
}
