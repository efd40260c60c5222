//===- Nodes.cpp - Reading a node of an exported graph ----------*- C++ -*-===//
//
// Every argument comes from the archive: one of an unexpected kind fails
// with the op's name rather than being guessed at.
//
//===----------------------------------------------------------------------===//

#include "Nodes.h"

#include "ImportError.h"

#include <algorithm>
#include <cstring>

using namespace mlir::loadplan;
using namespace mlir::loadplan::torch_export;

std::string torch_export::opName(const std::string &target) {
  std::string name = target;
  if (name.rfind("torch.ops.", 0) == 0)
    name = name.substr(std::strlen("torch.ops."));
  const std::string suffix = ".default";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    name.resize(name.size() - suffix.size());
  return name;
}

std::string torch_export::opPacket(const std::string &target) {
  std::string name = target;
  if (name.rfind("torch.ops.", 0) != 0)
    return name;
  name = name.substr(std::strlen("torch.ops."));
  size_t first = name.find('.');
  if (first == std::string::npos)
    return name;
  size_t second = name.find('.', first + 1);
  return second == std::string::npos ? name : name.substr(0, second);
}

int64_t torch_export::normalizeDim(int64_t dim, int64_t rank) {
  int64_t bound = std::max<int64_t>(rank, 1);
  if (dim < -bound || dim >= bound)
    fail("the program has a dim " + std::to_string(dim) +
         " out of range for rank " + std::to_string(rank));
  return dim < 0 ? dim + bound : dim;
}

const schema::Argument *torch_export::input(const schema::Node &node,
                                            const std::string &name,
                                            size_t position) {
  const auto &inputs = node.get_inputs();
  for (const schema::NamedArgument &arg : inputs)
    if (arg.get_name() == name)
      return &arg.get_arg();
  (void)position;
  return nullptr;
}

std::optional<int64_t> torch_export::intInput(const schema::Node &node,
                                              const std::string &name,
                                              size_t position) {
  const schema::Argument *arg = input(node, name, position);
  if (!arg)
    return std::nullopt;
  using Tag = schema::Argument::Tag;
  switch (arg->tag()) {
  case Tag::AS_NONE:
    return std::nullopt;
  case Tag::AS_INT:
    return arg->get_as_int();
  case Tag::AS_SYM_INT:
    if (arg->get_as_sym_int().tag() == schema::SymIntArgument::Tag::AS_INT)
      return arg->get_as_sym_int().get_as_int();
    fail("'" + node.get_target() + "' has a symbolic " + name +
         " (a value the loader computed from a tensor)");
  default:
    fail("'" + node.get_target() + "' has a " + name + " that is not an int");
  }
}

std::vector<int64_t> torch_export::intsInput(const schema::Node &node,
                                             const std::string &name,
                                             size_t position) {
  const schema::Argument *arg = input(node, name, position);
  std::vector<int64_t> out;
  if (!arg)
    return out;
  using Tag = schema::Argument::Tag;
  if (arg->tag() == Tag::AS_INTS)
    return arg->get_as_ints();
  if (arg->tag() == Tag::AS_INT)
    return {arg->get_as_int()};
  if (arg->tag() == Tag::AS_SYM_INTS) {
    for (const schema::SymIntArgument &v : arg->get_as_sym_ints()) {
      if (v.tag() != schema::SymIntArgument::Tag::AS_INT)
        fail("'" + node.get_target() + "' has a symbolic " + name);
      out.push_back(v.get_as_int());
    }
    return out;
  }
  if (arg->tag() == Tag::AS_NONE)
    return out;
  fail("'" + node.get_target() + "' has a " + name + " that is not a list");
}

std::vector<std::string> torch_export::outputNames(const schema::Node &node) {
  std::vector<std::string> out;
  using Tag = schema::Argument::Tag;
  for (const schema::Argument &arg : node.get_outputs()) {
    if (arg.tag() == Tag::AS_TENSOR) {
      out.push_back(arg.get_as_tensor().get_name());
    } else if (arg.tag() == Tag::AS_TENSORS) {
      for (const schema::TensorArgument &t : arg.get_as_tensors())
        out.push_back(t.get_name());
    } else if (arg.tag() == Tag::AS_OPTIONAL_TENSOR &&
               arg.get_as_optional_tensor().tag() ==
                   schema::OptionalTensorArgument::Tag::AS_TENSOR) {
      out.push_back(arg.get_as_optional_tensor().get_as_tensor().get_name());
    }
  }
  return out;
}

std::vector<std::string>
torch_export::symbolicOutputs(const schema::Node &node) {
  std::vector<std::string> out;
  using Tag = schema::Argument::Tag;
  for (const schema::Argument &arg : node.get_outputs()) {
    if (arg.tag() == Tag::AS_SYM_INT &&
        arg.get_as_sym_int().tag() == schema::SymIntArgument::Tag::AS_NAME)
      out.push_back(arg.get_as_sym_int().get_as_name());
    else if (arg.tag() == Tag::AS_SYM_FLOAT &&
             arg.get_as_sym_float().tag() ==
                 schema::SymFloatArgument::Tag::AS_NAME)
      out.push_back(arg.get_as_sym_float().get_as_name());
    else if (arg.tag() == Tag::AS_SYM_BOOL &&
             arg.get_as_sym_bool().tag() ==
                 schema::SymBoolArgument::Tag::AS_NAME)
      out.push_back(arg.get_as_sym_bool().get_as_name());
  }
  return out;
}
