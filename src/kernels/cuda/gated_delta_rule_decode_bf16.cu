// The block kernel (gated_delta_rule_decode_block.cuh) instantiated for bf16 state pools, in a
// translation unit of its own so that it compiles beside the f32 one (gated_delta_rule_decode.cu).
#include <cstdint>

#include "kernels/cuda/gated_delta_rule_decode_block.cuh"

namespace hyla::kernels::cuda::decode_detail {

Status launch_bf16_pool(const StepArgs& args, bool kda, int d_k, int B, DecodeTiling tiling,
                        cudaStream_t stream) {
  return kda ? launch_head_dim<uint16_t, true>(args, d_k, B, tiling, stream)
             : launch_head_dim<uint16_t, false>(args, d_k, B, tiling, stream);
}

}  // namespace hyla::kernels::cuda::decode_detail
