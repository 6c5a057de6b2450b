// pdl.cuh: programmatic dependent launch (Hopper and newer). A kernel
// launched with programmatic stream serialization (Device.launchPDL) may
// start while the kernel before it still runs. It lets the next kernel be
// scheduled early too (pdl_launch_dependents), does only work that reads
// constant data (its weights), and calls pdl_wait before it reads or
// writes anything another kernel touches: pdl_wait returns once the
// kernels before it have finished and their writes are visible. On older
// GPUs both are no-ops and launches are serialized as usual.
#pragma once

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
