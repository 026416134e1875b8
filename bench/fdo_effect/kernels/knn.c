/*
 * knn: k-nearest-neighbour classification with early abandoning, a common
 * small ML kernel (anomaly detection, recommendation candidates). Each query
 * is compared with 2048 labelled reference points of 24 int16 features; the
 * squared distance is accumulated in blocks of 8 dimensions and abandoned as
 * soon as it exceeds the current k-th best (k = 5), and survivors are inserted
 * into a sorted top-k list. Features are skewed (the first dimensions carry
 * most of the variance, clusters are uneven), so the abandon test usually
 * fires after the first block: the branch is data-dependent but biased.
 * Integer arithmetic only: results are exact whatever the vector width.
 */
#include "kernel_common.h"

#include <stdlib.h>

enum { DIM = 24, NREF = 2048, NQUERY = 5120, K = 5, NCLASS = 8, BLOCK = 8 };

typedef struct {
  int64_t dist[K];
  int32_t label[K];
  int n;
} TopK;

static void topk_insert(TopK* t, int64_t d, int32_t label) {
  int i;
  if (t->n < K) {
    i = t->n++;
  } else {
    if (d >= t->dist[K - 1]) return;
    i = K - 1;
  }
  while (i > 0 && t->dist[i - 1] > d) {
    t->dist[i] = t->dist[i - 1];
    t->label[i] = t->label[i - 1];
    --i;
  }
  t->dist[i] = d;
  t->label[i] = label;
}

static int64_t block_dist(const int16_t* a, const int16_t* b) {
  int64_t s = 0;
  for (int d = 0; d < BLOCK; ++d) {
    int64_t diff = (int64_t)a[d] - (int64_t)b[d];
    s += diff * diff;
  }
  return s;
}

static int classify(const int16_t* ref, const int32_t* labels, const int16_t* q,
                    uint64_t* abandoned) {
  TopK t;
  t.n = 0;
  for (int i = 0; i < NREF; ++i) {
    const int16_t* p = &ref[i * DIM];
    int64_t bound = t.n < K ? INT64_MAX : t.dist[K - 1];
    int64_t d = 0;
    int dd = 0;
    for (; dd < DIM; dd += BLOCK) {
      d += block_dist(p + dd, q + dd);
      if (d >= bound) break;
    }
    if (dd < DIM) {
      (*abandoned)++;
      continue;
    }
    topk_insert(&t, d, labels[i]);
  }
  /* Majority vote, ties to the nearer neighbour (lower rank). */
  int votes[NCLASS] = {0};
  for (int i = 0; i < t.n; ++i)
    votes[t.label[i]]++;
  int best = t.label[0];
  for (int i = 1; i < t.n; ++i)
    if (votes[t.label[i]] > votes[best]) best = t.label[i];
  return best;
}

/* A point of class c: cluster centre plus noise whose scale decays with the
 * dimension (dims 0..7 dominate), plus rare outliers. */
static void gen_point(Rng* r, const int16_t* centres, int c, int16_t* out) {
  for (int d = 0; d < DIM; ++d) {
    int scale = d < 8 ? 4000 : (d < 16 ? 600 : 150);
    int32_t noise = (int32_t)rng_below(r, 2 * scale + 1) - scale;
    if (rng_below(r, 256) == 0) noise *= 8;
    int32_t v = centres[c * DIM + d] + noise;
    out[d] = (int16_t)(v < -32000 ? -32000 : (v > 32000 ? 32000 : v));
  }
}

uint64_t kernel_run(void) {
  int16_t* ref = (int16_t*)malloc(sizeof(int16_t) * NREF * DIM);
  int32_t* labels = (int32_t*)malloc(sizeof(int32_t) * NREF);
  int16_t* centres = (int16_t*)malloc(sizeof(int16_t) * NCLASS * DIM);
  if (!ref || !labels || !centres) {
    free(ref);
    free(labels);
    free(centres);
    return 0;
  }
  Rng r = {0x4a11ULL};
  for (int c = 0; c < NCLASS; ++c)
    for (int d = 0; d < DIM; ++d)
      centres[c * DIM + d] =
          (int16_t)((int32_t)rng_below(&r, d < 8 ? 16000 : 2000) - (d < 8 ? 8000 : 1000));

  /* Uneven classes: class 0 has half the points, class 7 very few. */
  for (int i = 0; i < NREF; ++i) {
    int c = (int)rng_geometric(&r, NCLASS - 1);
    labels[i] = c;
    gen_point(&r, centres, c, &ref[i * DIM]);
  }

  uint64_t h = 0, abandoned = 0;
  int confusion[NCLASS][NCLASS] = {{0}};
  int16_t q[DIM];
  for (int i = 0; i < NQUERY; ++i) {
    int c = (int)rng_geometric(&r, NCLASS - 1);
    gen_point(&r, centres, c, q);
    int pred = classify(ref, labels, q, &abandoned);
    confusion[c][pred]++;
    h = mix(h, (uint64_t)pred);
  }
  h = mix(h, abandoned);
  for (int a = 0; a < NCLASS; ++a)
    for (int b = 0; b < NCLASS; ++b)
      h = mix(h, (uint64_t)confusion[a][b]);
  free(ref);
  free(labels);
  free(centres);
  return h;
}
