// sn_sim: runs the real schedule generators (through the algorithm registry) and the cost
// model on a described cluster, without moving data. Per algorithm and message size it
// prints the model's predicted time, the time of a discrete-event simulation of every
// rank's generated schedule (sim_engine.h), nccl-tests' busbw, and the selector's pick.
//
// Tractability: the simulation runs every rank's schedule when rank 0's schedule times the
// rank count stays under --max-steps (default 400000 steps per point); above that (e.g.
// ring AllReduce of 64 KiB and more on 8192 ranks: 8192 x 16383 steps) the point shows the
// model only, marked '*'. Small messages on huge rank counts, where latency decides, are
// simulated in full. --check runs the symbolic checker (checker.h) once per algorithm on
// a small count.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/checker.h"
#include "collectives/tuning/selector.h"
#include "fabric_model.h"
#include "sim_engine.h"
#include "sim_svg.h"

namespace {

using namespace snccl;
using tuning::LinkClass;

struct Preset {
  const char* name;
  int nranks, perNode;
  double intraLat, intraBw, netLat, netBw;
  const char* about;
  // What one channel moves (GB/s) over the scale-up fabric and over the network; 0 for
  // this host, whose channels share the rank's one thread (tuning::ModelParams).
  double intraChanBw = 0, netChanBw = 0;
};

// From the machines' published specifications and NCCL's tuning constants. Bandwidths are
// per rank and direction (NCCL's figures, ~80% of raw); latencies are NCCL's Simple
// per-hop latencies (NVLink ring 3.4 us, NET 14 us) where the reference gives none.
// Per-channel rates are our assumption, not a reference figure: one thread block moves
// ~24 GB/s over the scale-up fabric (so NVLink-class links need 16 channels, as NCCL
// runs 16-32 on them), and a NIC takes two channels (NCCL's default channels per net
// peer is 2).
constexpr Preset kPresets[] = {
    {"dgx-h100-128", 1024, 8, 3.4, 370.8, 14.0, 48.0,
     "128 DGX H100 nodes x 8 GPUs: NVLink4 via NVSwitch (NCCL 370.8 GB/s), 8 x 400G ConnectX-7 per node (46-48 GB/s "
     "each)", 24.0, 24.0},
    {"gb200-nvl72", 288, 72, 3.4, 721.8, 14.0, 48.0,
     "4 GB200 NVL72 racks: 72 GPUs per NVLink5 domain (NCCL 721.8 GB/s), 1 x 400G NIC per GPU between racks", 24.0,
     24.0},
    {"cloudmatrix384", 384, 8, 1.0, 392.0, 2.0, 392.0,
     "CloudMatrix384: 48 nodes x 8 NPUs in one Unified Bus domain, 392 GB/s per NPU, <1 us across nodes (nearly "
     "uniform; 'net' here is the UB L2 tier)", 24.0, 24.0},
    {"fabric-8192", 8192, 8, 3.4, 370.8, 14.0, 48.0,
     "8192 ranks: 1024 nodes x 8, NVLink-class scale-up (370.8 GB/s), 400G per rank scale-out", 24.0, 24.0},
    {"this-host", 8, 8, 0, 0, 0, 0, "this host kind: the calibrated host constants (tuning::hostDefaults)"},
};

struct Options {
  const Preset* preset = &kPresets[4];
  int nranks = 0, nodes = 0, cpus = 0;
  bool threads = false, csv = false, check = false;
  CollKind coll = CollKind::kAllReduce;
  size_t minBytes = 8, maxBytes = size_t(1) << 30;
  uint64_t maxSteps = 400000;
  const char* svg = nullptr;
  std::string algo;
};

double busFactor(CollKind c, int n) {
  if (c == CollKind::kAllReduce) return 2.0 * (n - 1) / n;
  if (c == CollKind::kAllGather || c == CollKind::kReduceScatter) return double(n - 1) / n;
  return 1.0;
}

// nccl-tests' size -> the per-rank count of float32 elements NCCL's API takes.
size_t countOf(CollKind c, size_t bytes, int n) {
  const size_t elems = bytes / 4;
  return (c == CollKind::kAllGather || c == CollKind::kReduceScatter) ? elems / size_t(n) : elems;
}

int usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: sn_sim [--preset NAME] [--nranks N] [--nodes M] [--threads] [--cpus C] [--coll allreduce|broadcast|"
               "reduce|allgather|reducescatter]\n              [-b MINBYTES] [-e MAXBYTES] [--algo NCCL_ALGO-syntax] "
               "[--max-steps S] [--check] [--csv] [--svg FILE] [--list]\n"
               "       sn_sim fabric --help   (a flow-level model of a leaf-spine fabric: ECMP, adaptive, multipath)\n");
  return rc;
}

bool parseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    auto is = [&](const char* f) { return std::strcmp(argv[i], f) == 0; };
    auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (is("--preset")) {
      const char* v = val();
      o->preset = nullptr;
      for (const Preset& p : kPresets)
        if (v && std::strcmp(v, p.name) == 0) o->preset = &p;
      if (!o->preset) return false;
    } else if (is("--nranks")) {
      const char* v = val();
      if (!v) return false;
      o->nranks = std::atoi(v);
    } else if (is("--nodes")) {
      const char* v = val();
      if (!v) return false;
      o->nodes = std::atoi(v);
    } else if (is("--cpus")) {  // CPUs per node: more ranks per node than that oversubscribe
      const char* v = val();
      if (!v) return false;
      o->cpus = std::atoi(v);
    } else if (is("--coll")) {
      const char* v = val();
      o->coll = CollKind::kCount;
      for (CollKind c : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllGather,
                         CollKind::kReduceScatter})
        if (v && strcasecmp(v, collName(c)) == 0) o->coll = c;
      if (o->coll == CollKind::kCount) return false;
    } else if (is("-b") || is("-e") || is("--max-steps")) {
      const char* f = argv[i];
      const char* v = val();
      if (!v) return false;
      char* end = nullptr;
      double x = std::strtod(v, &end);
      if (end && (*end == 'K' || *end == 'k')) x *= 1024;
      if (end && (*end == 'M' || *end == 'm')) x *= 1024 * 1024;
      if (end && (*end == 'G' || *end == 'g')) x *= 1024.0 * 1024 * 1024;
      (std::strcmp(f, "-b") == 0 ? o->minBytes : std::strcmp(f, "-e") == 0 ? o->maxBytes : o->maxSteps) = size_t(x);
    } else if (is("--algo")) {
      const char* v = val();
      if (!v) return false;
      o->algo = v;
    } else if (is("--svg")) {
      o->svg = val();
      if (!o->svg) return false;
    } else if (is("--threads")) o->threads = true;
    else if (is("--csv")) o->csv = true;
    else if (is("--check")) o->check = true;
    else return false;
  }
  return o->minBytes >= 1 && o->minBytes <= o->maxBytes;
}

// The cluster, model and plan of one sn_sim invocation.
struct Run {
  Options o;
  const Preset* p = nullptr;
  sim::Cluster cl;
  tuning::CommShape shape;
  tuning::Tuner tuner;
  ChannelPlan plan;
  std::vector<const AlgorithmDef*> algos;  // registered for the collective, fitting
};

bool makeRun(const Options& o, Run* r) {
  const Preset& p = *o.preset;
  r->o = o;
  r->p = &p;
  sim::Cluster& cl = r->cl;
  cl.nranks = o.nranks > 0 ? o.nranks : p.nranks;
  const int nodes = o.nodes > 0 ? o.nodes : (o.nranks > 0 ? 1 : p.nranks / p.perNode);
  if (cl.nranks < 1 || nodes < 1 || nodes > cl.nranks) return false;
  cl.perNode = (cl.nranks + nodes - 1) / nodes;
  cl.intra = o.threads ? LinkClass::kLocal : LinkClass::kShm;
  cl.params = tuning::hostDefaults();
  if (std::strcmp(p.name, "this-host") != 0) {
    // A GPU's channels are thread blocks running side by side.
    cl.params.of(LinkClass::kShm) = cl.params.of(LinkClass::kLocal) = {p.intraLat, p.intraBw, p.intraChanBw,
                                                                       kMaxChannels};
    cl.params.of(LinkClass::kNet) = {p.netLat, p.netBw, p.netChanBw, kMaxChannels};
    cl.params.channelUs = 0.1;
    cl.params.name = p.name;
  }
  r->shape = tuning::evenShape(cl.nranks, cl.nnodes(), cl.intra);
  if (o.cpus > 0) r->shape.oversub = std::max(1.0, double(cl.perNode) / o.cpus);
  std::vector<std::string> warnings;
  r->tuner = tuning::makeTuner(r->shape, 128 << 10, cl.params, tuning::parseOverrides(o.algo, "", &warnings));
  for (const std::string& w : warnings) std::fprintf(stderr, "sn_sim: %s\n", w.c_str());
  // The tuner applies the oversubscription itself; the simulated ranks get it here.
  cl.params = tuning::effectiveParams(r->shape, cl.params);
  r->plan = sim::clusterPlan(cl);
  for (const AlgorithmDef& a : algorithms())
    if (a.coll == o.coll && (a.maxRanks == 0 || cl.nranks <= a.maxRanks)) r->algos.push_back(&a);
  return true;
}

// The symbolic checker on the cluster's shape, once per algorithm.
int runChecks(const Run& r) {
  int rc = 0;
  for (const AlgorithmDef* a : r.algos) {
    CollArgs args;
    args.coll = r.o.coll;
    args.nranks = r.cl.nranks;
    args.count = r.cl.nranks <= 1024 ? size_t(2 * r.cl.nranks + 3) : 257;
    args.chunkElems = std::max<size_t>(1, args.count / 5);
    CheckStats st;
    CheckOptions co;
    co.stats = &st;
    Status s = checkAlgorithm(*a, args, r.plan, co);
    std::printf("# check %s (count %zu, chunk %zu): %s (%llu steps, %llu messages)\n", a->name, args.count,
                args.chunkElems, s.ok() ? "ok" : s.message().c_str(), (unsigned long long)st.steps,
                (unsigned long long)st.messages);
    if (!s.ok()) rc = 1;
  }
  return rc;
}

struct Point {
  size_t chunk = 0;
  int channels = 1;  // the model's best channel count (the simulation runs one: docs/algorithms.md §6)
  double modelUs = -1, simUs = -1;
  bool failed = false;
};

// One algorithm at one size: the model at its best chunk, then the simulation at that chunk
// when the schedules fit the step budget.
Point measure(const Run& r, const AlgorithmDef& a, size_t bytes) {
  Point pt;
  const size_t count = countOf(r.o.coll, bytes, r.cl.nranks);
  const tuning::AlgoBest best = tuning::bestFor(r.tuner, a.name, r.o.coll, count * 4);
  pt.modelUs = best.us;
  pt.chunk = best.chunkBytes;  // the slot when the model has no formula here
  pt.channels = best.channels;
  CollArgs args;
  args.coll = r.o.coll;
  args.nranks = r.cl.nranks;
  args.count = count;
  args.chunkElems = pt.chunk / 4;
  Result<uint64_t> est = sim::rankSteps(a, args, r.plan);
  if (est.ok() && est.value() * uint64_t(r.cl.nranks) <= r.o.maxSteps) {
    Result<sim::SimResult> res = sim::simulate(a, args, r.cl, r.plan);
    if (res.ok()) {
      pt.simUs = res.value().us;
    } else {
      std::fprintf(stderr, "sn_sim: %s %zu B: %s\n", a.name, bytes, res.status().message().c_str());
      pt.failed = true;
    }
  }
  return pt;
}

// Prints the table (or CSV) of every size and algorithm; fills `series` for the picture.
int sweep(const Run& r, std::vector<sim::Series>* series) {
  int rc = 0;
  const double factor = busFactor(r.o.coll, r.cl.nranks);
  std::vector<size_t> sizes;  // the tables' sizes (8 B, 64 B, then x4 to 1 GiB) within [-b, -e]
  for (size_t b : tuning::tableSizes())
    if (b >= r.o.minBytes && b <= r.o.maxBytes) sizes.push_back(b);
  if (sizes.empty()) sizes.push_back(r.o.minBytes);
  series->assign(r.algos.size(), {});
  for (size_t i = 0; i < r.algos.size(); ++i) (*series)[i].name = r.algos[i]->name;
  for (size_t bytes : sizes) {
    const tuning::Decision pick = tuning::select(r.tuner, r.o.coll, countOf(r.o.coll, bytes, r.cl.nranks) * 4);
    if (!r.o.csv) std::printf("  %10s", tuning::sizeLabel(bytes).c_str());
    for (size_t i = 0; i < r.algos.size(); ++i) {
      const AlgorithmDef& a = *r.algos[i];
      const Point pt = measure(r, a, bytes);
      if (pt.failed) rc = 1;
      const double t = pt.simUs >= 0 ? pt.simUs : pt.modelUs;
      const double bus = t > 0 ? double(bytes) / t / 1e3 * factor : 0;  // nccl-tests: GB/s = 1e3 B/us
      if (pt.simUs > 0) (*series)[i].sim.push_back({double(bytes), bus});
      if (pt.modelUs > 0) (*series)[i].model.push_back({double(bytes), double(bytes) / pt.modelUs / 1e3 * factor});
      if (r.o.csv) {
        std::printf("%s,%d,%d,%zu,%s,%zu,%.3f,%.3f,%.4f,%d,%d\n", collName(r.o.coll), r.cl.nranks, r.cl.nnodes(),
                    bytes, a.name, pt.chunk, pt.modelUs, pt.simUs, bus, pick.algo == &a ? 1 : 0, pt.channels);
      } else {
        char cell[64];
        if (t < 0) std::snprintf(cell, sizeof cell, "-");
        else std::snprintf(cell, sizeof cell, "%.4g%s / %.3g", t, pt.simUs >= 0 ? "" : "*", bus);
        std::printf(" %22s", cell);
      }
    }
    if (!r.o.csv)
      std::printf("  %s%s\n", pick.algo ? pick.algo->name : "-",
                  pick.channels > 1 ? (" x" + std::to_string(pick.channels) + " channels").c_str() : "");
  }
  return rc;
}

int writeSvg(const Run& r, const std::vector<sim::Series>& series) {
  FILE* f = std::fopen(r.o.svg, "w");
  if (!f) return std::fprintf(stderr, "sn_sim: cannot write %s\n", r.o.svg), 1;
  const std::string title = std::string(collName(r.o.coll)) + " busbw, " + r.p->name + " (" +
                            std::to_string(r.cl.nranks) + " ranks, " + std::to_string(r.cl.nnodes()) + " nodes)";
  const std::string svg = sim::busbwSvg(title, series);
  std::fwrite(svg.data(), 1, svg.size(), f);
  return std::fclose(f) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc > 1 && std::strcmp(argv[1], "fabric") == 0) return sim::fabric::fabricMain(argc - 1, argv + 1);
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) return usage(0);
  if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {
    for (const Preset& p : kPresets) std::printf("%-15s %s\n", p.name, p.about);
    return 0;
  }
  Run r;
  if (!parseArgs(argc, argv, &o) || !makeRun(o, &r)) return usage(2);
  std::printf("# sn_sim %s: %s\n# %s; %s float32, sizes as nccl-tests; sim = discrete-event run of every rank's "
              "generated schedule on one channel at the links' full rate (the pick column shows the model's channel "
              "count), * = over --max-steps %llu, model only\n",
              r.p->name, r.p->about, tuning::describeTuner(r.tuner).c_str(), collName(o.coll),
              (unsigned long long)o.maxSteps);
  int rc = o.check ? runChecks(r) : 0;
  if (o.csv) {
    std::printf("coll,nranks,nodes,size,algo,chunk,model_us,sim_us,busbw_GBps,pick,channels\n");
  } else {
    std::printf("# %10s", "size");
    for (const AlgorithmDef* a : r.algos) std::printf(" %22s", (std::string(a->name) + " us / busbw").c_str());
    std::printf("  pick\n");
  }
  std::vector<sim::Series> series;
  rc |= sweep(r, &series);
  if (o.svg) rc |= writeSvg(r, series);
  return rc;
}
