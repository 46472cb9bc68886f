// The thread pool behind parallel_for (see parallel.h for the design).
//
// One region at a time. The region's state is a 64-bit claim word: the region's generation in the
// high 32 bits and the number of unclaimed items in the low 32. A worker claims an item with a CAS
// that also checks the generation, so a worker that wakes late, after its region ended, claims
// nothing and touches nothing of the next region. The caller waits for `done == n`: every claimed
// item has finished, so the region's function and context outlive every use.
#include "core/parallel.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cblas.h>  // openblas_set_num_threads, openblas_get_corename

#include "core/error.h"

namespace hyla {

namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

/// How long an idle worker spins before it sleeps. A decode step's regions follow each other
/// within microseconds, so a worker that spins this long stays awake through a whole step; a
/// sleeping worker takes tens of microseconds to wake (more on a VM), which is why workers do not
/// sleep at once. Bounded, so that idle workers give the cores back to other programs.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

using Clock = std::chrono::steady_clock;

int env_threads() {
  for (const char* name : {"HYLA_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n > 0 && n <= 1024) return static_cast<int>(n);
    std::fprintf(stderr, "hyla: %s='%s' is not a thread count in [1, 1024]: ignored\n", name, v);
  }
  return 0;
}

class Pool {
 public:
  Pool() {
    // OpenBLAS's own threads stay off: GEMMs are split into parallel_for tasks instead.
    detail::ensure_blas_single_threaded();
    resize(0);
  }
  ~Pool() { stop_workers(); }

  int threads() const { return threads_; }

  void resize(int n) {
    if (n <= 0) n = env_threads();
    if (n <= 0) n = available_cores();
    n = std::clamp(n, 1, 1024);
    if (n == threads_) return;
    std::lock_guard<std::mutex> lock(region_mutex_);
    stop_workers();
    threads_ = n;
    stop_.store(false, std::memory_order_relaxed);
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void run(int64_t n, void (*fn)(void*, int64_t), void* ctx) {
    // Nested regions, and regions from a second thread while one runs, run inline.
    if (in_region_ || threads_ == 1 || n > int64_t{0x7fffffff}) return run_inline(n, fn, ctx);
    std::unique_lock<std::mutex> lock(region_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return run_inline(n, fn, ctx);
    const Clock::time_point start = Clock::now();
    if (start >= next_census_) take_census(start);
    if (start < alone_until_ || cores_taken_) return run_inline(n, fn, ctx);

    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (claim_.load(std::memory_order_relaxed) >> 32) + 1;
    // seq_cst, as the sleeping_ load after it: a worker going to sleep sees the region, or the
    // caller sees the sleeper and wakes it.
    claim_.store(generation << 32 | static_cast<uint64_t>(n), std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst) > 0) claim_.notify_all();

    in_region_ = true;
    int64_t mine = 0;
    for (int64_t i; (i = claim(generation)) >= 0; ++mine) fn(ctx, i);
    if (mine < n) {
      // Items still running on workers: short, so spin; yield now and then in case one of them
      // waits for this core.
      const Clock::time_point own_done = Clock::now();
      for (int spins = 0; done_.load(std::memory_order_acquire) + mine < n; ++spins) {
        if ((spins & 255) == 255) {
          std::this_thread::yield();
        } else {
          cpu_relax();
        }
      }
      note_wait(start, own_done, Clock::now());
    }
    in_region_ = false;
  }

 private:
  /// A region whose caller, done with its own items, then waited for a worker's item longer than
  /// it had worked itself (and more than kStragglerWait) had a worker the OS took off its core.
  /// The next regions run on the caller alone for a while: one thread on a core of its own beats
  /// two that wait for each other. The time alone starts at kAloneFirst (a quiet VM sees such a
  /// wait every ~100 ms from the hypervisor) and doubles, up to kAloneMost, while stragglers
  /// come back within kSoonAgain of each try (another program keeps a core busy).
  void note_wait(Clock::time_point start, Clock::time_point own_done, Clock::time_point end) {
    const auto waited = end - own_done;
    if (waited <= kStragglerWait || waited <= own_done - start) return;
    const bool soon_again = end - alone_until_ < kSoonAgain;
    alone_for_ = soon_again ? std::min<Clock::duration>(alone_for_ * 2, kAloneMost) : kAloneFirst;
    alone_until_ = end + alone_for_;
  }

  /// Every kCensusEvery: are other programs' threads running, so that this pool's threads would
  /// share cores with them? Then regions run on the caller alone (the workers go to sleep, and
  /// the caller gets a core of its own) until a census finds the cores free again. The count is
  /// the kernel's number of running threads (/proc/loadavg), less this pool's own: the caller,
  /// and the workers, which spin between regions unless the pool runs alone.
  void take_census(Clock::time_point now) {
    next_census_ = now + kCensusEvery;
    const int running = running_threads();
    if (running < 0) return;
    const int ours = cores_taken_ || now < alone_until_ ? 1 : threads_;
    const int others = std::max(0, running - ours);
    cores_taken_ = others > 0 && others + threads_ > available_cores();
  }

  /// Threads running or runnable now, machine-wide (/proc/loadavg's fourth field, "running/total");
  /// -1 when it cannot be read.
  static int running_threads() {
    const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char text[128];
    const ssize_t got = ::read(fd, text, sizeof(text) - 1);
    ::close(fd);
    if (got <= 0) return -1;
    text[got] = '\0';
    const char* p = text;
    for (int field = 0; field < 3; ++field) {  // skip the three load averages
      while (*p != '\0' && *p != ' ') ++p;
      while (*p == ' ') ++p;
    }
    char* end = nullptr;
    const long running = std::strtol(p, &end, 10);
    return end != p && *end == '/' ? static_cast<int>(running) : -1;
  }

  static void run_inline(int64_t n, void (*fn)(void*, int64_t), void* ctx) {
    for (int64_t i = 0; i < n; ++i) fn(ctx, i);
  }

  /// Claims an item of region `generation`; -1 when none is left or the region is over. The word
  /// counts the items left, so a claim needs nothing but the word: a late worker holding an
  /// exhausted word can never succeed, whatever the next region has written meanwhile. n_ is read
  /// only after a successful claim, when the region cannot end before the item is done.
  int64_t claim(uint64_t generation) {
    uint64_t word = claim_.load(std::memory_order_acquire);
    while (true) {
      if ((word >> 32) != generation) return -1;
      const int64_t left = static_cast<int64_t>(word & 0xffffffffu);
      if (left == 0) return -1;
      if (claim_.compare_exchange_weak(word, word - 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
        return n_ - left;
    }
  }

  void worker_loop() {
    detail::ensure_blas_single_threaded();
    in_region_ = true;  // a worker's own parallel_for calls run inline
    uint64_t seen = claim_.load(std::memory_order_acquire) >> 32;
    while (true) {
      // wait for a new region: spin, then sleep
      uint64_t word = claim_.load(std::memory_order_acquire);
      const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
      for (int spins = 0; (word >> 32) == seen && !stop_.load(std::memory_order_relaxed); ++spins) {
        if ((spins & 63) == 63 && std::chrono::steady_clock::now() > spin_until) {
          sleeping_.fetch_add(1, std::memory_order_seq_cst);
          // re-read after announcing the sleep: a region published in between is not missed
          word = claim_.load(std::memory_order_seq_cst);
          if ((word >> 32) == seen && !stop_.load(std::memory_order_seq_cst)) claim_.wait(word);
          sleeping_.fetch_sub(1, std::memory_order_relaxed);
        } else {
          cpu_relax();
        }
        word = claim_.load(std::memory_order_acquire);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = word >> 32;
      int64_t finished = 0;
      void (*fn)(void*, int64_t) = nullptr;
      void* ctx = nullptr;
      for (int64_t i; (i = claim(seen)) >= 0; ++finished) {
        if (fn == nullptr) {
          // Read only after a successful claim: the region cannot end before this item is done,
          // and its fields were written before its claim word was published.
          fn = fn_;
          ctx = ctx_;
        }
        fn(ctx, i);
      }
      if (finished > 0) done_.fetch_add(finished, std::memory_order_acq_rel);
    }
  }

  void stop_workers() {
    stop_.store(true, std::memory_order_seq_cst);
    // a new generation with no items: wakes sleepers, whose claims then fail
    claim_.store(((claim_.load(std::memory_order_relaxed) >> 32) + 1) << 32,
                 std::memory_order_seq_cst);
    claim_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  static constexpr std::chrono::microseconds kStragglerWait{200};
  static constexpr std::chrono::milliseconds kAloneFirst{2};
  static constexpr std::chrono::milliseconds kAloneMost{320};
  static constexpr std::chrono::milliseconds kSoonAgain{20};
  static constexpr std::chrono::milliseconds kCensusEvery{50};

  int threads_ = 0;
  std::vector<std::thread> workers_;
  // straggler backoff (note_wait); touched only under region_mutex_
  Clock::time_point alone_until_{};
  // census of the cores (take_census); touched only under region_mutex_
  Clock::time_point next_census_{};
  bool cores_taken_ = false;
  Clock::duration alone_for_ = kAloneFirst;
  std::mutex region_mutex_;
  std::atomic<uint64_t> claim_{0};
  int64_t n_ = 0;
  std::atomic<int64_t> done_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  void (*fn_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  static thread_local bool in_region_;
};

thread_local bool Pool::in_region_ = false;

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int num_threads() { return pool().threads(); }

void set_num_threads(int n) { pool().resize(n); }

std::string threading_summary() {
  const char* core = openblas_get_corename();
  const char* replaced = std::getenv("HYLA_BLAS_REPLACED");
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return str_cat(num_threads(), " threads (", available_cores(),
                 " cores available; idle workers spin ", kSpinBeforeSleep.count(),
                 " us, then sleep); OpenBLAS kernels: ", core != nullptr ? core : "unknown",
                 replaced != nullptr   ? str_cat(" (chosen from CPUID instead of ", replaced, ")")
                 : coretype != nullptr ? str_cat(" (OPENBLAS_CORETYPE=", coretype, " as set)")
                                       : "",
                 ", single-threaded inside tasks");
}

namespace detail {
void set_blas_single_threaded() {
  openblas_set_num_threads(1);  // OpenMP build: also omp_set_num_threads(1) for this thread
  blas_single_threaded = true;
}

void run_parallel(int64_t n, void (*fn)(void*, int64_t), void* ctx) { pool().run(n, fn, ctx); }
}  // namespace detail

}  // namespace hyla
