/*
 * interp.c: a stack bytecode interpreter, the inner loop of a small scripting
 * language, handed to fdod as a front end would hand it over.
 *
 * Entries (the fdod program ABI: integer/pointer parameters, integer return):
 *
 *   uint64_t interp_run(void)
 *     Assembles three bytecode programs (a Collatz-length loop, a trial-division
 *     prime count and an FNV-style hashing loop), runs each through the
 *     interpreter and returns a checksum of everything they output. Fixed
 *     work; the opcode mix is skewed (loads, pushes, adds and conditional jumps
 *     dominate, division and shifts are rare), which is what makes switch
 *     dispatch profitable to profile.
 *
 *   int64_t interp_run_buf(const uint8_t *code, int64_t len, int64_t *out,
 *                          int64_t out_cap)
 *     Runs caller-supplied bytecode `code[0..len)`. Every OUT instruction
 *     appends the top of the stack to `out` (at most `out_cap` values are
 *     stored; further OUTs are counted but dropped). Returns the number of
 *     OUTs executed, or a negative error:
 *       -1 unknown opcode or truncated operand   -2 stack overflow/underflow
 *       -3 jump outside the code                 -4 step limit (50M) exceeded
 *       -5 division or modulo by zero            -6 bad register index
 *       -7 negative len or out_cap
 *
 * Encoding: one opcode byte, then its operand (little endian). Stack of 256
 * int64 values, 16 int64 registers initialised to 0. Jump offsets are signed
 * 16-bit, relative to the byte after the operand.
 *   0x00 HALT            0x01 PUSH8  i8      0x02 PUSH32 i32   0x03 LOAD  r8
 *   0x04 STORE r8        0x05 ADD            0x06 SUB          0x07 MUL
 *   0x08 DIV             0x09 MOD            0x0a AND          0x0b OR
 *   0x0c XOR             0x0d SHL            0x0e SHR (logical) 0x0f DUP
 *   0x10 SWAP            0x11 DROP           0x12 LT           0x13 EQ
 *   0x14 JMP  rel16      0x15 JZ  rel16 (pops) 0x16 JNZ rel16 (pops)
 *   0x17 INC  r8         0x18 DEC r8         0x19 OUT (pops)   0x1a OVER
 *   0x1b ADDI i8 (top += i8)
 * Example: "output 1+2" is 01 01 01 02 05 19 00.
 */
#include <stdint.h>
#include <string.h>

enum {
  OP_HALT = 0x00,
  OP_PUSH8,
  OP_PUSH32,
  OP_LOAD,
  OP_STORE,
  OP_ADD,
  OP_SUB,
  OP_MUL,
  OP_DIV,
  OP_MOD,
  OP_AND,
  OP_OR,
  OP_XOR,
  OP_SHL,
  OP_SHR,
  OP_DUP,
  OP_SWAP,
  OP_DROP,
  OP_LT,
  OP_EQ,
  OP_JMP,
  OP_JZ,
  OP_JNZ,
  OP_INC,
  OP_DEC,
  OP_OUT,
  OP_OVER,
  OP_ADDI
};

enum { STACK_MAX = 256, NREGS = 16 };
static const int64_t STEP_LIMIT = 50000000;

static int64_t execute(const uint8_t* code, int64_t len, int64_t* out, int64_t out_cap) {
  int64_t stack[STACK_MAX];
  int64_t regs[NREGS];
  memset(regs, 0, sizeof regs);
  int64_t sp = 0; /* number of values on the stack */
  int64_t pc = 0;
  int64_t outs = 0;
  int64_t steps = 0;

#define NEED(n)                                                                                    \
  do {                                                                                             \
    if (sp < (n)) return -2;                                                                       \
  } while (0)
#define ROOM()                                                                                     \
  do {                                                                                             \
    if (sp >= STACK_MAX) return -2;                                                                \
  } while (0)
#define OPERAND(n)                                                                                 \
  do {                                                                                             \
    if (pc + (n) > len) return -1;                                                                 \
  } while (0)

  while (pc < len) {
    if (++steps > STEP_LIMIT) return -4;
    uint8_t op = code[pc++];
    switch (op) {
    case OP_HALT:
      return outs;
    case OP_PUSH8:
      OPERAND(1);
      ROOM();
      stack[sp++] = (int8_t)code[pc];
      pc += 1;
      break;
    case OP_PUSH32: {
      OPERAND(4);
      ROOM();
      uint32_t v = (uint32_t)code[pc] | (uint32_t)code[pc + 1] << 8 | (uint32_t)code[pc + 2] << 16 |
                   (uint32_t)code[pc + 3] << 24;
      stack[sp++] = (int32_t)v;
      pc += 4;
      break;
    }
    case OP_LOAD:
      OPERAND(1);
      if (code[pc] >= NREGS) return -6;
      ROOM();
      stack[sp++] = regs[code[pc]];
      pc += 1;
      break;
    case OP_STORE:
      OPERAND(1);
      if (code[pc] >= NREGS) return -6;
      NEED(1);
      regs[code[pc]] = stack[--sp];
      pc += 1;
      break;
    case OP_ADD:
      NEED(2);
      stack[sp - 2] = (int64_t)((uint64_t)stack[sp - 2] + (uint64_t)stack[sp - 1]);
      --sp;
      break;
    case OP_SUB:
      NEED(2);
      stack[sp - 2] = (int64_t)((uint64_t)stack[sp - 2] - (uint64_t)stack[sp - 1]);
      --sp;
      break;
    case OP_MUL:
      NEED(2);
      stack[sp - 2] = (int64_t)((uint64_t)stack[sp - 2] * (uint64_t)stack[sp - 1]);
      --sp;
      break;
    case OP_DIV:
      NEED(2);
      if (stack[sp - 1] == 0) return -5;
      if (stack[sp - 1] == -1) /* avoid INT64_MIN / -1 overflow */
        stack[sp - 2] = (int64_t)(0 - (uint64_t)stack[sp - 2]);
      else
        stack[sp - 2] = stack[sp - 2] / stack[sp - 1];
      --sp;
      break;
    case OP_MOD:
      NEED(2);
      if (stack[sp - 1] == 0) return -5;
      if (stack[sp - 1] == -1)
        stack[sp - 2] = 0;
      else
        stack[sp - 2] = stack[sp - 2] % stack[sp - 1];
      --sp;
      break;
    case OP_AND:
      NEED(2);
      stack[sp - 2] &= stack[sp - 1];
      --sp;
      break;
    case OP_OR:
      NEED(2);
      stack[sp - 2] |= stack[sp - 1];
      --sp;
      break;
    case OP_XOR:
      NEED(2);
      stack[sp - 2] ^= stack[sp - 1];
      --sp;
      break;
    case OP_SHL:
      NEED(2);
      stack[sp - 2] = (int64_t)((uint64_t)stack[sp - 2] << (stack[sp - 1] & 63));
      --sp;
      break;
    case OP_SHR:
      NEED(2);
      stack[sp - 2] = (int64_t)((uint64_t)stack[sp - 2] >> (stack[sp - 1] & 63));
      --sp;
      break;
    case OP_DUP:
      NEED(1);
      ROOM();
      stack[sp] = stack[sp - 1];
      ++sp;
      break;
    case OP_SWAP: {
      NEED(2);
      int64_t t = stack[sp - 1];
      stack[sp - 1] = stack[sp - 2];
      stack[sp - 2] = t;
      break;
    }
    case OP_DROP:
      NEED(1);
      --sp;
      break;
    case OP_LT:
      NEED(2);
      stack[sp - 2] = stack[sp - 2] < stack[sp - 1];
      --sp;
      break;
    case OP_EQ:
      NEED(2);
      stack[sp - 2] = stack[sp - 2] == stack[sp - 1];
      --sp;
      break;
    case OP_JMP:
    case OP_JZ:
    case OP_JNZ: {
      OPERAND(2);
      int16_t rel = (int16_t)((uint16_t)code[pc] | (uint16_t)code[pc + 1] << 8);
      pc += 2;
      int take = 1;
      if (op != OP_JMP) {
        NEED(1);
        int64_t v = stack[--sp];
        take = (op == OP_JZ) ? (v == 0) : (v != 0);
      }
      if (take) {
        int64_t target = pc + rel;
        if (target < 0 || target > len) return -3;
        pc = target;
      }
      break;
    }
    case OP_INC:
      OPERAND(1);
      if (code[pc] >= NREGS) return -6;
      regs[code[pc]] = (int64_t)((uint64_t)regs[code[pc]] + 1);
      pc += 1;
      break;
    case OP_DEC:
      OPERAND(1);
      if (code[pc] >= NREGS) return -6;
      regs[code[pc]] = (int64_t)((uint64_t)regs[code[pc]] - 1);
      pc += 1;
      break;
    case OP_OUT:
      NEED(1);
      --sp;
      if (outs < out_cap) out[outs] = stack[sp];
      ++outs;
      break;
    case OP_OVER:
      NEED(2);
      ROOM();
      stack[sp] = stack[sp - 2];
      ++sp;
      break;
    case OP_ADDI:
      OPERAND(1);
      NEED(1);
      stack[sp - 1] = (int64_t)((uint64_t)stack[sp - 1] + (uint64_t)(int64_t)(int8_t)code[pc]);
      pc += 1;
      break;
    default:
      return -1;
    }
  }
#undef NEED
#undef ROOM
#undef OPERAND
  return outs;
}

int64_t interp_run_buf(const uint8_t* code, int64_t len, int64_t* out, int64_t out_cap) {
  if (len < 0 || out_cap < 0) return -7;
  return execute(code, len, out, out_cap);
}

/* A tiny assembler with backpatched labels, so the built-in programs read like
 * the output of a compiler rather than a hex dump. */
typedef struct {
  uint8_t* buf;
  int64_t len;
  int64_t cap;
  int64_t labels[16];
  int64_t fixups[32]; /* position of a rel16 operand */
  int fixup_label[32];
  int nfixups;
} Asm;

static void emit(Asm* a, uint8_t b) {
  if (a->len < a->cap) a->buf[a->len] = b;
  a->len++;
}
static void emit_op1(Asm* a, uint8_t op, uint8_t x) {
  emit(a, op);
  emit(a, x);
}
static void emit_push(Asm* a, int32_t v) {
  if (v >= -128 && v <= 127) {
    emit_op1(a, OP_PUSH8, (uint8_t)(int8_t)v);
  } else {
    emit(a, OP_PUSH32);
    for (int i = 0; i < 4; ++i)
      emit(a, (uint8_t)((uint32_t)v >> (8 * i)));
  }
}
static void label(Asm* a, int l) {
  a->labels[l] = a->len;
}
static void jump(Asm* a, uint8_t op, int l) {
  emit(a, op);
  a->fixups[a->nfixups] = a->len;
  a->fixup_label[a->nfixups] = l;
  a->nfixups++;
  emit(a, 0);
  emit(a, 0);
}
static void link_labels(Asm* a) {
  for (int i = 0; i < a->nfixups; ++i) {
    int64_t at = a->fixups[i];
    int64_t rel = a->labels[a->fixup_label[i]] - (at + 2);
    a->buf[at] = (uint8_t)(rel & 0xff);
    a->buf[at + 1] = (uint8_t)((rel >> 8) & 0xff);
  }
}

/* for n in [1, limit): count Collatz steps of n; output the total and the max. */
static int64_t asm_collatz(uint8_t* buf, int64_t cap, int32_t limit) {
  Asm a = {buf, 0, cap, {0}, {0}, {0}, 0};
  enum { N = 0, X = 1, STEPS = 2, TOTAL = 3, MAXS = 4 };
  enum { L_OUTER, L_INNER, L_ODD, L_NEXT, L_DONE, L_NOMAX };
  emit_push(&a, 1);
  emit_op1(&a, OP_STORE, N);
  label(&a, L_OUTER);
  emit_op1(&a, OP_LOAD, N);
  emit_push(&a, limit);
  emit(&a, OP_LT);
  jump(&a, OP_JZ, L_DONE);
  emit_op1(&a, OP_LOAD, N);
  emit_op1(&a, OP_STORE, X);
  emit_push(&a, 0);
  emit_op1(&a, OP_STORE, STEPS);
  label(&a, L_INNER);
  emit_op1(&a, OP_LOAD, X);
  emit_push(&a, 1);
  emit(&a, OP_EQ);
  jump(&a, OP_JNZ, L_NEXT);
  emit_op1(&a, OP_INC, STEPS);
  emit_op1(&a, OP_LOAD, X);
  emit_push(&a, 1);
  emit(&a, OP_AND);
  jump(&a, OP_JNZ, L_ODD);
  emit_op1(&a, OP_LOAD, X);
  emit_push(&a, 1);
  emit(&a, OP_SHR);
  emit_op1(&a, OP_STORE, X);
  jump(&a, OP_JMP, L_INNER);
  label(&a, L_ODD);
  emit_op1(&a, OP_LOAD, X);
  emit(&a, OP_DUP);
  emit(&a, OP_DUP);
  emit(&a, OP_ADD);
  emit(&a, OP_ADD);
  emit_op1(&a, OP_ADDI, 1);
  emit_op1(&a, OP_STORE, X);
  jump(&a, OP_JMP, L_INNER);
  label(&a, L_NEXT);
  emit_op1(&a, OP_LOAD, TOTAL);
  emit_op1(&a, OP_LOAD, STEPS);
  emit(&a, OP_ADD);
  emit_op1(&a, OP_STORE, TOTAL);
  emit_op1(&a, OP_LOAD, MAXS);
  emit_op1(&a, OP_LOAD, STEPS);
  emit(&a, OP_LT);
  jump(&a, OP_JZ, L_NOMAX);
  emit_op1(&a, OP_LOAD, STEPS);
  emit_op1(&a, OP_STORE, MAXS);
  label(&a, L_NOMAX);
  emit_op1(&a, OP_INC, N);
  jump(&a, OP_JMP, L_OUTER);
  label(&a, L_DONE);
  emit_op1(&a, OP_LOAD, TOTAL);
  emit(&a, OP_OUT);
  emit_op1(&a, OP_LOAD, MAXS);
  emit(&a, OP_OUT);
  emit(&a, OP_HALT);
  link_labels(&a);
  return a.len;
}

/* Count primes below `limit` by trial division (uses the rare DIV/MOD/MUL ops);
 * output the count and the sum of the primes. */
static int64_t asm_primes(uint8_t* buf, int64_t cap, int32_t limit) {
  Asm a = {buf, 0, cap, {0}, {0}, {0}, 0};
  enum { N = 0, D = 1, COUNT = 2, SUM = 3 };
  enum { L_OUTER, L_INNER, L_PRIME, L_COMPOSITE, L_DONE };
  emit_push(&a, 2);
  emit_op1(&a, OP_STORE, N);
  label(&a, L_OUTER);
  emit_op1(&a, OP_LOAD, N);
  emit_push(&a, limit);
  emit(&a, OP_LT);
  jump(&a, OP_JZ, L_DONE);
  emit_push(&a, 2);
  emit_op1(&a, OP_STORE, D);
  label(&a, L_INNER);
  emit_op1(&a, OP_LOAD, D);
  emit(&a, OP_DUP);
  emit(&a, OP_MUL);
  emit_op1(&a, OP_LOAD, N);
  emit(&a, OP_SWAP);
  emit(&a, OP_LT); /* n < d*d -> prime */
  jump(&a, OP_JNZ, L_PRIME);
  emit_op1(&a, OP_LOAD, N);
  emit_op1(&a, OP_LOAD, D);
  emit(&a, OP_MOD);
  jump(&a, OP_JZ, L_COMPOSITE);
  emit_op1(&a, OP_INC, D);
  jump(&a, OP_JMP, L_INNER);
  label(&a, L_PRIME);
  emit_op1(&a, OP_INC, COUNT);
  emit_op1(&a, OP_LOAD, SUM);
  emit_op1(&a, OP_LOAD, N);
  emit(&a, OP_ADD);
  emit_op1(&a, OP_STORE, SUM);
  label(&a, L_COMPOSITE);
  emit_op1(&a, OP_INC, N);
  jump(&a, OP_JMP, L_OUTER);
  label(&a, L_DONE);
  emit_op1(&a, OP_LOAD, COUNT);
  emit(&a, OP_OUT);
  emit_op1(&a, OP_LOAD, SUM);
  emit(&a, OP_OUT);
  emit(&a, OP_HALT);
  link_labels(&a);
  return a.len;
}

/* h = (h ^ i) * 0x100000001b3 for i in [0, rounds); output every 4096th h. */
static int64_t asm_hash(uint8_t* buf, int64_t cap, int32_t rounds) {
  Asm a = {buf, 0, cap, {0}, {0}, {0}, 0};
  enum { I = 0, H = 1 };
  enum { L_LOOP, L_SKIP, L_DONE };
  emit_push(&a, (int32_t)0x811c9dc5);
  emit_op1(&a, OP_STORE, H);
  label(&a, L_LOOP);
  emit_op1(&a, OP_LOAD, I);
  emit_push(&a, rounds);
  emit(&a, OP_LT);
  jump(&a, OP_JZ, L_DONE);
  emit_op1(&a, OP_LOAD, H);
  emit_op1(&a, OP_LOAD, I);
  emit(&a, OP_XOR);
  emit_push(&a, 0x1b3);
  emit_push(&a, 1);
  emit_push(&a, 40);
  emit(&a, OP_SHL);
  emit(&a, OP_OR); /* 0x100000001b3 */
  emit(&a, OP_MUL);
  emit_op1(&a, OP_STORE, H);
  emit_op1(&a, OP_LOAD, I);
  emit_push(&a, 4095);
  emit(&a, OP_AND);
  jump(&a, OP_JNZ, L_SKIP);
  emit_op1(&a, OP_LOAD, H);
  emit(&a, OP_OUT);
  label(&a, L_SKIP);
  emit_op1(&a, OP_INC, I);
  jump(&a, OP_JMP, L_LOOP);
  label(&a, L_DONE);
  emit_op1(&a, OP_LOAD, H);
  emit(&a, OP_OUT);
  emit(&a, OP_HALT);
  link_labels(&a);
  return a.len;
}

static uint64_t fold(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

uint64_t interp_run(void) {
  uint8_t code[512];
  int64_t out[64];
  uint64_t h = 0;

  int64_t len = asm_collatz(code, sizeof code, 7000);
  int64_t n = execute(code, len, out, 64);
  h = fold(h, (uint64_t)n);
  for (int64_t i = 0; i < n && i < 64; ++i)
    h = fold(h, (uint64_t)out[i]);

  len = asm_primes(code, sizeof code, 18000);
  n = execute(code, len, out, 64);
  h = fold(h, (uint64_t)n);
  for (int64_t i = 0; i < n && i < 64; ++i)
    h = fold(h, (uint64_t)out[i]);

  len = asm_hash(code, sizeof code, 120000);
  n = execute(code, len, out, 64);
  h = fold(h, (uint64_t)n);
  for (int64_t i = 0; i < n && i < 64; ++i)
    h = fold(h, (uint64_t)out[i]);
  return h;
}
