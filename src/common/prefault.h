// Taking the first-touch cost of a mapping at setup instead of in a timed call.
//
// MAP_POPULATE fills the process's page tables, but on the paravirtualized VMs this runs
// on the hypervisor still traps the first access to each page through them (measured:
// after MAP_POPULATE the first write to a page costs about 5 us and the first read about
// 1.6 us; a read does not spare the later first write). Memory the library allocates
// once and reuses (connection slots, scratch, ncclMemAlloc blocks, peer mappings) is
// touched here, page by page, the way it will be used: written by the side that writes
// it, read by the side that only reads it.
#pragma once

#include <cstddef>

namespace snccl {

// Makes one write access per page without changing any byte (an atomic or with 0, so a
// peer writing the same memory concurrently loses nothing).
void touchPagesForWrite(void* base, size_t bytes);

// Makes one read access per page.
void touchPagesForRead(const void* base, size_t bytes);

}  // namespace snccl
