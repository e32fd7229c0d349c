/* Drop-in test: an ordinary NCCL program, compiled against NVIDIA's nccl.h and linked
 * against NVIDIA's libnccl.so (CUDA toolkit), run with LD_LIBRARY_PATH=<build>/nccl so
 * that the dynamic loader picks snccl's libnccl.so.2 instead. Nothing here knows about
 * snccl, except the check that the loaded libnccl.so.2 really is the one from
 * $SNCCL_EXPECT_NCCL_DIR (otherwise the test would silently run NVIDIA's library).
 *
 * The parent creates the unique ids; two forked children are ranks 0 and 1 and run
 * AllReduce on host (malloc'ed) buffers with stream 0 (snccl: blocking call). */
#define _GNU_SOURCE
#include <nccl.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 2

static int fail(const char* who, const char* what) {
  fprintf(stderr, "dropin: %s: %s\n", who, what);
  return 1;
}

#define NCCLCHECK(who, call)                                                           \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "dropin: %s: %s failed: %d '%s' (last error: '%s')\n", who, #call, \
              (int)r_, ncclGetErrorString(r_), ncclGetLastError(NULL));                \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

/* The libnccl.so.2 that the loader mapped must be the one in $SNCCL_EXPECT_NCCL_DIR,
 * and it must be the only libnccl in the process. */
static int check_loaded_library(void) {
  const char* dir = getenv("SNCCL_EXPECT_NCCL_DIR");
  char want[PATH_MAX], line[2 * PATH_MAX], found[PATH_MAX] = "";
  int nlibs = 0;
  void* handle;
  struct link_map* map = NULL;
  FILE* maps;
  if (dir == NULL) return fail("setup", "SNCCL_EXPECT_NCCL_DIR is not set");
  if (realpath(dir, want) == NULL) return fail("setup", "SNCCL_EXPECT_NCCL_DIR does not exist");

  /* The object the loader resolved "libnccl.so.2" (our DT_NEEDED) to. */
  handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (handle == NULL || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL)
    return fail("loader", "libnccl.so.2 is not loaded");
  {
    char real[PATH_MAX];
    char* slash;
    if (realpath(map->l_name, real) == NULL) return fail("loader", "realpath of the loaded libnccl.so.2");
    slash = strrchr(real, '/');
    if (slash == NULL) return fail("loader", "loaded libnccl.so.2 has no directory");
    *slash = '\0';
    if (strcmp(real, want) != 0) {
      fprintf(stderr, "dropin: libnccl.so.2 was loaded from %s, expected %s\n", map->l_name, want);
      return 1;
    }
  }
  dlclose(handle);

  /* And nothing else named libnccl is mapped (e.g. NVIDIA's through an RPATH). */
  maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return fail("loader", "cannot read /proc/self/maps");
  while (fgets(line, sizeof(line), maps) != NULL) {
    char* path = strchr(line, '/');
    char* base;
    if (path == NULL) continue;
    path[strcspn(path, "\n")] = '\0';
    base = strrchr(path, '/') + 1;
    if (strncmp(base, "libnccl.so", 10) != 0) continue;
    if (strcmp(path, found) == 0) continue; /* same object, next segment */
    snprintf(found, sizeof(found), "%s", path);
    nlibs++;
    if (strncmp(path, want, strlen(want)) != 0 || path[strlen(want)] != '/') {
      fprintf(stderr, "dropin: %s is mapped, expected only %s/libnccl.so*\n", path, want);
      fclose(maps);
      return 1;
    }
  }
  fclose(maps);
  if (nlibs != 1) return fail("loader", "expected exactly one libnccl.so* mapping");
  printf("dropin: loaded %s\n", found);
  return 0;
}

static int check_version_and_strings(void) {
  static const char* const expected[] = {
      "no error",
      "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
      "unhandled system error (run with NCCL_DEBUG=INFO for details)",
      "internal error - please report this issue to the NCCL developers",
      "invalid argument (run with NCCL_DEBUG=WARN for details)",
      "invalid usage (run with NCCL_DEBUG=WARN for details)",
      "remote process exited or there was a network error",
      "NCCL operation in progress",
  };
  int version = 0, i;
  NCCLCHECK("parent", ncclGetVersion(&version));
  if (version != 22809 || version != NCCL_VERSION_CODE) {
    fprintf(stderr, "dropin: ncclGetVersion = %d, expected 22809 (header %d)\n", version, NCCL_VERSION_CODE);
    return 1;
  }
  for (i = 0; i < (int)(sizeof(expected) / sizeof(expected[0])); i++) {
    const char* s = ncclGetErrorString((ncclResult_t)i);
    if (s == NULL || strcmp(s, expected[i]) != 0) {
      fprintf(stderr, "dropin: ncclGetErrorString(%d) = '%s', expected '%s'\n", i, s ? s : "(null)", expected[i]);
      return 1;
    }
  }
  if (strcmp(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)") != 0)
    return fail("parent", "ncclGetErrorString(ncclInvalidArgument)");
  if (ncclGetLastError(NULL) == NULL) return fail("parent", "ncclGetLastError(NULL) returned NULL");
  printf("dropin: ncclGetVersion %d, error strings ok\n", version);
  return 0;
}

/* One AllReduce (sum) of count floats, out of place and in place, checked exactly. */
static int allreduce(const char* who, ncclComm_t comm, int rank, size_t count) {
  float* send = (float*)malloc(count * sizeof(float));
  float* recv = (float*)malloc(count * sizeof(float));
  size_t i;
  int bad = 0;
  if (send == NULL || recv == NULL) return fail(who, "malloc");
  for (i = 0; i < count; i++) {
    send[i] = (float)(rank + 1) + 0.5f * (float)(i % 13); /* sums are exact in float */
    recv[i] = -7.0f;
  }
  NCCLCHECK(who, ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, (cudaStream_t)0));
  for (i = 0; i < count && bad < 5; i++) {
    float want = 3.0f + (float)(i % 13);
    if (recv[i] != want) {
      fprintf(stderr, "dropin: %s: count %zu: recv[%zu] = %g, expected %g\n", who, count, i, recv[i], want);
      bad++;
    }
  }
  NCCLCHECK(who, ncclAllReduce(send, send, count, ncclFloat, ncclSum, comm, (cudaStream_t)0));
  for (i = 0; i < count && bad < 5; i++) {
    if (send[i] != recv[i]) {
      fprintf(stderr, "dropin: %s: in-place count %zu: [%zu] = %g, expected %g\n", who, count, i, send[i], recv[i]);
      bad++;
    }
  }
  free(send);
  free(recv);
  return bad != 0;
}

static int child(int rank, ncclUniqueId id, ncclUniqueId id2) {
  char who[16];
  ncclComm_t comm = NCCL_COMM_NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER; /* laid out by NVIDIA's header */
  int n = -1, r = -1;
  ncclResult_t async = ncclInternalError;
  alarm(60); /* alarms are not inherited across fork */
  snprintf(who, sizeof(who), "rank %d", rank);

  NCCLCHECK(who, ncclCommInitRank(&comm, NRANKS, id, rank));
  NCCLCHECK(who, ncclCommCount(comm, &n));
  NCCLCHECK(who, ncclCommUserRank(comm, &r));
  if (n != NRANKS || r != rank) return fail(who, "ncclCommCount/ncclCommUserRank");
  if (allreduce(who, comm, rank, 7)) return 1;
  if (allreduce(who, comm, rank, 1000003)) return 1;
  NCCLCHECK(who, ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) return fail(who, "ncclCommGetAsyncError");
  NCCLCHECK(who, ncclCommDestroy(comm));

  /* Same again through ncclCommInitRankConfig with an NVIDIA-initialised config. */
  config.blocking = 1;
  config.commName = "dropin";
  comm = NCCL_COMM_NULL;
  NCCLCHECK(who, ncclCommInitRankConfig(&comm, NRANKS, id2, rank, &config));
  if (allreduce(who, comm, rank, 4099)) return 1;
  NCCLCHECK(who, ncclCommFinalize(comm));
  NCCLCHECK(who, ncclCommDestroy(comm));
  printf("dropin: %s ok\n", who);
  return 0;
}

int main(void) {
  ncclUniqueId id, id2;
  pid_t pids[NRANKS];
  int rank, failed = 0;
  alarm(60); /* watchdog: a hang kills the test instead of waiting for the ctest timeout */
  setvbuf(stdout, NULL, _IONBF, 0);

  if (check_loaded_library()) return 1;
  if (check_version_and_strings()) return 1;
  NCCLCHECK("parent", ncclGetUniqueId(&id));
  NCCLCHECK("parent", ncclGetUniqueId(&id2));

  for (rank = 0; rank < NRANKS; rank++) {
    pids[rank] = fork();
    if (pids[rank] < 0) return fail("parent", strerror(errno));
    if (pids[rank] == 0) exit(child(rank, id, id2));
  }
  for (rank = 0; rank < NRANKS; rank++) {
    int status = 0;
    if (waitpid(pids[rank], &status, 0) < 0) return fail("parent", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFSIGNALED(status))
      fprintf(stderr, "dropin: rank %d killed by signal %d%s\n", rank, WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? " (60 s watchdog)" : "");
    else
      fprintf(stderr, "dropin: rank %d exited with %d\n", rank, WEXITSTATUS(status));
    failed = 1;
    /* Do not leave the other rank waiting for a dead peer. */
    for (int other = 0; other < NRANKS; other++)
      if (other != rank) kill(pids[other], SIGKILL);
  }
  if (failed) return 1;
  printf("dropin: PASS\n");
  return 0;
}
