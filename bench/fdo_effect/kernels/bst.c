/*
 * bst: an unbalanced binary search tree used as an in-memory index (a symbol
 * table or a session cache) under a skewed operation mix: 90% lookups with
 * Zipf-like popular keys, 7% inserts, 3% deletes. Lookups of popular keys
 * exit early near the root (hot keys are inserted first); misses walk to a
 * leaf. Delete has the classic three cases, the two-children case being
 * rare. Shape: pointer-chasing tree traversal with a three-way compare and
 * a cold restructuring path.
 */
#include "kernel_common.h"

#include <stdlib.h>

typedef struct Node {
  uint64_t key;
  uint64_t value;
  struct Node *left, *right;
} Node;

typedef struct {
  Node* pool;
  Node* free_list;
  int64_t used, cap;
  Node* root;
  int64_t size;
} Tree;

static Node* node_alloc(Tree* t) {
  if (t->free_list) {
    Node* n = t->free_list;
    t->free_list = n->left;
    return n;
  }
  if (t->used == t->cap) return NULL;
  return &t->pool[t->used++];
}

static void node_free(Tree* t, Node* n) {
  n->left = t->free_list;
  t->free_list = n;
}

static Node* lookup(const Tree* t, uint64_t key) {
  Node* n = t->root;
  while (n) {
    if (key == n->key) return n;
    n = key < n->key ? n->left : n->right;
  }
  return NULL;
}

/* Returns 1 if inserted, 0 if the key existed (value updated), -1 if full. */
static int insert(Tree* t, uint64_t key, uint64_t value) {
  Node** link = &t->root;
  while (*link) {
    Node* n = *link;
    if (key == n->key) {
      n->value = value;
      return 0;
    }
    link = key < n->key ? &n->left : &n->right;
  }
  Node* n = node_alloc(t);
  if (!n) return -1;
  n->key = key;
  n->value = value;
  n->left = n->right = NULL;
  *link = n;
  t->size++;
  return 1;
}

static int erase(Tree* t, uint64_t key) {
  Node** link = &t->root;
  while (*link && (*link)->key != key)
    link = key < (*link)->key ? &(*link)->left : &(*link)->right;
  Node* n = *link;
  if (!n) return 0;
  if (!n->left) {
    *link = n->right;
  } else if (!n->right) {
    *link = n->left;
  } else {
    /* Two children: splice out the in-order successor. */
    Node** slink = &n->right;
    while ((*slink)->left)
      slink = &(*slink)->left;
    Node* s = *slink;
    *slink = s->right;
    s->left = n->left;
    s->right = n->right;
    *link = s;
  }
  node_free(t, n);
  t->size--;
  return 1;
}

/* Key universe: rank r (0 = most popular) maps to a scattered key. */
static uint64_t key_of_rank(uint32_t rank) {
  return ((uint64_t)rank * 0x9e3779b97f4a7c15ULL) >> 20;
}

/* Zipf-like rank over [0, n): a geometric "bucket" g, then uniform within
 * ranks [(4^g - 1) / 3, (4^(g+1) - 1) / 3): rank 0 half the time, ranks
 * 1..4 a quarter, and a long tail over the whole universe. */
static uint32_t skewed_rank(Rng* r, uint32_t n) {
  uint32_t g = rng_geometric(r, 12);
  uint32_t width = 1u << (2 * g);
  uint32_t lo = (width - 1) / 3;
  uint32_t rank = lo + rng_below(r, width);
  return rank < n ? rank : rng_below(r, n);
}

uint64_t kernel_run(void) {
  enum { UNIVERSE = 1 << 15, INITIAL = 12000, OPS = 450000, CAP = UNIVERSE };
  Tree t = {0};
  t.pool = (Node*)malloc(sizeof(Node) * CAP);
  if (!t.pool) return 0;
  t.cap = CAP;
  Rng r = {0xb57b57ULL};

  /* Popular keys first (so they sit near the root), then a random fill. */
  for (uint32_t rank = 0; rank < 64; ++rank)
    insert(&t, key_of_rank(rank), rank);
  for (int i = 0; i < INITIAL; ++i) {
    uint32_t rank = rng_below(&r, UNIVERSE);
    insert(&t, key_of_rank(rank), rank);
  }

  uint64_t h = 0, found = 0, sum = 0;
  for (int i = 0; i < OPS; ++i) {
    uint32_t op = rng_below(&r, 100);
    uint32_t rank = skewed_rank(&r, UNIVERSE);
    uint64_t key = key_of_rank(rank);
    if (op < 90) {
      Node* n = lookup(&t, key);
      if (n) {
        found++;
        sum += n->value;
      }
    } else if (op < 97) {
      /* Inserts go to the cold tail so the hot set stays near the root. */
      uint32_t cold = 64 + rng_below(&r, UNIVERSE - 64);
      h = mix(h, (uint64_t)insert(&t, key_of_rank(cold), i));
    } else {
      /* Deletes hit the cold tail too, mostly misses and leaves. */
      uint32_t cold = 64 + rng_below(&r, UNIVERSE - 64);
      h = mix(h, (uint64_t)erase(&t, key_of_rank(cold)));
    }
  }
  h = mix(h, found);
  h = mix(h, sum);
  h = mix(h, (uint64_t)t.size);
  free(t.pool);
  return h;
}
