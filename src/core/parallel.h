// Threading: OpenMP under one function, so kernels say what is parallel, not how.
#pragma once

#include <cstdint>

namespace hyla {

/// Number of worker threads parallel_for uses.
int num_threads();
/// Sets the worker count (0 = OpenMP's default, usually the core count).
void set_num_threads(int n);

/// Runs body(i) for i in [0, n) across the worker threads; iterations must be independent.
/// Dynamic scheduling: iterations may differ a lot in cost (varlen sequences).
template <typename Body>
void parallel_for(int64_t n, Body&& body) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace hyla
