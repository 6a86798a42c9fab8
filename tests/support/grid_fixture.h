// A GoogleTest fixture for MPI tests: the world's grid (no emulated nodes) and its host
// communicators, made before each test and released after it (collective).
#pragma once

#include <gtest/gtest.h>

#include "lib/comm/groups.h"
#include "lib/grid/grid.h"

namespace flexsp::testing {

struct GridFixture : ::testing::Test {
  void SetUp() override {
    grid = grid_create(MPI_COMM_WORLD, 0);
    groups = groups_create(grid);
  }
  void TearDown() override {
    groups = Groups{};
    grid_destroy(grid);
  }
  Grid grid;
  Groups groups;
};

}  // namespace flexsp::testing
