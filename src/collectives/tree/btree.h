// Binary tree shapes shared by the tree/ generators: NCCL's btree over ranks 0..n-1 and
// the double binary tree built from it (ncclGetBtree / ncclGetDtree in NCCL).
//
// Cross-rank invariant: every rank computes the same shape from (n, tree) alone, so a
// rank's parent always lists it as a child and vice versa; generators rely on this to
// pair every send with the matching receive.
#pragma once

namespace snccl::sched {

struct TreeNode {
  int parent = -1;       // -1 at the root
  int children[2] = {-1, -1};
  int nchildren = 0;     // children[0 .. nchildren-1] are valid
  int depth = 0;         // 0 at the root
};

// Rank `rank` in NCCL's btree of n ranks: rank 0 is the root (with one child); a rank
// whose lowest set bit is b sits at level b, so every rank is a leaf or an inner node of
// a balanced tree of depth at most treeMaxDepth(n).
TreeNode btreeNode(int n, int rank);

// Tree 0 or 1 of the double binary tree: tree 0 is the btree, tree 1 is its mirror image
// (rank -> n-1-rank) for even n and the btree shifted by one rank for odd n, so that most
// inner nodes of one tree are leaves of the other and both trees share the load.
TreeNode dtreeNode(int n, int rank, int tree);

// An upper bound of every node's depth in the trees above: ceil(log2(n)), 0 for n = 1.
// Generators use it as the common time origin of their pipelines.
int treeMaxDepth(int n);

}  // namespace snccl::sched
