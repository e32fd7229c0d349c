/* snccl extensions to the NCCL API.
 *
 * Host streams give NCCL's asynchronous model on the CPU: an operation passed a host
 * stream (cast to cudaStream_t) is queued and run in order by a worker thread, so the
 * caller can compute while it communicates. stream == NULL means "blocking": the call
 * returns when the operation has completed. */
#ifndef SNCCL_H_
#define SNCCL_H_

#include "nccl.h"

#define SNCCL_MAJOR 0
#define SNCCL_MINOR 1
#define SNCCL_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sncclHostStream* sncclStream_t;

/* Converts a host stream to the cudaStream_t argument of the collective calls. */
#define SNCCL_STREAM(s) ((cudaStream_t)(s))

/* Creates a host stream with its own worker thread. */
ncclResult_t sncclStreamCreate(sncclStream_t* stream);
/* Blocks until every operation queued on the stream has completed; returns the first
 * error an operation on it returned since the last synchronize, else ncclSuccess. */
ncclResult_t sncclStreamSynchronize(sncclStream_t stream);
/* ncclSuccess when the stream is idle, ncclInProgress while work is queued or running,
 * or the pending error of a failed operation. Never blocks. */
ncclResult_t sncclStreamQuery(sncclStream_t stream);
/* Waits for queued work, then frees the stream. */
ncclResult_t sncclStreamDestroy(sncclStream_t stream);

/* Quantized AllReduce of float32 gradients: the data crosses every link as `bits`-bit
 * integers (8 or 4) with one float32 scale per block of `blockSize` elements (an even
 * number from 8 to 4096; 0 means 256), about 4x (int8) or 8x (int4) fewer bytes than
 * ncclAllReduce. Lossy: each element's result differs from the exact sum by at most half a
 * quantization step of every block it went through (one per rank), but every rank gets
 * the same bits. op is ncclSum or ncclAvg; datatype ncclFloat32; host memory only.
 *
 * residual: NULL, or `count` floats this rank keeps between calls (zeroed before the
 * first) for error feedback: each call adds back what this rank's quantization lost in
 * the previous one, so the error summed over many calls stays bounded instead of growing.
 * Use one residual per (communicator, buffer): it is tied to the count and format.
 *
 * It runs as a collective (every rank calls it in the same order as its other
 * collectives), not inside ncclGroupStart/End. See docs/compression.md. */
ncclResult_t sncclAllReduceQuantized(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                     ncclRedOp_t op, int bits, size_t blockSize, float* residual, ncclComm_t comm,
                                     cudaStream_t stream);

/* Writes the communicator's flight recorder (its last SNCCL_FLIGHT_RECORDER operations:
 * sequence number, collective, count, type, root, algorithm, progress, what it waited on,
 * times; its error, if any) to the file `path`, or, when path is NULL, to
 * snccl-flight-<commhash>-r<rank>.txt in SNCCL_FLIGHT_DIR (ncclInvalidUsage when that is
 * unset). Works on a communicator in error state, and while its operations run on other
 * threads. sn_doctor merges the files of all ranks. See docs/operations.md. */
ncclResult_t sncclCommDumpFlightRecorder(ncclComm_t comm, const char* path);

/* The snccl version as a string, e.g. "snccl 0.1.0 (NCCL API 2.28.9)". */
const char* sncclVersionString(void);

#ifdef __cplusplus
}
#endif

#endif /* SNCCL_H_ */
