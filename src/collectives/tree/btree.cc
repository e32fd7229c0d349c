// NCCL's btree and double binary tree (see btree.h). Pure functions of (n, rank, tree).
#include "collectives/tree/btree.h"

namespace snccl::sched {

namespace {

void btreeLinks(int n, int rank, int* up, int* d0, int* d1) {
  int bit = 1;
  for (; bit < n; bit <<= 1) {
    if (bit & rank) break;
  }
  if (rank == 0) {
    *up = -1;
    *d0 = -1;
    *d1 = n > 1 ? bit >> 1 : -1;  // the root's only child: the highest power of two below n
    return;
  }
  int u = (rank ^ bit) | (bit << 1);
  if (u >= n) u = rank ^ bit;
  *up = u;
  int lowbit = bit >> 1;
  *d0 = lowbit == 0 ? -1 : rank - lowbit;
  int down1 = lowbit == 0 ? -1 : rank + lowbit;
  while (down1 >= n) {  // the right subtree is cut by n: take the largest one that fits
    lowbit >>= 1;
    down1 = lowbit == 0 ? -1 : rank + lowbit;
  }
  *d1 = down1;
}

// Each step up at least doubles the lowest set bit, so this is O(log n).
int btreeDepth(int n, int rank) {
  int depth = 0;
  int up = 0, d0 = 0, d1 = 0;
  for (btreeLinks(n, rank, &up, &d0, &d1); up != -1; btreeLinks(n, up, &up, &d0, &d1)) ++depth;
  return depth;
}

}  // namespace

TreeNode btreeNode(int n, int rank) {
  TreeNode t;
  int d0 = -1, d1 = -1;
  btreeLinks(n, rank, &t.parent, &d0, &d1);
  if (d0 >= 0) t.children[t.nchildren++] = d0;
  if (d1 >= 0) t.children[t.nchildren++] = d1;
  t.depth = btreeDepth(n, rank);
  return t;
}

TreeNode dtreeNode(int n, int rank, int tree) {
  if (tree == 0) return btreeNode(n, rank);
  // Relabel: tree 1 is the btree seen through a bijection of the ranks.
  const bool shift = n % 2 == 1;
  const int virt = shift ? (rank - 1 + n) % n : n - 1 - rank;
  TreeNode t = btreeNode(n, virt);
  auto real = [&](int v) { return v < 0 ? -1 : shift ? (v + 1) % n : n - 1 - v; };
  t.parent = real(t.parent);
  for (int i = 0; i < t.nchildren; ++i) t.children[i] = real(t.children[i]);
  return t;
}

int treeMaxDepth(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

}  // namespace snccl::sched
