// RUN: llmc-opt %S/lower-to-kernels.mlir --llm-lower-to-kernels --llmk-plan-buffers | FileCheck %s

// Offsets are floats per token. The residual stream (width 64) stays at 0:
// every llmk.matmul_add takes its residual's slot in place. qkv (128) goes
// after it, the rotated q after qkv, and the attention output reuses qkv's
// slot (qkv is dead once q exists). The arena is the widest point:
// 64 + 128 + 64 = 256 floats per token. The logits get no slot.
// CHECK:      llm.model @m config {} attributes {llmk.arena_floats_per_token = 256 : i64}
// CHECK:      llmk.embed {{.+}} {arena_offset = 0 : i64}
// CHECK:      llmk.norm_matmul {{.+}} {arena_offset = 64 : i64, eps
// CHECK-NEXT: llmk.rope_kv_append {{.+}} {arena_offset = 192 : i64,
// CHECK-NEXT: llmk.attend {{.+}} {arena_offset = 64 : i64,
// CHECK:      llmk.matmul_add {{.+}} {arena_offset = 0 : i64}
// CHECK:      llmk.norm_gated_matmul {{.+}} {activation = #llm<activation silu>, arena_offset = 64 : i64,
// CHECK:      llmk.matmul_add {{.+}} {arena_offset = 0 : i64}
// Layer 1: the residual dies at the q/k/v product, so the rotated q takes
// its slot; the unfused norm lives until the first llmk.add, which updates
// it in place (it is the add's lhs and dies there), and so does the second;
// the projection output o1, read by both adds, keeps its own slot.
// CHECK:      %[[N:.+]] = llmk.rms_norm {{.+}} {arena_offset = 64 : i64,
// CHECK:      llmk.norm_matmul {{.+}} {arena_offset = 128 : i64, eps
// CHECK:      llmk.rope_kv_append {{.+}} {arena_offset = 0 : i64,
// CHECK:      llmk.attend {{.+}} {arena_offset = 128 : i64,
// CHECK:      %[[O:.+]] = llmk.norm_matmul {{.+}} {arena_offset = 0 : i64}
// CHECK:      llmk.add %[[N]], %[[O]] {arena_offset = 64 : i64}
// CHECK:      llmk.add {{.+}}, %[[O]] {arena_offset = 64 : i64}
// CHECK:      llmk.norm_gated_matmul {{.+}} {activation = #llm<activation gelu>, arena_offset = 128 : i64}
// CHECK:      llmk.matmul_add {{.+}} {arena_offset = 64 : i64}
// CHECK:      llmk.norm_matmul
// CHECK-NOT:  arena_offset
// CHECK:      llm.return
