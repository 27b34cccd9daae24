//===- LlmOps.h - llm dialect operations ------------------------*- C++ -*-===//
#pragma once
#include "dialects/llm/IR/LlmDialect.h"
#include "dialects/llm/IR/LlmTypes.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/llm/IR/LlmEnums.h.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/llm/IR/LlmAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/llm/IR/LlmOps.h.inc"
