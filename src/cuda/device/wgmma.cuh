// Warpgroup MMA (sm_90a wgmma) wrappers: A from registers (the state S^T is an accumulator), B
// from shared memory through a matrix descriptor, no swizzle. Used by the kVs = 128 and kVs = 64
// scans (prefill/scan.cuh scan_chunk_wg: tf32 P^T / O^T, f16 in the unsplit kVs = 128 scan, bf16
// state update; docs/prefill.md, "The wgmma scan");
// the m64n64k16 forms (and their leading-column variant for triangular factors) and the SS form
// serve the 64-token WY pipeline (prefill/wy64.cuh) and probes (tests/gpu/test_wy64_bench.cu,
// test_scan_chain_bench.cu). tests/gpu/test_wgmma_gpu.cu pins the layouts below against a CPU
// product.
//
// Register layouts, per warp w of the warpgroup (rows 16 w .. 16 w + 15 of the 64), g = lane / 4,
// t = lane % 4 (the mma.sync m16n8 layouts, repeated):
//   D (64 x N, f32):   d[4 i + 0] (g, 8 i + 2 t), d[4 i + 1] (g, 8 i + 2 t + 1),
//                      d[4 i + 2] (g + 8, 8 i + 2 t), d[4 i + 3] (g + 8, 8 i + 2 t + 1)
//   A, tf32 k8:        a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   A, bf16 / f16 k16: a0 (g, 2t | 2t + 1), a1 (g + 8, 2t | 2t + 1), a2 (g, 2t + 8 | 2t + 9),
//                      a3 (g + 8, 2t + 8 | 2t + 9)   (low half = lower k)
// B (N x K, "K-major": k contiguous), no swizzle: core matrices of 8 rows (n) x 16 bytes (k),
// each 128 contiguous bytes (row r at +16 r); core matrix (n / 8, k-group) at
// start + (n / 8) * sbo + (k-group) * lbo.
#pragma once

#include <cstdint>

#include "cuda/device/ptx.cuh"

namespace fastkda::device {

// Shared-memory matrix descriptor, no swizzle (layout type 0): start address, leading-dimension
// byte offset (between core matrices adjacent in K), stride byte offset (adjacent in N), all in
// units of 16 bytes. Kept as two 32-bit words: offsets move only the low word (start address |
// LBO << 16), so stepping a descriptor is one 32-bit add, not a 64-bit add and register moves
// before each wgmma (measured in the scan: ~6 instructions per wgmma with a uint64_t).
struct SmemDesc {
  uint32_t lo, hi;
  // The same layout `units` x 16 bytes further on (the address field must not overflow).
  __device__ __forceinline__ SmemDesc operator+(uint32_t units) const { return {lo + units, hi}; }
};
__device__ __forceinline__ SmemDesc smem_desc_noswizzle(const void* smem, uint32_t lbo_bytes,
                                                        uint32_t sbo_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return {((addr >> 4) & 0x3fffu) | (((lbo_bytes >> 4) & 0x3fffu) << 16),
          (sbo_bytes >> 4) & 0x3fffu};  // base offset 0, swizzle mode 0
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across the async
// wgmma window: call on the accumulators before the first wgmma and after wgmma_wait_group.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64 x 16) (+)= A(64 x 8, tf32, registers) * B(8 x 16, tf32, smem K-major). accumulate = false
// overwrites D.
__device__ __forceinline__ void wgmma_m64n16k8_tf32_rs(float (&d)[8], const uint32_t (&a)[4],
                                                       SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %14, 0;\nmov.b64 desc, {%12, %13};\n"
      "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, desc, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

// D(64 x 32) (+)= A(64 x 8, tf32, registers) * B(8 x 32, tf32, smem K-major).
__device__ __forceinline__ void wgmma_m64n32k8_tf32_rs(float (&d)[16], const uint32_t (&a)[4],
                                                       SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %22, 0;\nmov.b64 desc, {%20, %21};\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, desc, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

// The accumulator operands of the 64 x 64 and 64 x 128 shapes (%0 .. %31 / %63).
#define FASTKDA_WGMMA_D32_REGS                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FASTKDA_WGMMA_D64_REGS                                            \
  FASTKDA_WGMMA_D32_REGS                                                  \
      ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "         \
      "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
      "%56, %57, %58, %59, %60, %61, %62, %63"
#define FASTKDA_WGMMA_D32_OPERANDS                                                                \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FASTKDA_WGMMA_D64_OPERANDS                                                               \
  FASTKDA_WGMMA_D32_OPERANDS, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),   \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// D(64 x 64) (+)= A(64 x 8, tf32, registers) * B(8 x 64, tf32, smem K-major).
__device__ __forceinline__ void wgmma_m64n64k8_tf32_rs(float (&d)[32], const uint32_t (&a)[4],
                                                       SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %38, 0;\nmov.b64 desc, {%36, %37};\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " FASTKDA_WGMMA_D32_REGS
      "}, {%32, %33, %34, %35}, desc, p, 1, 1;\n}\n"
      : FASTKDA_WGMMA_D32_OPERANDS
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

// D(64 x 128) (+)= A(64 x 16, bf16, registers) * B(16 x 128, bf16, smem K-major, not transposed).
__device__ __forceinline__ void wgmma_m64n128k16_bf16_rs(float (&d)[64], const uint32_t (&a)[4],
                                                         SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %70, 0;\nmov.b64 desc, {%68, %69};\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FASTKDA_WGMMA_D64_REGS
      "}, {%64, %65, %66, %67}, desc, p, 1, 1, 0;\n}\n"
      : FASTKDA_WGMMA_D64_OPERANDS
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

// D(64 x 128) (+)= A(64 x 16, bf16, smem K-major) * B(16 x 128, bf16, smem K-major): both from
// descriptors (A's LBO: between core matrices adjacent in K, SBO: adjacent in M).
__device__ __forceinline__ void wgmma_m64n128k16_bf16_ss(float (&d)[64], SmemDesc desc_a,
                                                         SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %68, 0;\nmov.b64 da, {%64, %65};\n"
      "mov.b64 db, {%66, %67};\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FASTKDA_WGMMA_D64_REGS
      "}, da, db, p, 1, 1, 0, 0;\n}\n"
      : FASTKDA_WGMMA_D64_OPERANDS
      : "r"(desc_a.lo), "r"(desc_a.hi), "r"(desc_b.lo), "r"(desc_b.hi), "r"(int(accumulate)));
}

// D(64 x 64) (+)= A(64 x 16, registers) * B(16 x 64, smem K-major); bf16 or f16 operands.
#define FASTKDA_WGMMA_M64N64K16_RS(TYPES)                                                      \
  asm volatile(                                                                                \
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %38, 0;\nmov.b64 desc, {%36, %37};\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32" TYPES " " FASTKDA_WGMMA_D32_REGS            \
      "}, {%32, %33, %34, %35}, desc, p, 1, 1, 0;\n}\n"                                        \
      : FASTKDA_WGMMA_D32_OPERANDS                                                             \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),            \
        "r"(int(accumulate)))
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4],
                                                   SmemDesc desc_b, bool accumulate) {
  if constexpr (kBf16)
    FASTKDA_WGMMA_M64N64K16_RS(".bf16.bf16");
  else
    FASTKDA_WGMMA_M64N64K16_RS(".f16.f16");
}
#undef FASTKDA_WGMMA_M64N64K16_RS
// D(64 x 64) columns 0 .. 16 n16 - 1 += A(64 x 16, bf16, registers) * B(16 x 16 n16, bf16, smem
// K-major): m64n(16 n16)k16 on d[0] .. d[8 n16 - 1] (n16 in 1..4, a constant after unrolling: one
// wgmma per value), for a B whose other columns are zero (the WY scan's triangular factors).
// The leading columns: ptxas serializes the wgmma pipeline (C7511) when a wgmma's accumulators
// start inside another's (an n16 on d[24..31] of an n64's d[0..31]), not when they share its first.
__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs_first(float (&d)[32],
                                                              const uint32_t (&a)[4],
                                                              SmemDesc desc_b, int n16) {
  if (n16 == 4) {
    wgmma_m64n64k16_rs<true>(d, a, desc_b, true);
  } else if (n16 == 3) {
    asm volatile(
        "{\n.reg .b64 desc;\nmov.b64 desc, {%28, %29};\n"
        "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23}, "
        "{%24, %25, %26, %27}, desc, 1, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi));
  } else if (n16 == 2) {
    asm volatile(
        "{\n.reg .b64 desc;\nmov.b64 desc, {%20, %21};\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, desc, 1, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi));
  } else if (n16 == 1) {
    asm volatile(
        "{\n.reg .b64 desc;\nmov.b64 desc, {%12, %13};\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, desc, 1, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi));
  }
}
#undef FASTKDA_WGMMA_D64_OPERANDS
#undef FASTKDA_WGMMA_D32_OPERANDS
#undef FASTKDA_WGMMA_D64_REGS
#undef FASTKDA_WGMMA_D32_REGS

// D(64 x 32) (+)= A(64 x 16, f16, registers) * B(16 x 32, f16, smem K-major).
__device__ __forceinline__ void wgmma_m64n32k16_f16_rs(float (&d)[16], const uint32_t (&a)[4],
                                                       SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %22, 0;\nmov.b64 desc, {%20, %21};\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, desc, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}
// D(64 x 16) (+)= A(64 x 16, f16, registers) * B(16 x 16, f16, smem K-major).
__device__ __forceinline__ void wgmma_m64n16k16_f16_rs(float (&d)[8], const uint32_t (&a)[4],
                                                       SmemDesc desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 desc;\nsetp.ne.b32 p, %14, 0;\nmov.b64 desc, {%12, %13};\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, desc, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b.lo), "r"(desc_b.hi),
        "r"(int(accumulate)));
}

}  // namespace fastkda::device
