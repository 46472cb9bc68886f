#include "runtime/tp/local_group.h"

#include <cstring>

#include "core/op_times.h"

namespace hyla::runtime {

class LocalGroup::Member final : public model::AllReduce {
 public:
  Member(LocalGroup* group, int rank) : group_(group), rank_(rank) {}

  Status sum(const TensorView& x) override {
    const OpScope scope("all_reduce", x.device(), Stream{});
    LocalGroup& g = *group_;
    const int n = g.ranks();
    if (dropped_) return aborted();
    if (g.aborted_.load()) return drop();
    if (!x.device().is_cpu() || x.dtype() != DType::kF32 || !x.is_contiguous()) {
      g.abort();
      (void)drop();
      return invalid_argument("LocalGroup rank ", rank_, ": all-reduce of a ",
                              device_name(x.device()), " ", dtype_name(x.dtype()),
                              x.is_contiguous() ? "" : " strided",
                              " tensor; the CPU group adds contiguous f32 host tensors");
    }
    const int64_t numel = x.numel();
    g.inputs_[size_t(rank_)] = static_cast<const float*>(x.raw());
    g.numels_[size_t(rank_)] = numel;
    if (rank_ == 0) g.total_.resize(size_t(numel));  // nobody reads it until the barrier
    g.barrier_.arrive_and_wait();                    // every rank's x is posted
    if (g.aborted_.load()) return drop();
    for (int r = 0; r < n; ++r)
      if (g.numels_[size_t(r)] != numel) {  // every rank sees the same mismatch and leaves
        g.aborted_.store(true);
        (void)drop();
        return invalid_argument("LocalGroup rank ", rank_, ": all-reduce of ", numel,
                                " elements while rank ", r, " reduces ", g.numels_[size_t(r)]);
      }
    // This rank adds up its slice of the elements, every rank's x in rank order.
    const int64_t begin = numel * rank_ / n, end = numel * (rank_ + 1) / n;
    float* total = g.total_.data();
    for (int64_t i = begin; i < end; ++i) total[i] = g.inputs_[0][i];
    for (int r = 1; r < n; ++r) {
      const float* in = g.inputs_[size_t(r)];
      for (int64_t i = begin; i < end; ++i) total[i] += in[i];
    }
    g.barrier_.arrive_and_wait();  // the sum is complete; every input has been read
    if (g.aborted_.load()) return drop();
    std::memcpy(x.raw(), total, size_t(numel) * sizeof(float));
    g.barrier_.arrive_and_wait();  // every rank has its copy: the next sum may reuse the buffers
    return ok_status();
  }
  /// Leaves the barrier for good (the others then stop waiting for this rank).
  Status drop() {
    if (!dropped_) {
      dropped_ = true;
      group_->barrier_.arrive_and_drop();
    }
    return aborted();
  }

 private:
  Status aborted() const {
    return internal_error("LocalGroup rank ", rank_,
                          ": the group was aborted (another rank failed or left)");
  }

  LocalGroup* group_;
  int rank_;
  bool dropped_ = false;
};

Result<std::unique_ptr<LocalGroup>> LocalGroup::create(int ranks) {
  if (ranks < 1) return invalid_argument("LocalGroup: ", ranks, " ranks, expected at least 1");
  return std::unique_ptr<LocalGroup>(new LocalGroup(ranks));
}

LocalGroup::LocalGroup(int ranks)
    : barrier_(ranks), inputs_(size_t(ranks)), numels_(size_t(ranks), -1) {
  for (int r = 0; r < ranks; ++r) members_.push_back(std::make_unique<Member>(this, r));
}

LocalGroup::~LocalGroup() = default;

model::AllReduce& LocalGroup::rank(int r) { return *members_[size_t(r)]; }

void LocalGroup::abort() { aborted_.store(true); }

void LocalGroup::fail(int r) {
  abort();
  leave(r);
}

void LocalGroup::leave(int r) {
  if (r >= 0 && r < ranks()) (void)members_[size_t(r)]->drop();
}

RankGroupFactory local_group_factory() {
  return [](const std::vector<Device>& devices) -> Result<std::unique_ptr<RankGroup>> {
    for (size_t r = 0; r < devices.size(); ++r)
      if (!devices[r].is_cpu())
        return invalid_argument("tensor-parallel rank ", r, " is on ", device_name(devices[r]),
                                ", but the CPU group (LocalGroup) adds host tensors only: ranks "
                                "on CUDA devices need a device communicator "
                                "(runtime/tp/nccl_group)");
    HYLA_ASSIGN_OR_RETURN(std::unique_ptr<LocalGroup> group,
                          LocalGroup::create(int(devices.size())));
    return std::unique_ptr<RankGroup>(std::move(group));
  };
}

}  // namespace hyla::runtime
