// The CUDA libraries, loaded lazily with dlopen: the driver API (libcuda.so.1), NVRTC and
// cuBLAS. Nothing links against CUDA at build time — only the toolkit's headers are used, for
// the function types — so tensord starts on machines without a driver, a GPU or the CUDA
// libraries; the backend then lists no cuda devices and says why.
//
// Where the libraries are looked for, in order (the first that loads wins):
//   1. each folder of TENSORD_CUDA_LIB_DIR (a colon-separated list);
//   2. the plain soname (libnvrtc.so.13 ...): LD_LIBRARY_PATH, the executable's RUNPATH,
//      ldconfig's cache (/etc/ld.so.conf.d, where the NVIDIA driver and CUDA install themselves);
//   3. the lib folders of PyTorch's NVIDIA wheels (site-packages/nvidia/*/lib, also
//      nvidia/cu13/lib) under the usual Python prefixes, $VIRTUAL_ENV and $CONDA_PREFIX;
//   4. /usr/local/cuda/lib64 and the toolkit's lib folder found when tensord was configured.
// libcuda.so.1 comes with the driver (ldconfig finds it); the same order applies (a folder in
// TENSORD_CUDA_LIB_DIR can hold a forward-compatibility libcuda).
// Several major versions are tried for NVRTC and cuBLAS (13, then 12); cuDNN is major 9.
#pragma once

#include <cuda.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <nvrtc.h>
#if TENSORD_HAVE_CUDNN_H
#include <cudnn.h>
#endif

#include <string>
#include <vector>

namespace tensord::cuda {

// Expands a name first (cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on), then quotes it:
// the symbol the table looks up is the one the header's declaration really names.
#define TENSORD_CUDA_STR2(x) #x
#define TENSORD_CUDA_STR(x) TENSORD_CUDA_STR2(x)

#define TENSORD_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                              \
  X(cuDriverGetVersion)                  \
  X(cuGetErrorName)                      \
  X(cuGetErrorString)                    \
  X(cuDeviceGetCount)                    \
  X(cuDeviceGet)                         \
  X(cuDeviceGetName)                     \
  X(cuDeviceTotalMem)                    \
  X(cuDeviceGetAttribute)                \
  X(cuDeviceCanAccessPeer)               \
  X(cuDevicePrimaryCtxRetain)            \
  X(cuDevicePrimaryCtxRelease)           \
  X(cuCtxSetCurrent)                     \
  X(cuCtxEnablePeerAccess)               \
  X(cuStreamCreate)                      \
  X(cuStreamDestroy)                     \
  X(cuStreamSynchronize)                 \
  X(cuStreamWaitEvent)                   \
  X(cuEventCreate)                       \
  X(cuEventRecord)                       \
  X(cuEventSynchronize)                  \
  X(cuEventDestroy)                      \
  X(cuMemGetInfo)                        \
  X(cuMemAlloc)                          \
  X(cuMemFree)                           \
  X(cuMemHostAlloc)                      \
  X(cuMemFreeHost)                       \
  X(cuMemcpyHtoDAsync)                   \
  X(cuMemcpyDtoHAsync)                   \
  X(cuMemcpyDtoDAsync)                   \
  X(cuMemcpyPeerAsync)                   \
  X(cuModuleLoadData)                    \
  X(cuModuleUnload)                      \
  X(cuModuleGetFunction)                 \
  X(cuFuncGetAttribute)                  \
  X(cuLaunchKernel)                       \
  X(cuStreamBeginCapture)                 \
  X(cuStreamEndCapture)                   \
  X(cuGraphInstantiate)                   \
  X(cuGraphLaunch)                        \
  X(cuGraphDestroy)                       \
  X(cuGraphExecDestroy)                   \
  X(cuCtxGetCurrent)                      \
  X(cuCtxSynchronize)                     \
  X(cuDeviceGetUuid)                      \
  X(cuPointerGetAttribute)                \
  X(cuMemGetAddressRange)                 \
  X(cuIpcGetMemHandle)                    \
  X(cuIpcOpenMemHandle)                   \
  X(cuIpcCloseMemHandle)

#define TENSORD_CUDA_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)                       \
  X(nvrtcGetErrorString)                \
  X(nvrtcGetNumSupportedArchs)          \
  X(nvrtcGetSupportedArchs)             \
  X(nvrtcCreateProgram)                 \
  X(nvrtcDestroyProgram)                \
  X(nvrtcCompileProgram)                \
  X(nvrtcGetProgramLogSize)             \
  X(nvrtcGetProgramLog)                 \
  X(nvrtcGetPTXSize)                    \
  X(nvrtcGetPTX)                        \
  X(nvrtcGetCUBINSize)                  \
  X(nvrtcGetCUBIN)

#define TENSORD_CUDA_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate)                        \
  X(cublasDestroy)                       \
  X(cublasGetVersion)                    \
  X(cublasSetStream)                     \
  X(cublasSetMathMode)                   \
  X(cublasSgemm)                         \
  X(cublasSgemmStridedBatched)

// cuBLASLt: MatMul/Gemm with a bias (+ReLU/GELU) epilogue in one call. Optional: where
// libcublasLt does not load, nothing is fused and MatMul/Gemm run on cuBLAS as before.
#define TENSORD_CUDA_CUBLASLT_FUNCTIONS(X)     \
  X(cublasLtCreate)                            \
  X(cublasLtDestroy)                           \
  X(cublasLtGetVersion)                        \
  X(cublasLtMatmulDescCreate)                  \
  X(cublasLtMatmulDescDestroy)                 \
  X(cublasLtMatmulDescSetAttribute)            \
  X(cublasLtMatrixLayoutCreate)                \
  X(cublasLtMatrixLayoutDestroy)               \
  X(cublasLtMatmulPreferenceCreate)            \
  X(cublasLtMatmulPreferenceDestroy)           \
  X(cublasLtMatmulPreferenceSetAttribute)      \
  X(cublasLtMatmulAlgoGetHeuristic)            \
  X(cublasLtMatmul)

// cuDNN 9's legacy API (libcudnn.so.9 dispatches to libcudnn_cnn/ops): convolution with
// bias/activation, pooling. Only where the build found cudnn.h (TENSORD_HAVE_CUDNN_H).
#define TENSORD_CUDA_CUDNN_FUNCTIONS(X)        \
  X(cudnnGetVersion)                           \
  X(cudnnGetErrorString)                       \
  X(cudnnCreate)                               \
  X(cudnnDestroy)                              \
  X(cudnnSetStream)                            \
  X(cudnnCreateTensorDescriptor)               \
  X(cudnnSetTensorNdDescriptor)                \
  X(cudnnDestroyTensorDescriptor)              \
  X(cudnnCreateFilterDescriptor)               \
  X(cudnnSetFilterNdDescriptor)                \
  X(cudnnDestroyFilterDescriptor)              \
  X(cudnnCreateConvolutionDescriptor)          \
  X(cudnnSetConvolutionNdDescriptor)           \
  X(cudnnSetConvolutionGroupCount)             \
  X(cudnnSetConvolutionMathType)               \
  X(cudnnDestroyConvolutionDescriptor)         \
  X(cudnnGetConvolutionForwardAlgorithm_v7)    \
  X(cudnnFindConvolutionForwardAlgorithmEx)    \
  X(cudnnGetConvolutionForwardWorkspaceSize)   \
  X(cudnnConvolutionForward)                   \
  X(cudnnConvolutionBiasActivationForward)     \
  X(cudnnAddTensor)                            \
  X(cudnnCreateActivationDescriptor)           \
  X(cudnnSetActivationDescriptor)              \
  X(cudnnDestroyActivationDescriptor)          \
  X(cudnnActivationForward)                    \
  X(cudnnCreatePoolingDescriptor)              \
  X(cudnnSetPoolingNdDescriptor)               \
  X(cudnnDestroyPoolingDescriptor)             \
  X(cudnnPoolingForward)                       \
  X(cudnnCreateRNNDescriptor)                  \
  X(cudnnSetRNNDescriptor_v8)                  \
  X(cudnnDestroyRNNDescriptor)                 \
  X(cudnnCreateRNNDataDescriptor)              \
  X(cudnnSetRNNDataDescriptor)                 \
  X(cudnnDestroyRNNDataDescriptor)             \
  X(cudnnGetRNNWeightSpaceSize)                \
  X(cudnnGetRNNWeightParams)                   \
  X(cudnnGetRNNTempSpaceSizes)                 \
  X(cudnnRNNForward)

#define TENSORD_CUDA_MEMBER(name) decltype(&::name) name = nullptr;

struct DriverApi {
  TENSORD_CUDA_DRIVER_FUNCTIONS(TENSORD_CUDA_MEMBER)
  std::string path;  // the library that was loaded
};
struct NvrtcApi {
  TENSORD_CUDA_NVRTC_FUNCTIONS(TENSORD_CUDA_MEMBER)
  std::string path;
};
struct CublasApi {
  TENSORD_CUDA_CUBLAS_FUNCTIONS(TENSORD_CUDA_MEMBER)
  // Overloaded in the header (a C++ wrapper taking cudaDataType): the C entry points, typed.
  cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                 const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                 const void*, void*, cudaDataType, int, cublasComputeType_t,
                                 cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*cublasGemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                               int, const void*, const void*, cudaDataType, int, long long int,
                                               const void*, cudaDataType, int, long long int, const void*, void*,
                                               cudaDataType, int, long long int, int, cublasComputeType_t,
                                               cublasGemmAlgo_t) = nullptr;
  std::string path;
};

struct CublasLtApi {
  TENSORD_CUDA_CUBLASLT_FUNCTIONS(TENSORD_CUDA_MEMBER)
  std::string path;
};

#if TENSORD_HAVE_CUDNN_H
struct CudnnApi {
  TENSORD_CUDA_CUDNN_FUNCTIONS(TENSORD_CUDA_MEMBER)
  std::string path;
};
// cuDNN: libcudnn.so.9 by the same search (PyTorch's nvidia/cudnn/lib is among the wheels' folders).
const CudnnApi* cudnn_api(std::string* why);
#endif

// Each loads once per process (thread-safe) and returns the table, or nullptr with `why` set
// to one line naming what was tried and what failed.
const DriverApi* driver_api(std::string* why);
const NvrtcApi* nvrtc_api(std::string* why);
const CublasApi* cublas_api(std::string* why);
const CublasLtApi* cublaslt_api(std::string* why);  // libcublasLt.so.13/12, same search

// The folders searched after the soname (steps 1, 3 and 4 above; step 1 comes first). Pure:
// reads the environment and the file system, loads nothing (tests, `gpu-check.sh`).
std::vector<std::string> library_dirs();
// The file names tried for a library, best first: "nvrtc" -> libnvrtc.so.13, libnvrtc.so.12, ...
std::vector<std::string> library_names(const std::string& lib);

}  // namespace tensord::cuda
