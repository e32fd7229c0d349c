// membw.c: the machine's memory bandwidth, STREAM-style, for perf/compare's memory bound.
//
// Two copy kernels over arrays of -m MiB, each thread (OpenMP, static split) on its slice:
//   copy      c[i] = a[i] with ordinary stores: the CPU reads every output line before it
//             writes it (read for ownership), so memory moves about 3 bytes for the 2 that
//             STREAM counts.
//   copy_nt   the same with non-temporal (streaming) stores and an sfence: the output lines
//             go to memory without being read, 2 bytes moved for the 2 counted. snccl's
//             single-copy AllReduce writes its output this way, so a bound measured with
//             ordinary stores alone would sit below what snccl can reach.
// Without SSE2 copy_nt is the plain loop and says so ("nt=0" in the header line).
//
// Output: a header line, then one line per kernel:
//   <kernel> <STREAM_med> <STREAM_max> <time_ms_med>
// STREAM GB/s counts 2 x array bytes per copy (read + written, 1 GB = 1e9 B), median and
// best of -r repetitions after two warm-ups.
//
// Build (perf/compare does): cc -O3 -march=native -fopenmp -fno-tree-loop-distribute-patterns
//   -Wall -Wextra -Werror perf/membw.c -o membw    (the last -f keeps the plain loop a loop:
//   glibc's memcpy may itself use streaming stores for large copies)
// Run: OMP_NUM_THREADS=<cores> OMP_PROC_BIND=true OMP_PLACES=cores ./membw [-m MiB] [-r reps]
#define _GNU_SOURCE
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define MEMBW_NT 1
#else
#define MEMBW_NT 0
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmpd(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

// The calling thread's slice [lo, hi) of n 64-bit words, 64-byte aligned at both ends but the
// last (n is a multiple of 8 words here, so every slice is too).
static void slice(size_t n, size_t *lo, size_t *hi) {
  size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
  size_t per = ((n / nt) + 7) & ~(size_t)7;
  *lo = per * t;
  *hi = *lo + per;
  if (*lo > n) *lo = n;
  if (*hi > n) *hi = n;
}

static void copy_plain(uint64_t *restrict c, const uint64_t *restrict a, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; i++) c[i] = a[i];
}

static void copy_nt(uint64_t *restrict c, const uint64_t *restrict a, size_t lo, size_t hi) {
#if MEMBW_NT
  // lo and hi are multiples of 8 words (64 bytes) and the arrays 64-byte aligned.
  for (size_t i = lo; i < hi; i += 8) {
    __m128i x0 = _mm_load_si128((const __m128i *)(a + i));
    __m128i x1 = _mm_load_si128((const __m128i *)(a + i + 2));
    __m128i x2 = _mm_load_si128((const __m128i *)(a + i + 4));
    __m128i x3 = _mm_load_si128((const __m128i *)(a + i + 6));
    _mm_stream_si128((__m128i *)(c + i), x0);
    _mm_stream_si128((__m128i *)(c + i + 2), x1);
    _mm_stream_si128((__m128i *)(c + i + 4), x2);
    _mm_stream_si128((__m128i *)(c + i + 6), x3);
  }
  _mm_sfence();  // streaming stores are weakly ordered: complete them before the timer stops
#else
  copy_plain(c, a, lo, hi);
#endif
}

static void *xalloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 2u << 20, bytes) != 0) {
    perror("membw: posix_memalign");
    exit(1);
  }
  return p;
}

int main(int argc, char **argv) {
  size_t mib = 64;
  int reps = 10, opt;
  while ((opt = getopt(argc, argv, "m:r:")) != -1) {
    if (opt == 'm') mib = strtoul(optarg, NULL, 10);
    else if (opt == 'r') reps = atoi(optarg);
    else {
      fprintf(stderr, "usage: %s [-m MiB per array] [-r repetitions]\n", argv[0]);
      return 2;
    }
  }
  if (mib == 0 || reps < 1) {
    fprintf(stderr, "membw: -m and -r must be positive\n");
    return 2;
  }
  size_t bytes = mib << 20, n = bytes / sizeof(uint64_t);
  uint64_t *a = xalloc(bytes), *c = xalloc(bytes);
  int threads = 1;
#pragma omp parallel
  {
    size_t lo, hi;
    slice(n, &lo, &hi);  // first touch by the thread that copies the slice
    for (size_t i = lo; i < hi; i++) {
      a[i] = i;
      c[i] = 0;
    }
#pragma omp single
    threads = omp_get_num_threads();
  }
  printf("# membw: threads=%d array=%zu MiB reps=%d nt=%d\n", threads, mib, reps, MEMBW_NT);
  printf("# %-8s %12s %12s %12s\n", "kernel", "STREAM_med", "STREAM_max", "time_ms_med");
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (t == NULL) return 1;
  static const char *const names[2] = {"copy", "copy_nt"};
  for (int k = 0; k < 2; k++) {
    for (int r = -2; r < reps; r++) {  // two warm-ups
      double t0 = 0, t1 = 0;
#pragma omp parallel
      {
        size_t lo, hi;
        slice(n, &lo, &hi);
#pragma omp barrier
#pragma omp master
        t0 = now();
#pragma omp barrier
        if (k == 0) copy_plain(c, a, lo, hi);
        else copy_nt(c, a, lo, hi);
#pragma omp barrier
#pragma omp master
        t1 = now();
      }
      if (r >= 0) t[r] = t1 - t0;
    }
    if (c[n / 3] != n / 3) {
      fprintf(stderr, "membw: %s copied wrong data\n", names[k]);
      return 1;
    }
    memset(c, 0, bytes);
    qsort(t, (size_t)reps, sizeof(double), cmpd);
    double med = t[reps / 2], best = t[0];
    printf("  %-8s %12.2f %12.2f %12.3f\n", names[k], 2.0 * (double)bytes / med / 1e9,
           2.0 * (double)bytes / best / 1e9, med * 1e3);
  }
  free(t);
  free(a);
  free(c);
  return 0;
}
