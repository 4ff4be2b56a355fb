// Thin PTX wrappers used by the Hopper kernels: one instruction per function, named after it.
// tf32 tensor-core MMA (mma.sync m16n8k8), tf32 rounding, the SFU approximations we use on purpose
// (ex2/lg2/rcp/rsqrt .approx: relative error ~2^-22, far below the bf16/tf32 operand rounding),
// cp.async with zero fill, named barriers and a warp max-reduction.
#pragma once

#include <cstdint>

namespace fastkda::device {

// ---- tensor cores ----------------------------------------------------------------------------
// D(16x8, f32) += A(16x8, tf32, row) * B(8x8, tf32, col). Fragment layout (g = lane / 4,
// t = lane % 4): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (k = t, n = g),
// b1 (k = t + 4, n = g); d0 (g, 2t), d1 (g, 2t + 1), d2 (g + 8, 2t), d3 (g + 8, 2t + 1).
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A B, m16n8k8, bf16 operands (a0: row g, a1: row g + 8, b0: column g; pairs packed with the
// lower k index in the low half), f32 accumulate.
__device__ __forceinline__ void mma_m16n8k8_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                 uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// D += A B, m16n8k16, bf16 operands (pairs packed with the lower k index in the low half), f32
// accumulate.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// bf16x2 of (first, second), round to nearest even; first in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float first, float second) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(second), "f"(first));
  return r;
}

// Four 8 x 8 b16 matrices from shared memory: lane l gives the address of row l % 8 of matrix
// l / 8 (16 bytes) and receives word l % 4 of row l / 4 of matrix i in r[i] (the mma fragment
// layout; for f32 data, 8 rows x 4 values).
__device__ __forceinline__ void ldmatrix_x4(const void* row, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row)))
               : "memory");
}
// The same with each matrix transposed: lane l receives elements (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4) of matrix i in r[i].
__device__ __forceinline__ void ldmatrix_x4_trans(const void* row, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row)))
               : "memory");
}
// Four 8 x 8 b16 matrices from the mma fragment layout (lane 4 g + t holds row g, columns 2t and
// 2t + 1 of matrix i in r_i, the lower column in the low half) to shared memory, transposed: row j
// of stored matrix i (column j of the matrix) goes to the 16 bytes at the address of lane 8 i + j.
__device__ __forceinline__ void stmatrix_x4_trans(const void* row, uint32_t r0, uint32_t r1,
                                                  uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(row))),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// f16x2 of (first, second), round to nearest even; first in the low half.
__device__ __forceinline__ uint32_t pack_f16x2(float first, float second) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(second), "f"(first));
  return r;
}
__device__ __forceinline__ uint16_t f16_rn(float x) {
  uint16_t r;
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  return r;
}

// Split-bf16 pair: x = hi + lo + O(2^-17 |x|), hi = bf16(x), lo = bf16(x - hi). A product from
// hi.hi + hi.lo + lo.hi has ~16 significant bits (tf32: 11).
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack_bf16x2(x0, x1);
  lo = pack_bf16x2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}

// Round to nearest (ties away) to tf32; the result is an f32 bit pattern with 13 zero low bits.
__device__ __forceinline__ uint32_t cvt_rna_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
// A tf32 MMA operand: x rounded to nearest (ties to even), in one instruction on sm_90
// (F2FP.TF32.F32.PACK_B; cvt.rna.tf32 is three). NaN stays NaN and inf stays inf. (The earlier
// one-add form, bits + 0x1000, turned the canonical NaN 0x7fffffff into -0: a NaN state was read
// as zero by the next chunk's products, so NaN inputs gave finite outputs.)
__device__ __forceinline__ uint32_t tf32_rn(float x) {
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// ---- special functions -----------------------------------------------------------------------
__device__ __forceinline__ float ex2_approx(float x) {  // 2^x; 2^-inf = 0, ftz
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float lg2_approx(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float rsqrt_approx(float x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// ---- asynchronous copies ---------------------------------------------------------------------
// 16 bytes global -> shared; src_bytes = 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_cg_16(void* smem_dst, const void* gmem_src,
                                               uint32_t src_bytes) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---- TMA copies and mbarriers ------------------------------------------------------------------
// A 2-D box of the tensor map `tmap` (a __grid_constant__ kernel parameter) at element coordinates
// (c0 inner, c1 outer) into shared memory (128-byte aligned), completing as transaction bytes on
// the mbarrier `mbar`. Out-of-range elements are written as zeros.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const void* tmap, int c0, int c1,
                                            uint64_t* mbar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
      "l"(tmap), "r"(c0), "r"(c1), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(mbar)))
      : "memory");
}
// The same for a 3-D box at (c0 inner, c1, c2 outer).
__device__ __forceinline__ void tma_load_3d(void* smem_dst, const void* tmap, int c0, int c1,
                                            int c2, uint64_t* mbar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(mbar)))
      : "memory");
}
// L2 prefetch of the 128-byte line holding p (a hint: no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
// `bytes` contiguous bytes global -> shared (16-byte aligned, a multiple of 16), on `mbar`.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                          uint64_t* mbar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
      "l"(gmem_src), "r"(bytes), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(mbar)))
      : "memory");
}
// A 2-D box of shared memory (128-byte aligned, the map's layout) to the tensor map's box at
// (c0 inner, c1 outer), in this thread's bulk group (commit, then wait for it before the shared
// memory is written again).
__device__ __forceinline__ void tma_store_2d(const void* tmap, int c0, int c1,
                                             const void* smem_src) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(tmap),
      "r"(c0), "r"(c1), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_src)))
      : "memory");
}
// The tensor map's box at (c0 inner, c1 outer) into L2 (a hint: no shared memory, no barrier).
__device__ __forceinline__ void tma_prefetch_2d(const void* tmap, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(tmap),
               "r"(c0), "r"(c1)
               : "memory");
}
// `bytes` contiguous bytes (16-byte aligned, a multiple of 16) into L2 (a hint).
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// At most n of this thread's bulk groups still reading their shared memory.
template <int n>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(n) : "memory");
}
// At most n of this thread's bulk groups not yet complete (writes done).
template <int n>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(n) : "memory");
}
__device__ __forceinline__ void mbarrier_init(uint64_t* mbar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(mbar))),
               "r"(count)
               : "memory");
}
// Makes initialised mbarriers visible to the async proxy (TMA); then a barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` transaction bytes for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* mbar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(mbar))),
               "r"(bytes)
               : "memory");
}
// One arrival on `mbar` (its phase completes with the expected count).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* mbar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(mbar)))
               : "memory");
}
// Waits until the phase with parity `parity` of `mbar` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* mbar, uint32_t parity) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(mbar));
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses of
// them (wgmma reads, TMA writes); follow it with a barrier so that every writer has fenced.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The same for global memory: after an acquire that made other threads' generic-proxy stores
// visible, orders them before this thread's async-proxy reads (bulk copies) of them.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// ---- flags in global memory between concurrently running CTAs -------------------------------
// A counter increment that publishes the CTA's earlier writes (after a CTA barrier) at GPU
// scope: a fence (cumulative over what the barrier ordered before it), then the add.
__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("fence.acq_rel.gpu;\nred.relaxed.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v)
               : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_relaxed(const unsigned long long* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// The SM this thread runs on (0 .. number of SMs - 1 on the GPUs measured; a hint, not an index
// the code relies on for correctness).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

// ---- programmatic dependent launch ----------------------------------------------------------
// This CTA lets the next kernel of the stream (launched with programmatic stream serialization)
// start: it is scheduled once every CTA of this grid has triggered or exited.
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// Waits until the previous kernel of the stream has completed and its memory is visible (a no-op
// without programmatic stream serialization).
__device__ __forceinline__ void griddep_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// ---- per-warpgroup register budgets (every thread of the warpgroup, uniform) ----------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- named barriers (id 0 is __syncthreads) --------------------------------------------------
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A 0 the compiler cannot see through (keeps it from specialising code on a known value).
__device__ __forceinline__ int opaque_zero() {
  int z;
  asm volatile("mov.b32 %0, 0;\n" : "=r"(z));
  return z;
}

// max that keeps a NaN operand (fmaxf returns the other operand): one FMNMX.NAN.
__device__ __forceinline__ float fmax_nan(float x, float y) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(x), "f"(y));
  return r;
}

// ---- warp reductions -------------------------------------------------------------------------
__device__ __forceinline__ uint32_t redux_max_u32(uint32_t x) {
  uint32_t r;
  asm("redux.sync.max.u32 %0, %1, 0xffffffff;\n" : "=r"(r) : "r"(x));
  return r;
}

}  // namespace fastkda::device
