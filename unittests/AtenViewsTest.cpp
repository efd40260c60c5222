//===- AtenViewsTest.cpp - The aten view table's rules -------------------===//
//
// Unit tests of AtenViews.h: each special case both front ends rely on,
// lowered from arguments given by name as an exported node gives them.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Records/AtenViews.h"

#include "gtest/gtest.h"

#include <map>
#include <string>

using namespace mlir::loadplan;

namespace {

constexpr uint32_t kBf16 = 8, kF32 = 9;

/// Arguments by name; an absent name is left out.
class Args final : public ViewArgs {
public:
  Args() = default;
  explicit Args(std::map<std::string, std::vector<int64_t>> ints)
      : ints(std::move(ints)) {}

  std::optional<int64_t> getInt(const AtenArg &arg) const override {
    auto it = ints.find(std::string(arg.name));
    if (it == ints.end())
      return std::nullopt;
    return it->second.at(0);
  }
  std::optional<std::vector<int64_t>>
  getInts(const AtenArg &arg) const override {
    auto it = ints.find(std::string(arg.name));
    if (it == ints.end())
      return std::nullopt;
    return it->second;
  }

private:
  std::map<std::string, std::vector<int64_t>> ints;
};

/// Arguments given by name: {{"dim", {0}}, {"dims", {1, 0}}}.
Args named(
    std::initializer_list<std::pair<const std::string, std::vector<int64_t>>>
        ints) {
  return Args(std::map<std::string, std::vector<int64_t>>(ints));
}

ViewTensor tensor(std::vector<int64_t> sizes, uint32_t dtype = kBf16) {
  ViewTensor t;
  t.sizes = std::move(sizes);
  t.dtype = dtype;
  return t;
}

/// The records of `packet` on `src` giving `outs`; fails the test on an
/// error.
std::vector<ViewRecord> lower(std::string_view packet, ViewTensor src,
                              std::vector<ViewTensor> outs,
                              const Args &args = {}) {
  const AtenView *view = findAtenView(packet);
  EXPECT_NE(view, nullptr) << packet;
  std::vector<ViewRecord> records;
  std::string error;
  EXPECT_TRUE(lowerAtenView(*view, src, outs, args, records, error)) << error;
  return records;
}

/// The error lowering `packet` gives.
std::string error(std::string_view packet, ViewTensor src,
                  std::vector<ViewTensor> outs, const Args &args = {}) {
  std::vector<ViewRecord> records;
  std::string error;
  EXPECT_FALSE(lowerAtenView(*findAtenView(packet), src, outs, args, records,
                             error));
  EXPECT_TRUE(records.empty());
  return error;
}

void expectOne(const std::vector<ViewRecord> &records, RecordOp op,
               std::vector<int64_t> ints = {}) {
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].op, op);
  EXPECT_EQ(records[0].ints, ints);
}

TEST(AtenViewsTest, FindsOpsByPacket) {
  EXPECT_EQ(findAtenView("aten.slice")->rule, AtenRule::Slice);
  EXPECT_EQ(findAtenView("aten.swapdims")->rule, AtenRule::Transpose);
  EXPECT_EQ(findAtenView("aten.zeros"), nullptr);
  EXPECT_EQ(findAtenView("aten.slice_scatter"), nullptr);
}

TEST(AtenViewsTest, SliceTakesTorchDefaults) {
  expectOne(lower("aten.slice", tensor({4, 6}), {tensor({4, 6})}),
            RecordOp::slice, {0, 0, kInt64Max, 1});
  expectOne(lower("aten.slice", tensor({4, 6}), {tensor({4, 2})},
                  named({{"dim", {-1}}, {"start", {-2}}, {"step", {2}}})),
            RecordOp::slice, {1, -2, kInt64Max, 2});
}

TEST(AtenViewsTest, NarrowCountsANegativeStartBack) {
  expectOne(lower("aten.narrow", tensor({3, 6}), {tensor({3, 4})},
                  named({{"dim", {1}}, {"start", {-4}}, {"length", {4}}})),
            RecordOp::slice, {1, 2, 6, 1});
}

TEST(AtenViewsTest, TransposesBelowRankTwoAreAliases) {
  Args dims = named({{"dim0", {0}}, {"dim1", {-1}}});
  expectOne(lower("aten.transpose", tensor({4}), {tensor({4})}, dims),
            RecordOp::alias);
  expectOne(lower("aten.transpose", tensor({4, 6}), {tensor({6, 4})}, dims),
            RecordOp::transpose, {0, 1});
  expectOne(lower("aten.swapaxes", tensor({2, 3, 4}), {tensor({4, 3, 2})},
                  named({{"axis0", {2}}, {"axis1", {0}}})),
            RecordOp::transpose, {2, 0});
  expectOne(lower("aten.t", tensor({4, 6}), {tensor({6, 4})}),
            RecordOp::transpose, {0, 1});
  expectOne(lower("aten.t", tensor({4}), {tensor({4})}), RecordOp::alias);
}

TEST(AtenViewsTest, SqueezeRemovesOnlyListedDimsOfSizeOne) {
  ViewTensor src = tensor({1, 4, 1});
  expectOne(lower("aten.squeeze", src, {tensor({4})}), RecordOp::squeeze,
            {0, 2});
  expectOne(lower("aten.squeeze", src, {tensor({1, 4})},
                  named({{"dim", {-1, 1}}})),
            RecordOp::squeeze, {2});
  expectOne(lower("aten.squeeze", src, {src}, named({{"dim", {1}}})),
            RecordOp::alias);
  expectOne(lower("aten.squeeze", tensor({}), {tensor({})}), RecordOp::alias);
}

TEST(AtenViewsTest, ExpandAndFlattenThatChangeNothingAreAliases) {
  expectOne(lower("aten.expand", tensor({1, 4}), {tensor({1, 4})}),
            RecordOp::alias);
  expectOne(lower("aten.expand_as", tensor({1, 4}), {tensor({3, 4})}),
            RecordOp::expand);
  expectOne(lower("aten.flatten", tensor({}), {tensor({1})}), RecordOp::view);
  expectOne(lower("aten.flatten", tensor({4}), {tensor({4})}),
            RecordOp::alias);
  expectOne(lower("aten.flatten", tensor({2, 3, 4}), {tensor({2, 12})},
                  named({{"start_dim", {1}}})),
            RecordOp::flatten, {1, 2});
}

TEST(AtenViewsTest, SplitsAreSlicesAndUnbindsSelects) {
  std::vector<ViewRecord> split =
      lower("aten.split_with_sizes", tensor({2, 5}),
            {tensor({2, 1}), tensor({2, 4})}, named({{"dim", {-1}}}));
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0].ints, (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(split[1].ints, (std::vector<int64_t>{1, 1, 5, 1}));
  std::vector<ViewRecord> unbind =
      lower("aten.unbind", tensor({3, 2}),
            {tensor({2}), tensor({2}), tensor({2})});
  ASSERT_EQ(unbind.size(), 3u);
  EXPECT_EQ(unbind[2].op, RecordOp::select);
  EXPECT_EQ(unbind[2].ints, (std::vector<int64_t>{0, 2}));
}

TEST(AtenViewsTest, OtherViewsAreTheLayoutTorchComputed) {
  ViewTensor out = tensor({3});
  out.offset = 1;
  out.strides = {5};
  expectOne(lower("aten.diagonal", tensor({4, 4}), {out}),
            RecordOp::as_strided, {1, 5});
  EXPECT_TRUE(readsLayouts(findAtenView("aten.unfold")->rule));
  EXPECT_FALSE(readsLayouts(findAtenView("aten.view")->rule));
}

TEST(AtenViewsTest, CopiesKeepOrConvertTheDtype) {
  expectOne(lower("aten._to_copy", tensor({4}), {tensor({4})}),
            RecordOp::clone);
  expectOne(lower("aten._to_copy", tensor({4}), {tensor({4}, kF32)}),
            RecordOp::convert);
  // A dtype the plan lacks: no record, the front end's apply.
  EXPECT_TRUE(lower("aten.clone", tensor({4}), {tensor({4}, 0)}).empty());
}

TEST(AtenViewsTest, AViewIntoAnotherDtypeIsNoLayout) {
  EXPECT_TRUE(lower("aten.view", tensor({4}), {tensor({2}, kF32)}).empty());
  // An op of one output that gave two is none of the table's either.
  EXPECT_TRUE(
      lower("aten.alias", tensor({4}), {tensor({4}), tensor({4})}).empty());
}

TEST(AtenViewsTest, CallsThatCannotBeLoweredSayWhy) {
  EXPECT_EQ(error("aten.select", tensor({4}), {tensor({})},
                  named({{"dim", {0}}})),
            "'aten.select' has no index");
  EXPECT_EQ(error("aten.select", tensor({4}), {tensor({})},
                  named({{"dim", {1}}, {"index", {0}}})),
            "'aten.select' has a dim 1 out of range for rank 1");
  EXPECT_EQ(error("aten.slice", tensor({}), {tensor({})}),
            "'aten.slice' takes a dim of a 0-dim tensor");
  EXPECT_EQ(error("aten.split", tensor({4, 2}), {tensor({4})}),
            "'aten.split' has an output of another rank");
}

} // namespace
