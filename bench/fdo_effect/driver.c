/*
 * driver.c: the native timing driver for the FDO-effect kernels. Linked with
 * one kernel; calls kernel_run() in-process and times only that call with
 * CLOCK_MONOTONIC (process start, page faults of the loader and the warm-up
 * calls are outside every figure).
 *
 * Usage: driver [--runs N] [--warmup W] [--quiet] [--clock monotonic|thread-cpu]
 *   Calls kernel_run W times untimed, then N times timed, and prints one JSON
 *   object: {"checksum": C, "warmup": W, "runs": N, "ns": [t1, ..., tN]}.
 *   --quiet prints nothing on success (the PGO training run at build time).
 *   Exit status 3 if two calls return different checksums (the kernel is not
 *   deterministic, or the build is broken), 2 on bad arguments.
 *   --clock thread-cpu times with CLOCK_THREAD_CPUTIME_ID (the calling thread's
 *   CPU time: what other processes of a loaded host take is left out) instead
 *   of CLOCK_MONOTONIC; fdo_effect_jit has the same option (codegen_gap.py).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t kernel_run(void);

static int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int parse_count(const char* flag, const char* s, long max, long* out) {
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 0 || v > max) {
    fprintf(stderr, "driver: %s expects an integer in [0, %ld], got '%s'\n", flag, max, s);
    return 0;
  }
  *out = v;
  return 1;
}

int main(int argc, char** argv) {
  long runs = 5, warmup = 1;
  int quiet = 0;
  clockid_t clock = CLOCK_MONOTONIC;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quiet") == 0) {
      quiet = 1;
    } else if (strcmp(argv[i], "--clock") == 0 && i + 1 < argc) {
      const char* v = argv[++i];
      if (strcmp(v, "monotonic") == 0) {
        clock = CLOCK_MONOTONIC;
      } else if (strcmp(v, "thread-cpu") == 0) {
        clock = CLOCK_THREAD_CPUTIME_ID;
      } else {
        fprintf(stderr, "driver: --clock expects monotonic or thread-cpu, got '%s'\n", v);
        return 2;
      }
    } else if ((strcmp(argv[i], "--runs") == 0 || strcmp(argv[i], "--warmup") == 0) &&
               i + 1 < argc) {
      long* dst = argv[i][2] == 'r' ? &runs : &warmup;
      if (!parse_count(argv[i], argv[i + 1], 100000, dst)) return 2;
      ++i;
    } else {
      fprintf(stderr, "usage: %s [--runs N] [--warmup W] [--quiet] [--clock monotonic|thread-cpu]\n",
              argv[0]);
      return 2;
    }
  }
  if (runs < 1) {
    fprintf(stderr, "driver: --runs must be at least 1\n");
    return 2;
  }
  int64_t* ns = (int64_t*)malloc(sizeof(int64_t) * (size_t)runs);
  if (!ns) {
    fprintf(stderr, "driver: out of memory\n");
    return 2;
  }

  uint64_t first = 0;
  int have_first = 0;
  for (long i = 0; i < warmup + runs; ++i) {
    int64_t t0 = now_ns(clock);
    uint64_t c = kernel_run();
    int64_t t1 = now_ns(clock);
    if (!have_first) {
      first = c;
      have_first = 1;
    } else if (c != first) {
      fprintf(stderr, "driver: kernel_run returned %llu, earlier %llu: not deterministic\n",
              (unsigned long long)c, (unsigned long long)first);
      free(ns);
      return 3;
    }
    if (i >= warmup) ns[i - warmup] = t1 - t0;
  }

  if (quiet) {
    free(ns);
    return 0;
  }
  printf("{\"checksum\": %llu, \"warmup\": %ld, \"runs\": %ld, \"ns\": [",
         (unsigned long long)first, warmup, runs);
  for (long i = 0; i < runs; ++i)
    printf("%s%lld", i ? ", " : "", (long long)ns[i]);
  printf("]}\n");
  free(ns);
  return 0;
}
