//===- TensorMeta.cpp - Tensor metadata of an exported program --*- C++ -*-===//
//
// Reads the schema's TensorMeta into the importer's Meta, and maps the
// schema's dtypes (torch's ScalarType codes) to the plan's.
//
//===----------------------------------------------------------------------===//

#include "TensorMeta.h"

#include "ImportError.h"

using namespace mlir::loadplan;
using namespace mlir::loadplan::torch_export;

int64_t torch_export::mulAdd(int64_t a, int64_t b, int64_t c) {
  int64_t product, sum;
  if (__builtin_mul_overflow(a, b, &product) ||
      __builtin_add_overflow(product, c, &sum))
    fail("the program has sizes or strides out of range");
  return sum;
}

loadplan_dtype_t torch_export::planDtype(schema::ScalarType dtype) {
  using S = schema::ScalarType;
  switch (dtype) {
  case S::BOOL:
    return LOADPLAN_DTYPE_BOOL;
  case S::BYTE:
    return LOADPLAN_DTYPE_UINT8;
  case S::CHAR:
    return LOADPLAN_DTYPE_INT8;
  case S::SHORT:
    return LOADPLAN_DTYPE_INT16;
  case S::INT:
    return LOADPLAN_DTYPE_INT32;
  case S::LONG:
    return LOADPLAN_DTYPE_INT64;
  case S::UINT16:
    return LOADPLAN_DTYPE_UINT16;
  case S::UINT32:
    return LOADPLAN_DTYPE_UINT32;
  case S::UINT64:
    return LOADPLAN_DTYPE_UINT64;
  case S::HALF:
    return LOADPLAN_DTYPE_FLOAT16;
  case S::BFLOAT16:
    return LOADPLAN_DTYPE_BFLOAT16;
  case S::FLOAT:
    return LOADPLAN_DTYPE_FLOAT32;
  case S::DOUBLE:
    return LOADPLAN_DTYPE_FLOAT64;
  case S::FLOAT8E4M3FN:
    return LOADPLAN_DTYPE_FLOAT8_E4M3FN;
  case S::FLOAT8E5M2:
    return LOADPLAN_DTYPE_FLOAT8_E5M2;
  case S::FLOAT8E4M3FNUZ:
    return LOADPLAN_DTYPE_FLOAT8_E4M3FNUZ;
  case S::FLOAT8E5M2FNUZ:
    return LOADPLAN_DTYPE_FLOAT8_E5M2FNUZ;
  case S::FLOAT8E8M0FNU:
    return LOADPLAN_DTYPE_FLOAT8_E8M0FNU;
  case S::COMPLEXFLOAT:
    return LOADPLAN_DTYPE_COMPLEX64;
  case S::COMPLEXDOUBLE:
    return LOADPLAN_DTYPE_COMPLEX128;
  case S::UNKNOWN:
  case S::COMPLEXHALF:
    break; // no plan holds them
  }
  return LOADPLAN_DTYPE_INVALID; // also a code the schema does not define
}

int64_t Layout::numel() const {
  int64_t n = 1;
  for (int64_t size : sizes)
    n = mulAdd(n, size, 0);
  return n;
}

/// A static integer of the graph (sizes, strides, arguments).
static int64_t staticInt(const schema::SymInt &value, const char *what) {
  if (value.tag() != schema::SymInt::Tag::AS_INT)
    fail(std::string("the program has a symbolic ") + what +
         " (export the loader with static shapes)");
  return value.get_as_int();
}

Meta torch_export::toMeta(const schema::TensorMeta &meta) {
  Meta out;
  out.dtype = planDtype(meta.get_dtype());
  for (const schema::SymInt &size : meta.get_sizes())
    out.layout.sizes.push_back(staticInt(size, "size"));
  for (const schema::SymInt &stride : meta.get_strides())
    out.layout.strides.push_back(staticInt(stride, "stride"));
  out.layout.offset = staticInt(meta.get_storage_offset(), "storage offset");
  if (out.layout.sizes.size() != out.layout.strides.size())
    fail("the program has a tensor whose sizes and strides differ in rank");
  for (int64_t size : out.layout.sizes)
    if (size < 0)
      fail("the program has a tensor with a negative size");
  for (int64_t stride : out.layout.strides)
    if (stride < 0)
      fail("the program has a tensor with a negative stride");
  if (out.layout.offset < 0)
    fail("the program has a tensor with a negative storage offset");
  // Every element index fits in int64_t.
  int64_t last = out.layout.offset;
  for (size_t i = 0; i < out.layout.sizes.size(); ++i)
    if (out.layout.sizes[i] > 0)
      last = mulAdd(out.layout.sizes[i] - 1, out.layout.strides[i], last);
  mulAdd(last + 1 > 0 ? last + 1 : 1, 16, 0); // and so does its byte offset
  return out;
}
