//===- LlmDialect.h - The llm dialect ---------------------------*- C++ -*-===//
#pragma once
#include "mlir/IR/Dialect.h"

#include "dialects/llm/IR/LlmDialect.h.inc"
