// sn_sim's fabric model (tools/fabric_model.h): cases whose answer is known by hand, and
// the orderings the model exists to show (spraying fills a non-blocking fabric; more paths
// per connection help ECMP; a ring is as slow as its worst hop).
#include <gtest/gtest.h>

#include "fabric_model.h"

namespace {

using namespace snccl::sim::fabric;

double util(const FabricSpec& fs, RunSpec rs) {
  auto r = run(fs, rs);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value().utilisation : -1;
}

// Two nodes of two NICs on a fat tree of radix 4: each node alone on a leaf, two spines.
// The ring's two channels send two flows up each leaf: on one spine they share its links
// (half each), on two they do not. Spraying splits every flow over both spines: no loss.
TEST(FabricModel, TwoLeavesByHand) {
  FabricSpec fs{Topology::kFatTree, 2, 2, 4};
  int half = 0, full = 0;
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    RunSpec rs{Pattern::kRing, Routing::kEcmp, 1, false, seed, 1};
    const double u = util(fs, rs);
    if (std::abs(u - 0.5) < 1e-9) ++half;
    if (std::abs(u - 1.0) < 1e-9) ++full;
  }
  EXPECT_EQ(half + full, 64) << "a ring runs at full or half rate, nothing else";
  EXPECT_GT(half, 0);
  EXPECT_GT(full, 0);
  EXPECT_NEAR(util(fs, {Pattern::kRing, Routing::kAdaptive, 1, false, 1, 1}), 1.0, 1e-9);
}

// Rail-optimised, packed, a rail's nodes on one leaf: the hierarchical rings and the
// rail-aligned AllToAll never leave a leaf, so hashing cannot hurt them; the flat ring
// crosses rails and so spines.
TEST(FabricModel, RailAlignedTrafficStaysInItsLeaf) {
  FabricSpec fs{Topology::kRailOptimized, 32, 8, 64};
  for (Pattern p : {Pattern::kHier, Pattern::kAllToAll}) {
    auto r = run(fs, {p, Routing::kEcmp, 1, false, 3, 8});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.value().crossLeaf, 0) << patternName(p);
    EXPECT_NEAR(r.value().utilisation, 1.0, 1e-9) << patternName(p);
  }
  auto ring = run(fs, {Pattern::kRing, Routing::kEcmp, 1, false, 3, 8});
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring.value().crossLeaf, ring.value().connections);
}

// A non-blocking leaf-spine fabric carries any permutation at full rate when flows are
// sprayed over every spine, whatever the placement.
TEST(FabricModel, SprayingFillsANonBlockingFabric) {
  for (Topology t : {Topology::kRailOptimized, Topology::kFatTree})
    for (Pattern p : {Pattern::kRing, Pattern::kHier, Pattern::kAllToAll}) {
      FabricSpec fs{t, 96, 4, 16};
      EXPECT_NEAR(util(fs, {p, Routing::kAdaptive, 1, true, 5, 6}), 1.0, 1e-6)
          << topologyName(t) << " " << patternName(p);
    }
}

// Under ECMP with a scattered job, collisions cost: a ring pays for its worst hop, the
// AllToAll for its collisions on average; more paths per connection help, monotonically
// on the mean over seeds; the AllToAll's duration is never better than its throughput.
TEST(FabricModel, MorePathsHelpEcmp) {
  FabricSpec fs{Topology::kRailOptimized, 128, 4, 32};
  for (Pattern p : {Pattern::kRing, Pattern::kHier, Pattern::kAllToAll}) {
    double prev = 0;
    for (int sub : {1, 2, 4, 16}) {
      double sum = 0;
      for (uint64_t seed = 1; seed <= 4; ++seed) sum += util(fs, {p, Routing::kEcmp, sub, true, seed, 6});
      const double mean = sum / 4;
      EXPECT_GT(mean, prev) << patternName(p) << ", " << sub << " subflows";
      EXPECT_LT(mean, 1.0 + 1e-9) << patternName(p);
      if (sub == 1) {
        EXPECT_LT(mean, p == Pattern::kAllToAll ? 0.8 : 0.5) << patternName(p);
      }
      prev = mean;
    }
  }
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    RunSpec rs{Pattern::kAllToAll, Routing::kEcmp, 1, true, seed, 4};
    const double throughput = util(fs, rs);
    rs.completion = true;
    EXPECT_LE(util(fs, rs), throughput + 1e-9) << "seed " << seed;
  }
}

TEST(FabricModel, BadSpecsAreRefused) {
  EXPECT_FALSE(run({Topology::kFatTree, 1, 8, 64}, {}).ok());
  EXPECT_FALSE(run({Topology::kFatTree, 8, 8, 63}, {}).ok());
  EXPECT_FALSE(run({Topology::kFatTree, 8, 0, 64}, {}).ok());
  EXPECT_FALSE(run({Topology::kFatTree, 1 << 14, 8, 64}, {}).ok());
  RunSpec rs;
  rs.subflows = 0;
  EXPECT_FALSE(run({Topology::kFatTree, 8, 8, 64}, rs).ok());
  rs.subflows = 1;
  rs.phases = 0;
  EXPECT_FALSE(run({Topology::kFatTree, 8, 8, 64}, rs).ok());
}

}  // namespace
