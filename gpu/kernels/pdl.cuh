// pdl.cuh: programmatic dependent launch (Hopper and newer). A kernel
// launched with programmatic stream serialization (Device.launchPDL) may
// start while the kernel before it still runs, once every block of that
// kernel has called pdl_launch_dependents (or exited). It does only work
// that reads constant data (its weights) and then calls pdl_wait before
// it reads or writes anything another kernel touches: pdl_wait returns
// once the kernels before it have finished and their writes are visible.
// Kernels with many blocks call pdl_launch_dependents near the end of
// their work, so the next kernel's waiting blocks do not take the SMs
// they still need; one-block kernels call it at once. On older GPUs both
// are no-ops and launches are serialized as usual.
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
