//===- LlmkDialect.h - The llmk dialect -------------------------*- C++ -*-===//
#pragma once
#include "mlir/IR/Dialect.h"

#include "dialects/llmk/IR/LlmkDialect.h.inc"
