/*
 * dispatch: method dispatch through function pointers, as in an interpreter's
 * object model or a plug-in pipeline. 4096 "objects" each carry a pointer to
 * their operations table; a hot loop folds an accumulator through
 * `obj->ops->apply(obj, acc)` over all objects, many times. The kinds are
 * skewed: 80% of the objects are `add` objects, the rest spread over five
 * rarer kinds. Every method is a few instructions, so the cost is the
 * indirect call itself. Shape: a hot indirect call with one dominant target
 * (what indirect-call promotion, then inlining, can use; no branch profile
 * can).
 */
#include "kernel_common.h"

#include <stdlib.h>

typedef struct Obj Obj;
typedef struct {
  uint64_t (*apply)(const Obj*, uint64_t);
} Ops;

struct Obj {
  const Ops* ops;
  uint64_t a;
  uint64_t b;
};

static uint64_t op_add(const Obj* o, uint64_t x) {
  return x + o->a;
}
static uint64_t op_mul(const Obj* o, uint64_t x) {
  return x * (o->a | 1);
}
static uint64_t op_xor(const Obj* o, uint64_t x) {
  return x ^ (o->a + o->b);
}
static uint64_t op_rot(const Obj* o, uint64_t x) {
  unsigned r = (unsigned)(o->b & 63);
  return r ? (x << r) | (x >> (64 - r)) : x;
}
static uint64_t op_mix(const Obj* o, uint64_t x) {
  return mix(x, o->a);
}
static uint64_t op_clamp(const Obj* o, uint64_t x) {
  return x > o->b ? x - o->b : x + o->a;
}

static const Ops kOps[6] = {{op_add}, {op_mul}, {op_xor}, {op_rot}, {op_mix}, {op_clamp}};
static const uint32_t kWeights[6] = {80, 4, 4, 4, 4, 4};

enum { NOBJ = 4096, ROUNDS = 800 };

uint64_t kernel_run(void) {
  Rng rng = {0xd15a7c4ULL};
  Obj* objs = (Obj*)malloc(sizeof(Obj) * NOBJ);
  if (!objs) return 0;
  for (int i = 0; i < NOBJ; ++i) {
    objs[i].ops = &kOps[rng_weighted(&rng, kWeights, 6, 100)];
    objs[i].a = rng_next(&rng) & 0xffff;
    objs[i].b = rng_next(&rng);
  }
  uint64_t acc = 1, sum = 0;
  for (int r = 0; r < ROUNDS; ++r) {
    for (int i = 0; i < NOBJ; ++i)
      acc = objs[i].ops->apply(&objs[i], acc);
    sum = mix(sum, acc);
  }
  free(objs);
  return sum;
}
