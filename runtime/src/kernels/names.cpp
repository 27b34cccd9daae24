//===- names.cpp - Printable names of model config enums -------------------===//
// The spellings used in manifests, IR attributes and logs.
//===----------------------------------------------------------------------===//
#include "llmc/model.h"

namespace llmc {

const char *ropeStyleName(RopeStyle s) {
  switch (s) {
  case RopeStyle::Interleaved: return "interleaved";
  case RopeStyle::Half: return "half";
  }
  return "unknown";
}

const char *activationName(Activation a) {
  switch (a) {
  case Activation::SiLU: return "silu";
  case Activation::GELU: return "gelu";
  }
  return "unknown";
}

const char *normKindName(NormKind n) {
  switch (n) {
  case NormKind::RMSNorm: return "rms_norm";
  case NormKind::LayerNorm: return "layer_norm";
  }
  return "unknown";
}

} // namespace llmc
