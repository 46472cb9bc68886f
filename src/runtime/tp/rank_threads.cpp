#include "runtime/tp/rank_threads.h"

namespace hyla::runtime {

RankThreads::RankThreads(int ranks) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { serve(r); });
}

RankThreads::~RankThreads() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int rank)>& body) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    busy_ = int(threads_.size());
    ++round_;
  }
  start_.notify_all();
  body(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return busy_ == 0; });
  body_ = nullptr;
}

void RankThreads::serve(int rank) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return stopping_ || round_ != seen; });
    if (stopping_) return;
    seen = round_;
    const std::function<void(int)>& body = *body_;
    lock.unlock();
    body(rank);
    lock.lock();
    if (--busy_ == 0) done_.notify_one();
  }
}

}  // namespace hyla::runtime
