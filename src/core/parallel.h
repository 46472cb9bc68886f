// Threading: one pool behind parallel_for, so kernels say what is parallel, not how.
//
// Built for many small parallel regions (a decode step runs about a hundred) on machines that
// also run other programs:
// - the calling thread works too, and a region ends when its items are done, not when every
//   worker has arrived: a worker that the OS has descheduled (a busy core) delays nothing unless
//   it holds an item;
// - workers spin briefly between regions (a decode step's regions come every few microseconds),
//   then sleep, so idle workers leave the cores to others;
// - n <= 1 runs inline, and the pool never starts more workers than there are cores this process
//   may run on (sched_getaffinity);
// - when the cores are not free (a worker was descheduled mid-region, or other programs' threads
//   are running), regions run on the caller alone for a while (parallel.cpp: note_wait,
//   take_census).
// OpenBLAS runs single-threaded (set when the pool starts): GEMMs are split into tasks here.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace hyla {

/// Number of threads parallel_for uses (the caller included).
int num_threads();
/// Sets the thread count; 0 = the default (HYLA_NUM_THREADS or OMP_NUM_THREADS if set, else the
/// cores this process may run on). Not to be called from inside parallel_for.
void set_num_threads(int n);
/// Cores this process may run on (its affinity mask).
int available_cores();
/// One line for --verbose output: threads, how they wait, and the BLAS library's kernels.
std::string threading_summary();

namespace detail {
/// Runs fn(ctx, i) for i in [0, n) on the pool; n >= 2.
void run_parallel(int64_t n, void (*fn)(void* ctx, int64_t i), void* ctx);

/// OpenBLAS's OpenMP build decides per call from omp_get_max_threads(), a per-thread setting:
/// every thread that reaches a BLAS call sets it to one first, or OpenBLAS would start its own
/// threads from inside a task (and two such calls at once share its thread buffers).
void set_blas_single_threaded();
inline thread_local bool blas_single_threaded = false;
inline void ensure_blas_single_threaded() {
  if (!blas_single_threaded) set_blas_single_threaded();
}
}  // namespace detail

/// Runs body(i) for i in [0, n) across the threads; iterations must be independent. Items are
/// handed out one at a time (dynamic): they may differ a lot in cost (varlen sequences). Each item
/// should be worth several microseconds of work; group smaller ones into blocks.
template <typename Body>
void parallel_for(int64_t n, Body&& body) {
  if (n <= 0) return;
  detail::ensure_blas_single_threaded();
  if (n == 1 || num_threads() == 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  using B = std::remove_reference_t<Body>;
  detail::run_parallel(
      n, [](void* ctx, int64_t i) { (*static_cast<B*>(ctx))(i); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace hyla
