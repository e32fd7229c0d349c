// The IB net's checks of what a peer wrote into this end's memory or sent over the control
// socket, and the split of a message into parts that the checks mirror.
#include "transport/net/ib/ib_wire.h"

#include "common/status.h"

static_assert(snccl::net::ib::kMaxQps <= 32, "recordProblem keeps a bit per part in 32 bits");

namespace snccl::net::ib {

std::string metaProblem(Meta* m) {
  for (RailMeta& r : m->rails) r.dev[sizeof r.dev - 1] = '\0';
  if (m->magic != kMetaMagic || m->version != kMetaVersion)
    return format("the peer is not an IB net of version %u (magic %08x, version %u)", unsigned(kMetaVersion), m->magic,
                  unsigned(m->version));
  if (m->nqps < 1 || m->nqps > kMaxQps) return format("the peer asks for %u queue pairs", unsigned(m->nqps));
  if (m->nrails < 1 || m->nrails > kMaxRails) return format("the peer has %u rails", unsigned(m->nrails));
  return {};
}

int splitParts(size_t size, int nqps, size_t splitBytes, size_t* chunk) {
  *chunk = size;
  if (nqps <= 1 || size == 0 || size < splitBytes) return 1;
  size_t c = (size + size_t(nqps) - 1) / size_t(nqps);
  c = (c + kPartAlign - 1) / kPartAlign * kPartAlign;
  *chunk = c;
  return int((size + c - 1) / c);
}

std::string recordProblem(const DoneRecord& rec, uint64_t seq, int part, int nqps, size_t posted, size_t offered,
                          const DoneRecord* first, uint32_t partsSeen) {
  if (rec.seq != seq)
    return format("a record of message %llu arrived for message %llu", (unsigned long long)rec.seq,
                  (unsigned long long)seq);
  if ((rec.flags & ~kRecordRetargeted) != 0)
    return format("message %llu: unknown record flags 0x%x", (unsigned long long)seq, unsigned(rec.flags));
  if ((rec.flags & kRecordRetargeted) != 0 && offered == kNoOffer)
    return format("message %llu was written to a place this end never offered", (unsigned long long)seq);
  if ((rec.flags & kRecordRetargeted) != 0 && rec.size != offered)
    return format("message %llu has %llu bytes, the offer it was written to %zu", (unsigned long long)seq,
                  (unsigned long long)rec.size, offered);
  if (rec.size > posted && (rec.flags & kRecordRetargeted) == 0)
    return format("message %llu has %llu bytes, its receive %zu", (unsigned long long)seq, (unsigned long long)rec.size,
                  posted);
  if (rec.nparts < 1 || int(rec.nparts) > nqps || rec.part >= rec.nparts)
    return format("message %llu: part %u of %u over %d queue pairs", (unsigned long long)seq, unsigned(rec.part),
                  unsigned(rec.nparts), nqps);
  if (int(rec.part) != part)
    return format("message %llu: the record of part %u was announced as part %d", (unsigned long long)seq,
                  unsigned(rec.part), part);
  if ((partsSeen >> rec.part & 1) != 0)
    return format("message %llu: part %u arrived twice", (unsigned long long)seq, unsigned(rec.part));
  if (first != nullptr &&
      (first->size != rec.size || first->nparts != rec.nparts || first->imm != rec.imm || first->flags != rec.flags))
    return format("message %llu: its records disagree (%llu or %llu bytes, %u or %u parts, flags 0x%x or 0x%x)",
                  (unsigned long long)seq, (unsigned long long)first->size, (unsigned long long)rec.size,
                  unsigned(first->nparts), unsigned(rec.nparts), unsigned(first->flags), unsigned(rec.flags));
  return {};
}

}  // namespace snccl::net::ib
