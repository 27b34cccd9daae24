//===- CpuAttendKernels.h - Generated attention kernels ---------*- C++ -*-===//
// Internal to codegen/cpu: the attention kernels of opKernelSource()
// (CpuOpKernels.cpp), which also emits the helpers they call (vexp,
// load8h, load8q, hsum8x4, the AVX-512 loads).
//===----------------------------------------------------------------------===//
#pragma once
#include "codegen/cpu/CpuOpKernels.h"

#include <string>

namespace llmc::codegen::detail {

/// A double with 17 significant digits, as C++ source.
std::string num(double v);
bool isGroupedAttend(OpKernelSpec::Kind k);
bool isRowsAttend(OpKernelSpec::Kind k);
/// AttendF32 / AttendF32Rows: one query head.
std::string attendKernel(const OpKernelSpec &s);
/// The group kinds (AttendF32Group, AttendF32RowsGroup, AttendF16RowsGroup,
/// AttendQ8RowsGroup).
std::string groupAttendKernel(const OpKernelSpec &s);

} // namespace llmc::codegen::detail
