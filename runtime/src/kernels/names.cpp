//===- names.cpp - Printable names of model config enums -------------------===//
// The spellings used in manifests, IR attributes and logs.
//===----------------------------------------------------------------------===//
#include "llmc/model.h"

namespace llmc {

const char *ropeStyleName(RopeStyle s) { return spelling(s).data(); }

const char *activationName(Activation a) { return spelling(a).data(); }

const char *normKindName(NormKind n) { return spelling(n).data(); }

} // namespace llmc
