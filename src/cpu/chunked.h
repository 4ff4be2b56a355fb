// Internal entry of the chunked CPU path with an explicit ISA build (chunked.cpp compiles the
// whole per-item pipeline once per x86 ISA level). forward_chunked (common.h) picks the best one
// the CPU supports; tests use this to check every build the machine can run against the oracle.
#pragma once

#include "common.h"

namespace fastkda::cpu {

enum class CpuIsa : int { kSse2 = 0, kAvx2 = 1, kAvx512 = 2 };

const char* to_string(CpuIsa isa);
bool cpu_supports(CpuIsa isa);
// forward_chunked with the given build; requires cpu_supports(isa) and validated params.
void forward_chunked_isa(const ForwardParams& p, CpuIsa isa);

}  // namespace fastkda::cpu
