// The slot geometry of a communicator's connections (core/slot_geometry.h): which of
// SNCCL_STEPS/SNCCL_BUFFSIZE, SNCCL_NET_STEPS/SNCCL_NET_BUFFSIZE and the net's own
// defaults (net::SlotDefaults) give each value. Parameters are read once per process, so
// each case runs in a child process with its own environment.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/slot_geometry.h"

namespace snccl {
namespace {

using Env = std::vector<std::pair<const char*, const char*>>;

// In a child: clears the four parameters (and their NCCL names), applies `env`, computes
// the geometry and exits 0 when it reads `want` ("8 x 524288 (describe())", or the error
// message); the parent expects that.
void expectGeometry(const Env& env, bool spansNodes, net::SlotDefaults netDefaults, const std::string& want) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        alarm(30);
        for (params::Id id : {params::Id::Steps, params::Id::BuffSize, params::Id::NetSteps, params::Id::NetBuffSize}) {
          unsetenv(params::def(id).name);
          for (const std::string& alias : params::aliases(params::def(id))) unsetenv(alias.c_str());
        }
        for (const auto& [k, v] : env) setenv(k, v, 1);
        Result<SlotGeometry> g = slotGeometry(spansNodes, netDefaults);
        std::string got = !g.ok() ? g.status().message()
                                  : std::to_string(g.value().nsteps) + " x " + std::to_string(g.value().slotBytes) +
                                        " (" + describe(g.value()) + ")";
        std::fprintf(stderr, "%s\n", got == want ? "CHILD OK" : ("got " + got + ", want " + want).c_str());
        std::_Exit(got == want ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "CHILD OK");
}

const net::SlotDefaults kIb{8, 4u << 20};  // what the IB net asks for

TEST(SlotGeometry, AcrossNodesTheNetsDefaultsStandInForUnsetParameters) {
  expectGeometry({}, true, kIb,
                 "8 x 524288 (SNCCL_NET_STEPS=8, SNCCL_NET_BUFFSIZE=4194304, the net's defaults)");
  // A net without defaults of its own (the socket net): the table's.
  expectGeometry({}, true, {}, "4 x 524288 (SNCCL_NET_STEPS=4, SNCCL_NET_BUFFSIZE=2097152)");
}

TEST(SlotGeometry, WhatTheUserSetWinsOverTheNetsDefaults) {
  expectGeometry({{"SNCCL_NET_STEPS", "4"}}, true, kIb,
                 "4 x 1048576 (SNCCL_NET_STEPS=4, SNCCL_NET_BUFFSIZE=4194304, the net's default size)");
  expectGeometry({{"SNCCL_NET_BUFFSIZE", "1M"}}, true, kIb,
                 "8 x 131072 (SNCCL_NET_STEPS=8, SNCCL_NET_BUFFSIZE=1048576, the net's default steps)");
  // NCCL_BUFFSIZE set and the net name not: the user's value, as NCCL users expect.
  expectGeometry({{"NCCL_BUFFSIZE", "1048576"}}, true, kIb,
                 "8 x 131072 (SNCCL_NET_STEPS=8, SNCCL_BUFFSIZE=1048576, the net's default steps)");
  expectGeometry({{"SNCCL_STEPS", "2"}, {"SNCCL_BUFFSIZE", "65536"}}, true, kIb,
                 "2 x 32768 (SNCCL_STEPS=2, SNCCL_BUFFSIZE=65536)");
}

TEST(SlotGeometry, OneNodeIgnoresTheNet) {
  expectGeometry({}, false, kIb, "8 x 131072 (SNCCL_STEPS=8, SNCCL_BUFFSIZE=1048576)");
}

TEST(SlotGeometry, ANetDefaultOutOfRangeIsRefusedByName) {
  expectGeometry({}, true, {65, 4u << 20}, "SNCCL_NET_STEPS=65 (the net's default) is out of range [2, 64]");
}

}  // namespace
}  // namespace snccl
