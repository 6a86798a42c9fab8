// What builds a backend: the [train] keys that choose it and its numerics, as enumerations
// (parsed once, at load: lib/config), and the environment variables that override the CUDA
// numerics keys for one run without editing its config.
#pragma once

#include "lib/util/enum_names.h"

namespace flexsp {

// train.backend: cuda where built and a device is present (auto), or as named.
enum class BackendKind { automatic, cpu, cuda };
template <>
struct EnumNames<BackendKind> {
  static constexpr std::array all{std::pair{BackendKind::automatic, "auto"},
                                  std::pair{BackendKind::cpu, "cpu"},
                                  std::pair{BackendKind::cuda, "cuda"}};
};

// train.precision: of activations and the weights the ops read (auto: bf16 on cuda, fp32
// on cpu).
enum class Precision { automatic, fp32, bf16 };
template <>
struct EnumNames<Precision> {
  static constexpr std::array all{std::pair{Precision::automatic, "auto"},
                                  std::pair{Precision::fp32, "fp32"},
                                  std::pair{Precision::bf16, "bf16"}};
};

// train.cuda_attention: the attention kernels of the CUDA backend.
enum class CudaAttention { automatic, cudnn, tc, simple };
template <>
struct EnumNames<CudaAttention> {
  static constexpr std::array all{std::pair{CudaAttention::automatic, "auto"},
                                  std::pair{CudaAttention::cudnn, "cudnn"},
                                  std::pair{CudaAttention::tc, "tc"},
                                  std::pair{CudaAttention::simple, "simple"}};
};

// train.cuda_gemm: the activation GEMMs of the CUDA backend, cublasGemmEx or cuBLASLt
// (auto: cublasGemmEx, until cuBLASLt is measured faster on a GPU).
enum class CudaGemm { automatic, cublas, lt };
template <>
struct EnumNames<CudaGemm> {
  static constexpr std::array all{std::pair{CudaGemm::automatic, "auto"},
                                  std::pair{CudaGemm::cublas, "cublas"},
                                  std::pair{CudaGemm::lt, "lt"}};
};

struct BackendOptions {
  BackendKind kind = BackendKind::automatic;
  Precision precision = Precision::automatic;
  bool tf32 = false;  // TF32 tensor cores in fp32 GEMMs (cuda)
  CudaAttention cuda_attention = CudaAttention::automatic;
  CudaGemm cuda_gemm = CudaGemm::automatic;
};

// o with the environment's overrides of the CUDA numerics: FLEXSP_CUDA_TF32 (0 or 1, false
// or true) for tf32, FLEXSP_CUDA_ATTENTION (auto, cudnn, tc, simple) for cuda_attention and
// FLEXSP_CUDA_GEMM (cublas, lt) for cuda_gemm. Throws Error naming the variable for a value
// it does not take. The result is what runs, and what checkpoints and reports record.
BackendOptions with_env_overrides(BackendOptions o);

}  // namespace flexsp
