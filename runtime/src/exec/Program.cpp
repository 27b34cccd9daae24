//===- Program.cpp - Program <-> JSON with validation ----------------------===//
// The manifest's "program" object. Reading checks the structure, the op
// names, each op's input count and weight roles, and that every value is
// defined by an earlier node before it is used (and that the output is).
//===----------------------------------------------------------------------===//
#include "../artifact/JsonFields.h"
#include "OpSpec.h"
#include "llmc/program.h"

#include <algorithm>
#include <set>

namespace llmc {

using nlohmann::json;

namespace {
constexpr int kMaxValueId = 1 << 24;

std::string opList() {
  std::string s;
  for (const OpSpec &spec : opSpecs())
    s += (s.empty() ? "" : ", ") + std::string(spec.op);
  return s;
}
} // namespace

json Program::toJson() const {
  json nodesJ = json::array();
  for (const ProgramNode &n : nodes) {
    json w = json::object();
    for (const auto &[role, name] : n.weights)
      w[role] = name;
    nodesJ.push_back(json{{"op", n.op},
                          {"in", n.in},
                          {"out", n.out},
                          {"weights", std::move(w)},
                          {"attrs", n.attrs.is_null() ? json::object() : n.attrs}});
  }
  return json{{"nodes", std::move(nodesJ)}, {"output", output}};
}

Program Program::fromJson(const json &j) {
  using jsonf::fail;
  if (!j.is_object())
    fail("program", "expected a JSON object");
  const json &nodesJ = jsonf::require(j, "nodes", "program");
  if (!nodesJ.is_array())
    fail("program", "field 'nodes' must be an array");
  Program p;
  std::set<int> defined;
  auto checkId = [&](int64_t id, const std::string &ctx) {
    if (id < 0 || id >= kMaxValueId)
      fail(ctx, "value id " + std::to_string(id) + " is out of range [0, " +
                    std::to_string(kMaxValueId) + ")");
  };
  for (size_t i = 0; i < nodesJ.size(); ++i) {
    const json &nj = nodesJ[i];
    std::string ctx = "program node " + std::to_string(i);
    ProgramNode n;
    n.op = jsonf::getString(nj, "op", ctx);
    ctx += " (" + n.op + ")";
    const OpSpec *spec = findOpSpec(n.op);
    if (!spec)
      fail(ctx, "unknown op '" + n.op + "' (known: " + opList() + ")");

    if (const json *in = jsonf::find(nj, "in")) {
      if (!in->is_array())
        fail(ctx, "field 'in' must be an array of value ids");
      for (const json &v : *in) {
        int64_t id = jsonf::asInt(v, "in", ctx);
        checkId(id, ctx);
        if (!defined.count(int(id)))
          fail(ctx, "input value " + std::to_string(id) + " is not defined by an earlier node");
        n.in.push_back(int(id));
      }
    }
    if (int(n.in.size()) != spec->arity)
      fail(ctx, "takes " + std::to_string(spec->arity) + " input(s), got " +
                    std::to_string(n.in.size()));
    int64_t out = jsonf::getInt(nj, "out", ctx);
    checkId(out, ctx);
    n.out = int(out);

    if (const json *w = jsonf::find(nj, "weights")) {
      if (!w->is_object())
        fail(ctx, "field 'weights' must be an object of role -> tensor name");
      for (auto it = w->begin(); it != w->end(); ++it) {
        const std::string &role = it.key();
        bool known = std::any_of(spec->required.begin(), spec->required.end(),
                                 [&](const char *r) { return role == r; }) ||
                     std::any_of(spec->optional.begin(), spec->optional.end(),
                                 [&](const char *r) { return role == r; });
        if (!known)
          fail(ctx, "unknown weight role '" + role + "'");
        if (!it->is_string() || it->get_ref<const std::string &>().empty())
          fail(ctx, "weight '" + role + "' must name a tensor");
        n.weights[role] = it->get<std::string>();
      }
    }
    for (const char *r : spec->required)
      if (!n.weights.count(r))
        fail(ctx, std::string("missing weight '") + r + "'");

    if (const json *a = jsonf::find(nj, "attrs")) {
      if (!a->is_object())
        fail(ctx, "field 'attrs' must be an object");
      n.attrs = *a;
    }
    defined.insert(n.out);
    p.nodes.push_back(std::move(n));
  }
  int64_t output = jsonf::getInt(j, "output", "program");
  checkId(output, "program");
  if (!defined.count(int(output)))
    fail("program", "output value " + std::to_string(output) + " is not defined by any node");
  p.output = int(output);
  return p;
}

} // namespace llmc
