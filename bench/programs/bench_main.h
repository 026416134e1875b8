/* main() of the native builds of bench/programs (compiled with
 * -DFDO_BENCH_MAIN): `native N [REPS]` prints run(N), then, for REPS more
 * calls, the wall nanoseconds of each, one per line. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

long run(long n);

static long long fdo_bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s N [REPS]\n", argv[0]);
    return 2;
  }
  const long n = atol(argv[1]);
  const int reps = argc > 2 ? atoi(argv[2]) : 0;
  const long first = run(n);
  printf("%ld\n", first);
  for (int i = 0; i < reps; ++i) {
    const long long t0 = fdo_bench_now_ns();
    const long again = run(n);
    const long long t1 = fdo_bench_now_ns();
    if (again != first) {
      fprintf(stderr, "run(%ld) returned %ld, first %ld\n", n, again, first);
      return 3;
    }
    printf("%lld\n", t1 - t0);
  }
  return 0;
}
