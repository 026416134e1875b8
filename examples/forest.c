/*
 * forest.c: scoring with a gradient-boosted decision-tree ensemble, the way a
 * model-serving runtime would lower a trained model to code: an array of nodes
 * walked per row, with data-dependent branches on quantised features.
 *
 * The model (64 trees, irregular depth up to 10, 16 features) is generated from
 * a fixed seed at the start of every call, so the program has no global state.
 * Features are quantised to 0..1023 and skewed (most rows have small values in
 * the first features, a few features are nearly constant), so many split
 * branches go the same way almost always: what a profile can exploit.
 *
 * Entries:
 *
 *   uint64_t forest_run(void)
 *     Generates 24000 rows, scores each row through the ensemble and returns
 *     a checksum of the integer scores and the predicted classes.
 *
 *   int64_t forest_predict(const int32_t *features, int64_t n_rows,
 *                          int64_t stride, double *probs)
 *     Scores `n_rows` caller-supplied rows. Row r's 16 features are
 *     features[r*stride + 0 .. r*stride + 15] (values are clamped to 0..1023;
 *     stride >= 16). Writes probs[r] = 1 / (1 + exp(-score/1024)) and returns
 *     the number of rows with probs[r] > 0.5, or -1 if n_rows < 0 or
 *     stride < 16, or -2 if the model could not be allocated.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { NFEAT = 16, NTREES = 64, MAX_DEPTH = 10, MAX_NODES_PER_TREE = 1 << (MAX_DEPTH + 1) };

typedef struct {
  int32_t feature; /* -1 for a leaf */
  int32_t threshold;
  int32_t left, right; /* child indexes into the tree's node array */
  int32_t value;       /* leaf score in 1/1024 units */
} Node;

typedef struct {
  Node* nodes; /* NTREES * MAX_NODES_PER_TREE */
  int32_t count[NTREES];
} Forest;

typedef struct {
  uint64_t s;
} Rng;

static uint64_t rng_next(Rng* r) {
  /* splitmix64: tiny, fast, good enough for a fixed-seed workload */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint32_t rng_below(Rng* r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * n) >> 32);
}

/* Skewed feature value: feature f has its own shape. Low features are
 * geometric-ish (mostly small), a few are nearly constant, the rest uniform. */
static int32_t sample_feature(Rng* r, int f) {
  uint64_t x = rng_next(r);
  if (f < 6) {
    int z = __builtin_ctzll(x | (1ULL << 10)); /* P(z = k) = 2^-(k+1) */
    return (int32_t)((z * 96 + (int)((x >> 40) & 63)) & 1023);
  }
  if (f < 9) return (x & 31) == 0 ? (int32_t)((x >> 20) & 1023) : 512;
  return (int32_t)((x >> 30) & 1023);
}

static int32_t build_node(Forest* fo, int t, Rng* r, int depth) {
  int32_t idx = fo->count[t]++;
  Node* n = &fo->nodes[t * MAX_NODES_PER_TREE + idx];
  /* Irregular shape: the deeper we are, the likelier a leaf. */
  if (depth >= MAX_DEPTH || (depth >= 3 && rng_below(r, 10) < (uint32_t)depth)) {
    n->feature = -1;
    n->threshold = 0;
    n->left = n->right = -1;
    n->value = (int32_t)rng_below(r, 2049) - 1024;
    return idx;
  }
  int32_t feature = (int32_t)rng_below(r, NFEAT);
  /* Thresholds are uniform while data is skewed: most splits are lopsided. */
  int32_t threshold = (int32_t)rng_below(r, 1024);
  int32_t left = build_node(fo, t, r, depth + 1);
  int32_t right = build_node(fo, t, r, depth + 1);
  n = &fo->nodes[t * MAX_NODES_PER_TREE + idx];
  n->feature = feature;
  n->threshold = threshold;
  n->left = left;
  n->right = right;
  n->value = 0;
  return idx;
}

static int build_forest(Forest* fo) {
  fo->nodes = (Node*)malloc(sizeof(Node) * NTREES * MAX_NODES_PER_TREE);
  if (!fo->nodes) return 0;
  Rng r = {0x5eedf0e57ULL};
  for (int t = 0; t < NTREES; ++t) {
    fo->count[t] = 0;
    build_node(fo, t, &r, 0);
  }
  return 1;
}

static int32_t score_tree(const Node* nodes, const int32_t* row) {
  int32_t i = 0;
  while (nodes[i].feature >= 0) {
    const Node* n = &nodes[i];
    i = row[n->feature] <= n->threshold ? n->left : n->right;
  }
  return nodes[i].value;
}

static int64_t score_row(const Forest* fo, const int32_t* row) {
  int64_t s = 0;
  for (int t = 0; t < NTREES; ++t)
    s += score_tree(&fo->nodes[t * MAX_NODES_PER_TREE], row);
  return s;
}

uint64_t forest_run(void) {
  Forest fo;
  if (!build_forest(&fo)) return 0;
  enum { ROWS = 24000 };
  int32_t* rows = (int32_t*)malloc(sizeof(int32_t) * ROWS * NFEAT);
  if (!rows) {
    free(fo.nodes);
    return 0;
  }
  Rng r = {0xda7a5e7ULL};
  for (int i = 0; i < ROWS; ++i)
    for (int f = 0; f < NFEAT; ++f)
      rows[i * NFEAT + f] = sample_feature(&r, f);

  uint64_t h = 1469598103934665603ULL;
  int64_t positives = 0;
  for (int i = 0; i < ROWS; ++i) {
    int64_t s = score_row(&fo, &rows[i * NFEAT]);
    positives += s > 0;
    h = (h ^ (uint64_t)s) * 1099511628211ULL;
  }
  free(rows);
  free(fo.nodes);
  return h ^ (uint64_t)positives;
}

int64_t forest_predict(const int32_t* features, int64_t n_rows, int64_t stride, double* probs) {
  if (n_rows < 0 || stride < NFEAT) return -1;
  Forest fo;
  if (!build_forest(&fo)) return -2;
  int64_t positives = 0;
  for (int64_t i = 0; i < n_rows; ++i) {
    int32_t row[NFEAT];
    for (int f = 0; f < NFEAT; ++f) {
      int32_t v = features[i * stride + f];
      row[f] = v < 0 ? 0 : (v > 1023 ? 1023 : v);
    }
    int64_t s = score_row(&fo, row);
    double p = 1.0 / (1.0 + exp(-(double)s / 1024.0));
    probs[i] = p;
    positives += p > 0.5;
  }
  free(fo.nodes);
  return positives;
}
