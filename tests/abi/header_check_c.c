/* Header equivalence, C side: snccl's nccl.h must compile as strict C99
 * (-std=c99 -pedantic -Wall -Wextra -Werror, see CMakeLists.txt) and satisfy the same
 * expectations as the C++ check. It is also built against NVIDIA's header
 * (SNCCL_ABI_HEADER_CUDA; gnu11, since CUDA's own headers are not pedantic C99). C99 has no _Static_assert, so each expectation is an
 * unnamed bit-field whose width becomes negative (a compile error) when it is false.
 * Redeclaring every API function with the expected prototype is a hard error in C
 * ("conflicting types") if the header's declaration differs. The initializer values
 * are checked at run time; nothing from the library is called, so no linking needed. */
#include <nccl.h>

#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include "abi_expectations.h"

#if defined(SNCCL_ABI_HEADER_CUDA)
#define ABI_HEADER_NAME "CUDA toolkit nccl.h"
#else
#if defined(CUDART_VERSION) || defined(__DRIVER_TYPES_H__)
#error "include/snccl/nccl.h must not include CUDA headers outside nvcc"
#endif
#define ABI_HEADER_NAME "snccl nccl.h"
#endif

#define ABI_BITFIELD(cond) unsigned int : ((cond) ? 1 : -1);
struct snccl_abi_constants {
  int named_member; /* ISO C wants at least one named member */
  SNCCL_ABI_CONSTANTS(ABI_BITFIELD)
};

#define ABI_REDECLARE(ret, name, params) \
  ret nccl##name params;                 \
  ret pnccl##name params;
SNCCL_ABI_FUNCTIONS(ABI_REDECLARE)

static int failures = 0;
#define ABI_CHECK(cond)                          \
  if (!(cond)) {                                 \
    fprintf(stderr, "ABI check failed: %s\n", #cond); \
    failures++;                                  \
  }

int main(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ncclComm_t comm = NCCL_COMM_NULL;
  float undef = NCCL_UNDEF_FLOAT;
  SNCCL_ABI_CONFIG_INITIALIZER(ABI_CHECK, config)
  SNCCL_ABI_SIM_INFO_INITIALIZER(ABI_CHECK, sim)
  ABI_CHECK(comm == NULL)
  ABI_CHECK(undef == -1.0f)
  ABI_CHECK(NCCL_CONFIG_UNDEF_PTR == NULL)
  if (failures) return 1;
  printf("C: %s matches the NCCL 2.28.9 expectations\n", ABI_HEADER_NAME);
  return 0;
}
