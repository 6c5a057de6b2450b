// pdl.cuh: programmatic dependent launch (Hopper and newer). A kernel
// launched with programmatic stream serialization (Device.launchPDL) may
// start while the kernel before it still runs, once every block of that
// kernel has called pdl_launch_dependents (or exited). It does only work
// that reads constant data (its weights) and then calls pdl_wait before
// it reads or writes anything another kernel touches: pdl_wait returns
// once the kernels before it have finished and their writes are visible.
// The decode products and attention call pdl_launch_dependents as they
// start: the next kernel's blocks then take whatever an SM has left and
// fetch their constant inputs (weights, the position's rotation, cached
// keys) while this one runs, so the gap between two kernels and the next
// one's first loads overlap this one's tail; one-block kernels call it at
// once. On older GPUs both are no-ops and launches are serialized as
// usual.
//
// What a kernel reads of another kernel's output goes through ld_dep,
// never the read-only path (__ldg, or a const pointer the compiler takes
// for read-only and loads with ld.global.nc): such loads count as reading
// memory nothing writes while the kernel runs, and ptxas moves them above
// griddepcontrol.wait (seen on sm_90: attn_decode read the step's value
// vector before its wait, and decode went wrong only with PDL on).
#pragma once

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ld_dep loads *p, written by a kernel before this one: a coherent load
// (ld.global.ca), kept after pdl_wait.
template <typename T>
__device__ __forceinline__ T ld_dep(const T* p) {
    return __ldca(p);
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
