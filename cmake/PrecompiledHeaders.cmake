# Precompiled headers for the targets whose files spend most of their build
# parsing the same headers (MLIR, CLI11, GoogleTest, Eigen, nlohmann-json;
# see docs/design.md, "Build time"). Targets with the same compile flags
# share one PCH (REUSE_FROM): GCC rejects a PCH built with other flags.
# ccache caches PCH builds only with sloppiness pch_defines,time_macros
# (the top-level CMakeLists.txt sets it on its launcher).
#
# Included at the end of the top-level CMakeLists.txt, once every target
# exists. LLMC_PCH=OFF builds without them (same objects, slower build).
option(LLMC_PCH "precompiled headers for the header-heavy targets" ON)
if(NOT LLMC_PCH)
  return()
endif()

set(LLMC_PCH_STD <algorithm> <chrono> <cmath> <cstdio> <cstring> <functional> <map> <memory>
    <set> <stdexcept> <string> <vector>)

# Adds `headers` as `owner`'s PCH and lets the existing `reusers` (same
# compile flags as `owner`) use it.
function(llmc_pch owner)
  cmake_parse_arguments(PCH "" "" "HEADERS;REUSERS" ${ARGN})
  if(NOT TARGET ${owner})
    return()
  endif()
  target_precompile_headers(${owner} PRIVATE ${PCH_HEADERS})
  foreach(t IN LISTS PCH_REUSERS)
    if(TARGET ${t})
      target_precompile_headers(${t} REUSE_FROM ${owner})
    endif()
  endforeach()
endfunction()

# The runtime (no MLIR): its 80 files, and the commands' library.
llmc_pch(llmc_runtime HEADERS ${LLMC_PCH_STD} <nlohmann/json.hpp> <thread> <mutex>
         <llmc/dtype.h> <llmc/artifact.h>)
llmc_pch(llmc_cli HEADERS ${LLMC_PCH_STD} <nlohmann/json.hpp> <CLI/CLI.hpp> <llmc/artifact.h>
         <llmc/executor.h> <llmc/tokenizer.h> <llmc/batcher.h> <llmc/cuda_engine.h>)

# The calibration libraries (Eigen; llmc_prune has llmc_quant's flags).
llmc_pch(llmc_quant HEADERS ${LLMC_PCH_STD} <Eigen/Dense> REUSERS llmc_prune)

if(LLMC_BUILD_COMPILER)
  set(LLMC_PCH_MLIR <mlir/IR/BuiltinOps.h> <mlir/IR/BuiltinTypes.h> <mlir/IR/Builders.h>
      <mlir/Pass/Pass.h> <mlir/Pass/PassManager.h> <llvm/Support/raw_ostream.h>
      <llvm/Support/Format.h> <dialects/llm/IR/LlmOps.h>)
  # The calibrated pass families (Eigen, -march of llmc_quant).
  llmc_pch(obj.LlmcQuantPasses HEADERS ${LLMC_PCH_STD} ${LLMC_PCH_MLIR} <Eigen/Dense>
           <nlohmann/json.hpp> <llmc/executor.h>
           REUSERS obj.LlmcPrunePasses obj.LlmcSpecPasses)
  # The import and KV passes and the driver (exceptions on). The owner of a
  # shared PCH is the one the others depend on (a reuser waits for it).
  llmc_pch(obj.LlmcKvPasses HEADERS ${LLMC_PCH_STD} ${LLMC_PCH_MLIR} <mlir/IR/Diagnostics.h>
           REUSERS obj.LlmcImportPasses obj.LlmcCompiler)
  # The dialects, the lowering and the pass registration (exceptions off).
  llmc_pch(obj.LlmDialect HEADERS ${LLMC_PCH_STD} ${LLMC_PCH_MLIR}
           REUSERS obj.LlmkDialect obj.LlmcLoweringPasses obj.LlmcRegistration)
  llmc_pch(obj.LlmcWeights HEADERS ${LLMC_PCH_STD} ${LLMC_PCH_MLIR})
endif()

# The unit tests: 50 files, each GoogleTest and the runtime's headers.
llmc_pch(llmc-unittests HEADERS ${LLMC_PCH_STD} <random> <gtest/gtest.h> <nlohmann/json.hpp>
         <llmc/dtype.h> <llmc/artifact.h> <llmc/executor.h>)
