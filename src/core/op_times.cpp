// OpTimes / OpScope (see op_times.h); the CUDA events live in op_times.cu in CUDA builds.
#include "core/op_times.h"

namespace hyla {

#if HYLA_WITH_CUDA
// Defined in op_times.cu.
void* op_event_create();
void op_event_destroy(void* event);
void op_event_record(void* event, Stream stream);
double op_event_seconds(void* start, void* stop);  // waits for stop
#else
static void* op_event_create() { return nullptr; }
static void op_event_destroy(void*) {}
static void op_event_record(void*, Stream) {}
static double op_event_seconds(void*, void*) { return 0.0; }
#endif

namespace {
thread_local OpTimes* g_active = nullptr;
thread_local int g_depth = 0;  // open OpScopes on this thread
}  // namespace

bool op_times_active() { return g_active != nullptr; }

OpTimes::~OpTimes() {
  for (void* e : events_) op_event_destroy(e);
}

OpTimes::Activate::Activate(OpTimes* times) : previous_(g_active) { g_active = times; }
OpTimes::Activate::~Activate() { g_active = previous_; }

void OpTimes::collect() {
  for (const Pending& p : pending_) {
    Entry& e = entries_[p.op];
    e.seconds += op_event_seconds(events_[size_t(p.event)], events_[size_t(p.event) + 1]);
    ++e.calls;
  }
  pending_.clear();
  used_events_ = 0;
}

void OpTimes::add(const OpTimes& other) {
  for (const auto& [op, e] : other.entries_) {
    entries_[op].seconds += e.seconds;
    entries_[op].calls += e.calls;
  }
}

OpScope::OpScope(const char* op, Device device, Stream stream) {
  if (g_depth++ > 0 || g_active == nullptr) return;
  times_ = g_active;
  op_ = op;
  stream_ = stream;
  if (device.is_cuda()) {
    OpTimes& t = *times_;
    while (t.used_events_ + 2 > int(t.events_.size())) t.events_.push_back(op_event_create());
    event_ = t.used_events_;
    t.used_events_ += 2;
    op_event_record(t.events_[size_t(event_)], stream_);
  } else {
    start_ = std::chrono::steady_clock::now();
  }
}

OpScope::~OpScope() {
  --g_depth;
  if (times_ == nullptr) return;
  if (event_ >= 0) {
    op_event_record(times_->events_[size_t(event_) + 1], stream_);
    times_->pending_.push_back({op_, event_});
  } else {
    OpTimes::Entry& e = times_->entries_[op_];
    e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    ++e.calls;
  }
}

}  // namespace hyla
