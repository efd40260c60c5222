//===- IRText.cpp - Spelling loadplan IR text -------------------*- C++ -*-===//
//
// The spellings match capture's (python/loadplan/_ir.py), so that an
// exported loader and a captured one print the same IR.
//
//===----------------------------------------------------------------------===//

#include "IRText.h"

using namespace mlir::loadplan;
using namespace mlir::loadplan::torch_export;

std::string torch_export::irString(const std::string &text) {
  static const char *hex = "0123456789ABCDEF";
  std::string out = "\"";
  for (unsigned char byte : text) {
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += static_cast<char>(byte);
    } else if (byte >= 0x20 && byte < 0x7F) {
      out += static_cast<char>(byte);
    } else {
      out += '\\';
      out += hex[byte >> 4];
      out += hex[byte & 15];
    }
  }
  return out + "\"";
}

std::string torch_export::irInts(const std::vector<int64_t> &values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i)
    out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::string torch_export::irLayout(const Layout &layout) {
  return "<offset = " + std::to_string(layout.offset) +
         ", shape = " + irInts(layout.sizes) +
         ", stride = " + irInts(layout.strides) + ">";
}

std::string torch_export::irTensorType(const std::vector<int64_t> &sizes,
                                       const std::string &element) {
  std::string out = "tensor<";
  for (int64_t size : sizes)
    out += std::to_string(size) + "x";
  return out + element + ">";
}
