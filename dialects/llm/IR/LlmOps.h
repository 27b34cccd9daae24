//===- LlmOps.h - llm dialect operations ------------------------*- C++ -*-===//
#pragma once
#include "dialects/llm/IR/LlmDialect.h"
#include "dialects/llm/IR/LlmTypes.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/llm/IR/LlmOps.h.inc"
