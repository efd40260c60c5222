//===- GeometryTest.cpp - torch view rules on strided layouts -------------===//
//
// Unit tests of Geometry.h: each view rule against the shape and strides
// torch gives, and applyView's split between what torch views and what it
// would have to copy.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <limits>

using namespace mlir;
using namespace mlir::loadplan;

namespace {

using Ints = SmallVector<int64_t>;

Strided layout(int64_t offset, Ints shape, Ints stride) {
  Strided s;
  s.offset = offset;
  s.shape = std::move(shape);
  s.stride = std::move(stride);
  return s;
}

/// Expects `s` to be `offset`, `shape`, `stride`.
void expectLayout(const Strided &s, int64_t offset, Ints shape, Ints stride) {
  EXPECT_EQ(s.offset, offset);
  EXPECT_EQ(s.shape, shape);
  EXPECT_EQ(s.stride, stride);
}

TEST(Geometry, ContiguousStrides) {
  EXPECT_EQ(contiguousStrides({4, 6}), (Ints{6, 1}));
  EXPECT_EQ(contiguousStrides({2, 3, 4}), (Ints{12, 4, 1}));
  EXPECT_EQ(contiguousStrides({}), Ints{});
  // torch gives a dim after an empty one the stride of a size-1 dim.
  EXPECT_EQ(contiguousStrides({2, 0, 3}), (Ints{3, 3, 1}));
  EXPECT_EQ(numElements({}), 1);
  EXPECT_EQ(numElements({2, 0, 3}), 0);
  EXPECT_EQ(numElements({2, 3, 4}), 24);
}

TEST(Geometry, IsContiguous) {
  EXPECT_TRUE(Strided::contiguous({4, 6}).isContiguous());
  EXPECT_FALSE(layout(0, {6, 4}, {1, 6}).isContiguous());
  // Strides of size-1 dims do not matter.
  EXPECT_TRUE(layout(3, {1, 6}, {100, 1}).isContiguous());
  EXPECT_FALSE(layout(0, {4, 3}, {6, 1}).isContiguous());
}

TEST(Geometry, WrapDim) {
  std::string why;
  EXPECT_EQ(*wrapDim(-1, 3, why), 2);
  EXPECT_EQ(*wrapDim(0, 3, why), 0);
  EXPECT_TRUE(failed(wrapDim(3, 3, why)));
  EXPECT_EQ(why, "dim 3 is out of range for a tensor of 3 dims");
  EXPECT_TRUE(failed(wrapDim(-4, 3, why)));
  // A 0-d tensor takes dims 0 and -1.
  EXPECT_EQ(*wrapDim(-1, 0, why), 0);
  EXPECT_TRUE(failed(wrapDim(1, 0, why)));
}

TEST(Geometry, Slice) {
  std::string why;
  Strided s = Strided::contiguous({8, 6});
  ASSERT_TRUE(succeeded(applySlice(s, 0, 2, 6, 1, why)));
  expectLayout(s, 12, {4, 6}, {6, 1});
  // narrow of a narrow.
  ASSERT_TRUE(succeeded(applySlice(s, 0, 1, 3, 1, why)));
  expectLayout(s, 18, {2, 6}, {6, 1});
  ASSERT_TRUE(succeeded(applySlice(s, 1, 1, 6, 2, why)));
  expectLayout(s, 19, {2, 3}, {6, 2});
}

TEST(Geometry, SliceClampsLikeTorch) {
  std::string why;
  // A full slice, as x[:] arrives: end INT64_MAX.
  Strided s = Strided::contiguous({8});
  ASSERT_TRUE(succeeded(applySlice(
      s, 0, 0, std::numeric_limits<int64_t>::max(), 1, why)));
  expectLayout(s, 0, {8}, {1});
  // Negative ends count from the end; both ends clamp to the dim.
  s = Strided::contiguous({8});
  ASSERT_TRUE(succeeded(applySlice(s, -1, -3, -1, 1, why)));
  expectLayout(s, 5, {2}, {1});
  s = Strided::contiguous({8});
  ASSERT_TRUE(succeeded(applySlice(s, 0, -100, 100, 3, why)));
  expectLayout(s, 0, {3}, {3});
  // An end before the start is an empty slice at the start.
  s = Strided::contiguous({8});
  ASSERT_TRUE(succeeded(applySlice(s, 0, 6, 2, 1, why)));
  EXPECT_EQ(s.offset, 6);
  EXPECT_EQ(s.shape, Ints{0});
  // A start past the end clamps to the end.
  s = Strided::contiguous({8});
  ASSERT_TRUE(succeeded(applySlice(s, 0, 20, 30, 1, why)));
  EXPECT_EQ(s.offset, 8);
  EXPECT_EQ(s.shape, Ints{0});
}

TEST(Geometry, SliceErrors) {
  std::string why;
  Strided s = Strided::contiguous({8});
  EXPECT_TRUE(failed(applySlice(s, 0, 0, 8, 0, why)));
  EXPECT_EQ(why, "slice step must be positive, got 0");
  EXPECT_TRUE(failed(applySlice(s, 1, 0, 8, 1, why)));
  Strided scalar = Strided::contiguous({});
  EXPECT_TRUE(failed(applySlice(scalar, 0, 0, 1, 1, why)));
  EXPECT_EQ(why, "cannot slice a 0-d tensor");
}

TEST(Geometry, Select) {
  std::string why;
  Strided s = Strided::contiguous({4, 3, 2});
  ASSERT_TRUE(succeeded(applySelect(s, 1, -1, why)));
  expectLayout(s, 4, {4, 2}, {6, 1});
  ASSERT_TRUE(succeeded(applySelect(s, 0, 3, why)));
  expectLayout(s, 22, {2}, {1});
  ASSERT_TRUE(succeeded(applySelect(s, 0, 1, why)));
  expectLayout(s, 23, {}, {});
  EXPECT_TRUE(failed(applySelect(s, 0, 0, why)));
  EXPECT_EQ(why, "cannot select from a 0-d tensor");
  s = Strided::contiguous({4});
  EXPECT_TRUE(failed(applySelect(s, 0, 4, why)));
  EXPECT_EQ(why, "index 4 is out of range for dim 0 of size 4");
  EXPECT_TRUE(failed(applySelect(s, 0, -5, why)));
}

TEST(Geometry, TransposeAndPermute) {
  std::string why;
  Strided s = Strided::contiguous({4, 6});
  ASSERT_TRUE(succeeded(applyTranspose(s, 0, -1, why)));
  expectLayout(s, 0, {6, 4}, {1, 6});
  s = Strided::contiguous({2, 3, 4});
  ASSERT_TRUE(succeeded(applyPermute(s, {0, 2, 1}, why)));
  expectLayout(s, 0, {2, 4, 3}, {12, 1, 4});
  ASSERT_TRUE(succeeded(applyPermute(s, {-1, 0, 1}, why)));
  expectLayout(s, 0, {3, 2, 4}, {4, 12, 1});
  EXPECT_TRUE(failed(applyPermute(s, {0, 0, 1}, why)));
  EXPECT_EQ(why, "permute repeats dim 0");
  EXPECT_TRUE(failed(applyPermute(s, {0, 1}, why)));
  EXPECT_EQ(why, "permute needs 3 dims, got 2");
  EXPECT_TRUE(failed(applyTranspose(s, 0, 3, why)));
  // t() of a 0-d tensor is the tensor.
  Strided scalar = Strided::contiguous({});
  EXPECT_TRUE(succeeded(applyTranspose(scalar, 0, -1, why)));
  EXPECT_TRUE(scalar.shape.empty());
}

TEST(Geometry, Expand) {
  std::string why;
  Strided s = Strided::contiguous({1, 8});
  ASSERT_TRUE(succeeded(applyExpand(s, {3, 4, 8}, why)));
  EXPECT_EQ(s.shape, (Ints{3, 4, 8}));
  // Expanded and new dims repeat elements: stride 0.
  EXPECT_EQ(s.stride[0], 0);
  EXPECT_EQ(s.stride[1], 0);
  EXPECT_EQ(s.stride[2], 1);
  s = Strided::contiguous({2, 1});
  EXPECT_TRUE(failed(applyExpand(s, {3, 4}, why)));
  EXPECT_EQ(why, "expand cannot change dim 0 of size 2 to 3 (only dims of "
                 "size 1 expand)");
  EXPECT_TRUE(failed(applyExpand(s, {4}, why)));
  EXPECT_EQ(why, "expand to 1 dims cannot drop dims of a tensor of 2 dims");
}

TEST(Geometry, UnsqueezeAndSqueeze) {
  std::string why;
  Strided s = layout(8, {8}, {1});
  ASSERT_TRUE(succeeded(applyUnsqueeze(s, 0, why)));
  // torch: the new dim's stride is size times stride of the dim it precedes.
  expectLayout(s, 8, {1, 8}, {8, 1});
  ASSERT_TRUE(succeeded(applyUnsqueeze(s, -1, why)));
  expectLayout(s, 8, {1, 8, 1}, {8, 1, 1});
  // Listed dims that are not size 1 stay, as in torch.
  ASSERT_TRUE(succeeded(applySqueeze(s, {1, 2}, why)));
  expectLayout(s, 8, {1, 8}, {8, 1});
  ASSERT_TRUE(succeeded(applySqueeze(s, {}, why)));
  expectLayout(s, 8, {8}, {1});
  EXPECT_TRUE(failed(applyUnsqueeze(s, 3, why)));
  EXPECT_TRUE(failed(applySqueeze(s, {1}, why)));
  Strided scalar = Strided::contiguous({});
  ASSERT_TRUE(succeeded(applyUnsqueeze(scalar, -1, why)));
  expectLayout(scalar, 0, {1}, {1});
}

TEST(Geometry, FlattenAndUnflattenShapes) {
  std::string why;
  EXPECT_EQ(*flattenShape({4, 6, 2}, 0, 1, why), (Ints{24, 2}));
  EXPECT_EQ(*flattenShape({4, 6, 2}, 1, -1, why), (Ints{4, 12}));
  EXPECT_EQ(*flattenShape({4, 6, 2}, 1, 1, why), (Ints{4, 6, 2}));
  // flatten of a 0-d tensor is one element.
  EXPECT_EQ(*flattenShape({}, 0, -1, why), Ints{1});
  EXPECT_TRUE(failed(flattenShape({4, 6, 2}, 2, 1, why)));
  EXPECT_EQ(why, "flatten start_dim 2 comes after end_dim 1");

  EXPECT_TRUE(succeeded(checkUnflatten({24, 2}, {4, 6, 2}, 0, why)));
  EXPECT_TRUE(succeeded(checkUnflatten({24, 2}, {24, 1, 2}, -2, why)));
  EXPECT_TRUE(failed(checkUnflatten({24, 2}, {4, 5, 2}, 0, why)));
  EXPECT_EQ(why, "unflatten of dim 0 (size 24) must split it into dims whose "
                 "product is its size");
  EXPECT_TRUE(failed(checkUnflatten({24, 2}, {24, 2, 1}, 0, why)));
  EXPECT_TRUE(failed(checkUnflatten({}, {1}, 0, why)));
}

TEST(Geometry, ViewOfContiguous) {
  std::string why;
  Strided s = layout(6, {4, 6}, {6, 1});
  ASSERT_TRUE(succeeded(applyView(s, {2, 12}, why)));
  expectLayout(s, 6, {2, 12}, {12, 1});
  ASSERT_TRUE(succeeded(applyView(s, {24}, why)));
  expectLayout(s, 6, {24}, {1});
  ASSERT_TRUE(succeeded(applyView(s, {2, 1, 3, 4}, why)));
  EXPECT_EQ(s.shape, (Ints{2, 1, 3, 4}));
  EXPECT_EQ(s.stride[0], 12);
  EXPECT_EQ(s.stride[2], 4);
  EXPECT_EQ(s.stride[3], 1);
}

TEST(Geometry, ViewOfNonContiguous) {
  std::string why;
  bool notViewable = true;
  // Splitting a dim of a transposed tensor is a view.
  Strided s = layout(0, {6, 4}, {1, 6});
  ASSERT_TRUE(succeeded(applyView(s, {2, 3, 4}, why, &notViewable)));
  EXPECT_FALSE(notViewable);
  expectLayout(s, 0, {2, 3, 4}, {3, 1, 6});
  // Merging the rows of a column slice is not: their elements are not
  // equally spaced.
  s = layout(0, {4, 3}, {6, 1});
  EXPECT_TRUE(failed(applyView(s, {12}, why, &notViewable)));
  EXPECT_TRUE(notViewable);
  EXPECT_EQ(why, "the view's shape is not compatible with the input's strides "
                 "(it would copy)");
  // Merging dims that are contiguous with each other is, even inside a
  // non-contiguous tensor.
  s = layout(3, {2, 4, 3}, {24, 3, 1});
  ASSERT_TRUE(succeeded(applyView(s, {2, 12}, why, &notViewable)));
  expectLayout(s, 3, {2, 12}, {24, 1});
  // A transposed tensor cannot be flattened.
  s = layout(0, {6, 4}, {1, 6});
  EXPECT_TRUE(failed(applyView(s, {24}, why, &notViewable)));
  EXPECT_TRUE(notViewable);
  // Size-1 dims with any stride do not stop a view.
  s = layout(0, {2, 1, 3}, {3, 100, 1});
  ASSERT_TRUE(succeeded(applyView(s, {6}, why, &notViewable)));
  expectLayout(s, 0, {6}, {1});
}

TEST(Geometry, ViewErrorsAndEdges) {
  std::string why;
  bool notViewable = true;
  Strided s = Strided::contiguous({4, 6});
  EXPECT_TRUE(failed(applyView(s, {5, 5}, why, &notViewable)));
  // A wrong element count is not a "would copy" case.
  EXPECT_FALSE(notViewable);
  EXPECT_EQ(why, "cannot view 24 elements as 25");
  // A 0-d tensor views as any shape of one element, and back.
  s = layout(5, {}, {});
  ASSERT_TRUE(succeeded(applyView(s, {1, 1}, why)));
  expectLayout(s, 5, {1, 1}, {1, 1});
  ASSERT_TRUE(succeeded(applyView(s, {}, why)));
  expectLayout(s, 5, {}, {});
  // An empty tensor views as any empty shape.
  s = layout(0, {0, 4}, {4, 1});
  ASSERT_TRUE(succeeded(applyView(s, {2, 0}, why)));
  EXPECT_EQ(s.shape, (Ints{2, 0}));
}

TEST(Geometry, DtypeNamesAndSizes) {
  MLIRContext ctx;
  Builder b(&ctx);
  EXPECT_EQ(getItemSize(b.getBF16Type()), 2);
  EXPECT_EQ(getItemSize(b.getF32Type()), 4);
  EXPECT_EQ(getItemSize(b.getType<Float8E4M3FNType>()), 1);
  EXPECT_EQ(getItemSize(b.getI1Type()), 1);
  EXPECT_EQ(getItemSize(ComplexType::get(b.getF32Type())), 8);
  EXPECT_EQ(getItemSize(b.getIndexType()), 0);
  EXPECT_EQ(getDtypeName(b.getBF16Type()), "bfloat16");
  EXPECT_EQ(getDtypeName(b.getType<Float8E4M3FNType>()), "float8_e4m3fn");
  EXPECT_EQ(getDtypeName(b.getI1Type()), "bool");
  EXPECT_EQ(getDtypeName(b.getIntegerType(8, /*isSigned=*/false)), "uint8");
  EXPECT_EQ(getDtypeName(b.getI32Type()), "int32");
}

} // namespace
