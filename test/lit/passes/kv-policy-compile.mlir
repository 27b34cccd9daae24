// llm-kv-policy inside `llmc compile`: the policy reaches the artifact's
// program (inspect lists it per attention layer; the JSON program carries
// every key), and a rejected option fails the compile without an artifact.
// REQUIRES: stories260k
// RUN: rm -rf %t && mkdir -p %t
// RUN: llmc compile %shared/models/stories260K.bin -o %t/snap.llmc -q --pipeline 'llm-kv-policy{method=snapkv budget=0.1}'
// RUN: llmc inspect %t/snap.llmc | FileCheck %s --check-prefix=SNAP
// RUN: llmc inspect %t/snap.llmc --json | FileCheck %s --check-prefix=JSON
// RUN: llmc compile %shared/models/stories260K.bin -o %t/pyr.llmc -q --pipeline 'llm-kv-policy{method=pyramidkv budget=128 only-layers=0,2,4}'
// RUN: llmc inspect %t/pyr.llmc | FileCheck %s --check-prefix=PYR
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/bad.llmc -q --pipeline 'llm-kv-policy{method=snapkv budget=0}' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not test -e %t/bad.llmc

// SNAP: pipeline: builtin.module(llm-kv-policy{method=snapkv budget=0.1})
// SNAP: kv policies: 5 of 5 attention layers
// SNAP-NEXT: layer 0 snapkv budget 0.1, layer_scale 1, mode prefill, kv_quant none
// SNAP-NEXT: layer 1 snapkv budget 0.1,
// SNAP-NEXT: layer 2 snapkv budget 0.1,
// SNAP-NEXT: layer 3 snapkv budget 0.1,
// SNAP-NEXT: layer 4 snapkv budget 0.1,

// JSON: "kv_policy": {
// JSON-NEXT: "budget": 0.1,
// JSON-NEXT: "budget_tokens": 0,
// JSON-NEXT: "kv_quant": "none",
// JSON-NEXT: "layer_scale": 1.0,
// JSON-NEXT: "method": "snapkv",
// JSON-NEXT: "mode": "prefill",
// JSON-NEXT: "pool": 7,
// JSON-NEXT: "refresh": 16,
// JSON-NEXT: "seed": 0,
// JSON-NEXT: "sink": 4,
// JSON-NEXT: "window": 32
// JSON-NEXT: },
// JSON-NEXT: "layer": 0,

// L = 5 counts every attention layer, selected or not: the pyramid's scales
// at layers 0, 2, 4 are 1.95, 1.0, 0.05.
// PYR: kv policies: 3 of 5 attention layers
// PYR-NEXT: layer 0 pyramidkv budget 128 tokens, layer_scale 1.95, mode prefill
// PYR-NEXT: layer 2 pyramidkv budget 128 tokens, layer_scale 1, mode prefill
// PYR-NEXT: layer 4 pyramidkv budget 128 tokens, layer_scale 0.05, mode prefill

// BAD: error: llm-kv-policy: option 'budget': ratio 0 is not in (0, 1]
// BAD: llmc: error: pipeline 'llm-kv-policy{method=snapkv budget=0}' failed
