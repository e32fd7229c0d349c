/* Installed-package consumer (C, pkg-config): a 2-rank allreduce, one pthread per rank. */
#include <pthread.h>
#include <stdio.h>
#include <snccl/nccl.h>

#define RANKS 2
#define COUNT 1000

static ncclComm_t comms[RANKS];
static int bad;

static void* rankMain(void* arg) {
  int r = (int)(long)arg;
  float in[COUNT], out[COUNT];
  for (int i = 0; i < COUNT; ++i) in[i] = (float)(r + i);
  if (ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comms[r], NULL) != ncclSuccess) bad = 1;
  for (int i = 0; i < COUNT; ++i)
    if (out[i] != (float)(1 + 2 * i)) bad = 1;
  return NULL;
}

int main(void) {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
  if (ncclCommInitAll(comms, RANKS, NULL) != ncclSuccess) return 2;
  pthread_t t[RANKS];
  for (long r = 0; r < RANKS; ++r) pthread_create(&t[r], NULL, rankMain, (void*)r);
  for (int r = 0; r < RANKS; ++r) pthread_join(t[r], NULL);
  for (int r = 0; r < RANKS; ++r) ncclCommDestroy(comms[r]);
  printf("C consumer: NCCL %d, allreduce over %d ranks: %s\n", version, RANKS, bad ? "WRONG" : "ok");
  return bad ? 3 : 0;
}
