// RadixTree (see radix_tree.h). Nodes live in one vector (handles are indices, reused after
// removal); eviction scans it for the least recently used candidate, which is cheap next to a step.
#include "runtime/cache/radix_tree.h"

#include <algorithm>

namespace hyla::runtime {

RadixTree::RadixTree(int64_t page_size) : page_size_(page_size) {
  HYLA_CHECK(page_size >= 1, "RadixTree: page_size ", page_size);
  nodes_.emplace_back();
  nodes_[0].alive = true;
}

CacheNode RadixTree::new_node() {
  CacheNode id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[size_t(id)] = Node{};
  } else {
    id = CacheNode(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[size_t(id)].alive = true;
  return id;
}

PrefixMatch RadixTree::match(std::span<const int32_t> tokens, int64_t limit) {
  limit = std::min<int64_t>(limit, int64_t(tokens.size()));
  PrefixMatch m;
  std::vector<CacheNode> path;
  CacheNode node = 0;
  int64_t depth = 0;
  // Walk whole edges; a partly matched edge still counts for `common`.
  while (depth < int64_t(tokens.size())) {
    const Node& n = nodes_[size_t(node)];
    const auto child = n.children.find(tokens[size_t(depth)]);
    if (child == n.children.end()) break;
    const Node& c = nodes_[size_t(child->second)];
    int64_t same = 0;
    while (same < int64_t(c.tokens.size()) && depth + same < int64_t(tokens.size()) &&
           c.tokens[size_t(same)] == tokens[size_t(depth + same)])
      ++same;
    m.common = depth + same;
    if (same < int64_t(c.tokens.size())) break;
    depth += same;
    node = child->second;
    path.push_back(node);
  }
  // The deepest snapshot at or before `limit`.
  size_t keep = path.size();
  while (keep > 0) {
    const Node& n = nodes_[size_t(path[keep - 1])];
    if (n.snapshot >= 0 && n.depth <= limit) break;
    --keep;
  }
  if (keep == 0) return m;
  path.resize(keep);
  const Node& hit = nodes_[size_t(path.back())];
  m.tokens = hit.depth;
  m.snapshot = hit.snapshot;
  m.node = path.back();
  nodes_[size_t(m.node)].weak = false;  // it proved useful
  ++clock_;
  for (CacheNode p : path) nodes_[size_t(p)].used = clock_;
  // Page j: the page of the path's last position in [j ps, min((j + 1) ps, m)).
  const int64_t num_pages = (m.tokens + page_size_ - 1) / page_size_;
  m.pages.assign(size_t(num_pages), -1);
  for (CacheNode p : path) {
    const Node& n = nodes_[size_t(p)];
    const int64_t begin = n.depth - int64_t(n.tokens.size());
    for (size_t i = 0; i < n.pages.size(); ++i)
      m.pages[size_t((begin + int64_t(i)) / page_size_)] = n.pages[i];
  }
  return m;
}

CacheNode RadixTree::find(std::span<const int32_t> tokens) const {
  CacheNode node = 0;
  size_t depth = 0;
  while (depth < tokens.size()) {
    const Node& n = nodes_[size_t(node)];
    const auto child = n.children.find(tokens[depth]);
    if (child == n.children.end()) return -1;
    const Node& c = nodes_[size_t(child->second)];
    if (depth + c.tokens.size() > tokens.size() ||
        !std::equal(c.tokens.begin(), c.tokens.end(), tokens.begin() + std::ptrdiff_t(depth)))
      return -1;
    depth += c.tokens.size();
    node = child->second;
  }
  return node == 0 ? -1 : node;
}

int32_t RadixTree::snapshot(CacheNode node) const {
  HYLA_CHECK(node > 0 && size_t(node) < nodes_.size() && nodes_[size_t(node)].alive,
             "RadixTree::snapshot: node ", node);
  return nodes_[size_t(node)].snapshot;
}

CacheNode RadixTree::split(CacheNode node, int64_t keep) {
  const CacheNode upper = new_node();
  Node& lower = nodes_[size_t(node)];  // after new_node: nodes_ may have grown
  Node& up = nodes_[size_t(upper)];
  up.parent = lower.parent;
  up.depth = lower.depth - int64_t(lower.tokens.size()) + keep;
  up.tokens.assign(lower.tokens.begin(), lower.tokens.begin() + keep);
  up.pages.assign(lower.pages.begin(), lower.pages.begin() + keep);
  up.used = lower.used;
  lower.tokens.erase(lower.tokens.begin(), lower.tokens.begin() + keep);
  lower.pages.erase(lower.pages.begin(), lower.pages.begin() + keep);
  lower.parent = upper;
  up.children[lower.tokens.front()] = node;
  nodes_[size_t(up.parent)].children[up.tokens.front()] = upper;
  return upper;
}

Result<bool> RadixTree::insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                               int32_t snapshot, std::vector<int32_t>& referenced, bool weak) {
  if (tokens.empty()) return invalid_argument("RadixTree::insert: no tokens");
  const int64_t needed = (int64_t(tokens.size()) + page_size_ - 1) / page_size_;
  if (int64_t(pages.size()) < needed)
    return invalid_argument("RadixTree::insert: ", tokens.size(), " tokens need ", needed,
                            " pages of ", page_size_, ", got ", pages.size());
  if (snapshot < 0) return invalid_argument("RadixTree::insert: snapshot slot ", snapshot);
  if (const CacheNode existing = find(tokens);
      existing >= 0 && nodes_[size_t(existing)].snapshot >= 0)
    return false;
  ++clock_;
  CacheNode node = 0;
  int64_t depth = 0;
  const int64_t n = int64_t(tokens.size());
  while (depth < n) {
    nodes_[size_t(node)].used = clock_;
    const auto child = nodes_[size_t(node)].children.find(tokens[size_t(depth)]);
    if (child == nodes_[size_t(node)].children.end()) {
      // A new leaf for the rest.
      const CacheNode leaf = new_node();
      Node& l = nodes_[size_t(leaf)];
      l.parent = node;
      l.depth = n;
      l.tokens.assign(tokens.begin() + depth, tokens.end());
      for (int64_t p = depth; p < n; ++p) {
        l.pages.push_back(pages[size_t(p / page_size_)]);
        referenced.push_back(l.pages.back());
      }
      l.used = clock_;
      nodes_[size_t(node)].children[l.tokens.front()] = leaf;
      node = leaf;
      depth = n;
      break;
    }
    const CacheNode c = child->second;
    const Node& cn = nodes_[size_t(c)];
    int64_t same = 0;
    while (same < int64_t(cn.tokens.size()) && depth + same < n &&
           cn.tokens[size_t(same)] == tokens[size_t(depth + same)])
      ++same;
    // Leaves the edge midway (diverges, or ends inside it): split there.
    node = same < int64_t(cn.tokens.size()) ? split(c, same) : c;
    depth += same;
  }
  Node& end = nodes_[size_t(node)];
  end.used = clock_;
  end.snapshot = snapshot;
  end.weak = weak;
  return true;
}

void RadixTree::lock(CacheNode node) {
  HYLA_CHECK(node > 0 && size_t(node) < nodes_.size() && nodes_[size_t(node)].alive,
             "RadixTree::lock: node ", node);
  ++nodes_[size_t(node)].locks;
}

void RadixTree::unlock(CacheNode node) {
  HYLA_CHECK(node > 0 && size_t(node) < nodes_.size() && nodes_[size_t(node)].locks > 0,
             "RadixTree::unlock: node ", node, " is not locked");
  --nodes_[size_t(node)].locks;
}

void RadixTree::prune(CacheNode node, std::vector<int32_t>& released) {
  while (node > 0) {
    Node& n = nodes_[size_t(node)];
    if (!n.children.empty() || n.snapshot >= 0 || n.locks > 0) return;
    released.insert(released.end(), n.pages.begin(), n.pages.end());
    const CacheNode parent = n.parent;
    nodes_[size_t(parent)].children.erase(n.tokens.front());
    n = Node{};
    free_nodes_.push_back(node);
    node = parent;
  }
}

void RadixTree::drop_snapshot(CacheNode node, std::vector<int32_t>& slots,
                              std::vector<int32_t>& released) {
  Node& n = nodes_[size_t(node)];
  slots.push_back(n.snapshot);
  n.snapshot = -1;
  prune(node, released);
}

CacheNode RadixTree::least_recent(bool leaf_only, const std::function<bool(int32_t)>& eligible,
                                  bool weak_only) const {
  CacheNode best = -1, best_weak = -1;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.alive || n.snapshot < 0 || n.locks > 0) continue;
    if (leaf_only && !n.children.empty()) continue;
    if (eligible && !eligible(n.snapshot)) continue;
    if (best < 0 || n.used < nodes_[size_t(best)].used) best = CacheNode(i);
    if (n.weak && (best_weak < 0 || n.used < nodes_[size_t(best_weak)].used))
      best_weak = CacheNode(i);
  }
  return weak_only ? best_weak : best;
}

void RadixTree::move_snapshot(CacheNode node, int32_t snapshot) {
  HYLA_CHECK(node > 0 && size_t(node) < nodes_.size() && nodes_[size_t(node)].alive &&
                 nodes_[size_t(node)].snapshot >= 0 && snapshot >= 0,
             "RadixTree::move_snapshot: node ", node, " to ", snapshot);
  nodes_[size_t(node)].snapshot = snapshot;
}

void RadixTree::drop(CacheNode node, std::vector<int32_t>& slots, std::vector<int32_t>& released) {
  HYLA_CHECK(node > 0 && size_t(node) < nodes_.size() && nodes_[size_t(node)].alive &&
                 nodes_[size_t(node)].snapshot >= 0 && nodes_[size_t(node)].locks == 0,
             "RadixTree::drop: node ", node);
  drop_snapshot(node, slots, released);
}

bool RadixTree::evict(bool leaf_only, std::vector<int32_t>& slots, std::vector<int32_t>& released) {
  const CacheNode best = least_recent(leaf_only, nullptr);
  if (best < 0) return false;
  drop_snapshot(best, slots, released);
  return true;
}

void RadixTree::cap_path(CacheNode node, int64_t cap, std::vector<int32_t>& slots,
                         std::vector<int32_t>& released) {
  if (cap <= 0) return;
  for (;;) {
    int64_t count = 0;
    CacheNode oldest = -1, oldest_weak = -1;
    for (CacheNode p = node; p > 0; p = nodes_[size_t(p)].parent) {
      const Node& n = nodes_[size_t(p)];
      if (n.snapshot < 0) continue;
      ++count;
      if (p == node || n.locks > 0) continue;
      if (oldest < 0 || n.used < nodes_[size_t(oldest)].used) oldest = p;
      if (n.weak && (oldest_weak < 0 || n.used < nodes_[size_t(oldest_weak)].used)) oldest_weak = p;
    }
    if (oldest_weak >= 0) oldest = oldest_weak;  // guesses first
    if (count <= cap || oldest < 0) return;
    drop_snapshot(oldest, slots, released);  // an inner node: nothing is pruned
  }
}

void RadixTree::thin_weak(CacheNode node, int64_t cap, std::vector<int32_t>& slots,
                          std::vector<int32_t>& released) {
  if (cap <= 0) return;
  std::vector<CacheNode> weak;  // deepest first
  for (CacheNode p = node; p > 0; p = nodes_[size_t(p)].parent) {
    const Node& n = nodes_[size_t(p)];
    if (n.snapshot >= 0 && n.weak) weak.push_back(p);
  }
  for (size_t i = weak.size(); i > size_t(cap); --i) {
    const CacheNode p = weak[i - 1];
    if (p != node && nodes_[size_t(p)].locks == 0)
      drop_snapshot(p, slots, released);  // an inner node: nothing is pruned
  }
}

RadixTreeStats RadixTree::stats() const {
  RadixTreeStats s;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.alive) continue;
    ++s.nodes;
    s.tokens += int64_t(n.tokens.size());
    s.snapshots += n.snapshot >= 0;
  }
  return s;
}

void RadixTree::references(std::vector<int32_t>& slots, std::vector<int32_t>& pages) const {
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.alive) continue;
    if (n.snapshot >= 0) slots.push_back(n.snapshot);
    pages.insert(pages.end(), n.pages.begin(), n.pages.end());
  }
}

Status RadixTree::check_invariants(bool expect_unlocked) const {
  int64_t reachable = 0;
  std::vector<CacheNode> stack = {0};
  while (!stack.empty()) {
    const CacheNode id = stack.back();
    stack.pop_back();
    const Node& n = nodes_[size_t(id)];
    if (!n.alive) return internal_error("RadixTree: node ", id, " is reachable but free");
    if (id != 0) {
      ++reachable;
      const Node& parent = nodes_[size_t(n.parent)];
      if (n.tokens.empty()) return internal_error("RadixTree: node ", id, " has an empty edge");
      if (n.pages.size() != n.tokens.size())
        return internal_error("RadixTree: node ", id, " lists ", n.pages.size(), " pages for ",
                              n.tokens.size(), " tokens");
      if (n.depth != parent.depth + int64_t(n.tokens.size()))
        return internal_error("RadixTree: node ", id, " at depth ", n.depth, ", its parent at ",
                              parent.depth, " + ", n.tokens.size(), " tokens");
      const auto key = parent.children.find(n.tokens.front());
      if (key == parent.children.end() || key->second != id)
        return internal_error("RadixTree: node ", id, " is not its parent's child under token ",
                              n.tokens.front());
      if (n.children.empty() && n.snapshot < 0 && n.locks == 0)
        return internal_error("RadixTree: leaf ", id, " (depth ", n.depth, ") has no snapshot");
      if (expect_unlocked && n.locks != 0)
        return internal_error("RadixTree: node ", id, " still has ", n.locks, " locks");
      for (size_t i = 0; i < n.pages.size(); ++i)
        if (n.pages[i] < 0)
          return internal_error("RadixTree: node ", id, " lists page ", n.pages[i]);
    }
    for (const auto& [token, child] : n.children) {
      if (child <= 0 || size_t(child) >= nodes_.size() || nodes_[size_t(child)].parent != id)
        return internal_error("RadixTree: node ", id, "'s child ", child, " under token ", token,
                              " does not name it as parent");
      stack.push_back(child);
    }
  }
  int64_t alive = 0;
  for (size_t i = 1; i < nodes_.size(); ++i) alive += nodes_[i].alive;
  if (alive != reachable)
    return internal_error("RadixTree: ", alive, " nodes in use, ", reachable, " reachable");
  return ok_status();
}

}  // namespace hyla::runtime
