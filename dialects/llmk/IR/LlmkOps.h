//===- LlmkOps.h - llmk dialect operations ----------------------*- C++ -*-===//
#pragma once
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llm/IR/LlmTypes.h"
#include "dialects/llmk/IR/LlmkDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/llmk/IR/LlmkEnums.h.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/llmk/IR/LlmkAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/llmk/IR/LlmkOps.h.inc"
