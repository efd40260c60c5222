//===- PassPropertyTest.cpp - Byte sweeps and merges against brute force --===//
//
// Property tests of the passes that reason about bytes and writes, on random
// modules: --loadplan-detect-overlaps and --loadplan-check-coverage against a
// byte-by-byte evaluation, and --loadplan-merge-writes keeping exactly the
// element-to-destination map of the writes it merges.
//
//===----------------------------------------------------------------------===//

#include "ViewChain.h"

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Regex.h"

#include "gtest/gtest.h"

#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

using namespace mlir;
using namespace mlir::loadplan;
using namespace loadplan_test;

namespace {

class PassProperty : public ::testing::Test {
protected:
  PassProperty() { ctx.loadDialect<LoadPlanDialect>(); }

  /// Parses `text` and runs `build`'s passes on it; fails the test on a
  /// parse or pass failure.
  OwningOpRef<ModuleOp> run(const std::string &text,
                            function_ref<void(PassManager &)> build) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &ctx);
    EXPECT_TRUE(module) << text;
    if (!module)
      return module;
    PassManager pm(&ctx);
    build(pm);
    EXPECT_TRUE(succeeded(pm.run(*module))) << text;
    return module;
  }

  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }

  /// A random layout of 1 or 2 dims that addresses each element once.
  void randomLayout(int64_t maxOffset, int64_t &offset, Ints &shape,
                    Ints &stride) {
    while (true) {
      shape.clear();
      stride.clear();
      for (int64_t k = 0, rank = pick(1, 2); k < rank; ++k) {
        shape.push_back(pick(1, 4));
        stride.push_back(pick(1, 6));
      }
      offset = pick(0, maxOffset);
      std::vector<int64_t> at = elementsOf(offset, shape, stride);
      if (std::set<int64_t>(at.begin(), at.end()).size() == at.size())
        return;
    }
  }

  /// Starts a module of 1 or 2 storages of 4096 bytes; returns how many.
  int64_t beginModule(std::ostringstream &ir) {
    ir << "module {\n";
    int64_t storages = pick(1, 2);
    for (int64_t s = 0; s < storages; ++s)
      ir << "  loadplan.storage @s" << s << " size 4096\n";
    return storages;
  }

  MLIRContext ctx;
  std::mt19937_64 rng{1129};
};

//===----------------------------------------------------------------------===//
// Overlaps
//===----------------------------------------------------------------------===//

TEST_F(PassProperty, DetectOverlapsMatchesBytes) {
  for (int iter = 0; iter < 300; ++iter) {
    std::ostringstream ir;
    int64_t storages = beginModule(ir);
    struct Target {
      int64_t storage, byteOffset;
    };
    std::vector<Target> targets;
    for (int64_t t = 0, n = pick(1, 3); t < n; ++t) {
      targets.push_back({pick(0, storages - 1), pick(0, 63) * 2});
      ir << "  loadplan.target @t" << t << " module \"m\" tensor \"t" << t
         << "\" storage @s" << targets.back().storage << " byte_offset "
         << targets.back().byteOffset
         << " stride [1] : tensor<1024xbf16>\n";
    }
    // Per name, the (storage, byte) pairs of each of its writes.
    std::vector<std::vector<std::set<std::pair<int64_t, int64_t>>>> names;
    for (int64_t c = 0, n = pick(2, 6); c < n; ++c) {
      ir << "  loadplan.checkpoint \"n" << c
         << "\" : tensor<64xbf16> (%w) {\n";
      names.emplace_back();
      for (int64_t k = 0, writes = pick(0, 3); k < writes; ++k) {
        int64_t t = pick(0, targets.size() - 1), offset;
        Ints shape, stride;
        randomLayout(40, offset, shape, stride);
        ir << "    loadplan.write @t" << t << " box <[0, "
           << numElements(shape) << "]> region <offset = " << offset
           << ", shape = " << str(shape) << ", stride = " << str(stride)
           << ">\n";
        std::set<std::pair<int64_t, int64_t>> bytes;
        for (int64_t at : elementsOf(offset, shape, stride))
          for (int64_t b = 0; b < 2; ++b)
            bytes.insert({targets[t].storage,
                          targets[t].byteOffset + at * 2 + b});
        names.back().push_back(std::move(bytes));
      }
      ir << "  }\n";
    }
    ir << "}\n";

    // Brute force: a name overlaps when one of its writes shares a byte
    // with any other write, its own included.
    std::set<int64_t> expected;
    for (size_t a = 0; a < names.size(); ++a)
      for (size_t wa = 0; wa < names[a].size(); ++wa)
        for (size_t b = a; b < names.size(); ++b)
          for (size_t wb = (a == b ? wa + 1 : 0); wb < names[b].size(); ++wb)
            for (const auto &byte : names[a][wa])
              if (names[b][wb].count(byte)) {
                expected.insert(a);
                expected.insert(b);
                break;
              }

    OwningOpRef<ModuleOp> module = run(
        ir.str(), [](PassManager &pm) { pm.addPass(createDetectOverlaps()); });
    ASSERT_TRUE(module);
    std::set<int64_t> got;
    for (auto [index, checkpoint] :
         llvm::enumerate(module->getOps<CheckpointOp>())) {
      auto fallbacks = checkpoint.getBlock().getOps<FallbackOp>();
      if (fallbacks.empty())
        continue;
      got.insert(index);
      EXPECT_TRUE(StringRef((*fallbacks.begin()).getReason())
                      .starts_with("writes overlap with 'n"));
    }
    ASSERT_EQ(got, expected) << ir.str();
  }
}

//===----------------------------------------------------------------------===//
// Coverage
//===----------------------------------------------------------------------===//

TEST_F(PassProperty, CheckCoverageMatchesBytes) {
  static const char *const types[] = {"", "ui8", "bf16", "", "f32"};
  for (int iter = 0; iter < 300; ++iter) {
    std::ostringstream ir;
    int64_t storages = beginModule(ir);
    struct Target {
      int64_t storage, byteOffset;
      std::set<int64_t> bytes;
    };
    std::vector<Target> targets;
    for (int64_t t = 0, n = pick(1, 3); t < n; ++t) {
      int64_t itemSize = int64_t(1) << pick(0, 2), offset;
      Ints shape, stride;
      randomLayout(40, offset, shape, stride);
      Target target{pick(0, storages - 1), offset * itemSize, {}};
      for (int64_t at : elementsOf(0, shape, stride))
        for (int64_t b = 0; b < itemSize; ++b)
          target.bytes.insert(target.byteOffset + at * itemSize + b);
      ir << "  loadplan.target @t" << t << " module \"m\" tensor \"t" << t
         << "\" storage @s" << target.storage << " byte_offset "
         << target.byteOffset << " stride " << str(stride) << " : tensor<";
      for (int64_t n : shape)
        ir << n << "x";
      ir << types[itemSize] << ">\n";
      targets.push_back(std::move(target));
    }
    // Bytes written, per storage: direct writes (f32 elements) and
    // constant writes (bf16 elements).
    std::map<int64_t, std::set<int64_t>> covered;
    for (int64_t c = 0, n = pick(1, 4); c < n; ++c) {
      ir << "  loadplan.checkpoint \"n" << c
         << "\" : tensor<64xf32> (%w) {\n";
      for (int64_t k = 0, writes = pick(0, 4); k < writes; ++k) {
        const Target &t = targets[pick(0, targets.size() - 1)];
        int64_t index = &t - targets.data(), offset;
        Ints shape, stride;
        randomLayout(30, offset, shape, stride);
        bool constant = pick(0, 1);
        int64_t itemSize = constant ? 2 : 4;
        if (constant)
          ir << "    loadplan.constant_write \"aten.fill_\" @t" << index
             << " <offset = " << offset << ", shape = " << str(shape)
             << ", stride = " << str(stride) << "> as bf16\n";
        else
          ir << "    loadplan.write @t" << index << " box <[0, "
             << numElements(shape) << "]> region <offset = " << offset
             << ", shape = " << str(shape) << ", stride = " << str(stride)
             << ">\n";
        for (int64_t at : elementsOf(offset, shape, stride))
          for (int64_t b = 0; b < itemSize; ++b)
            covered[t.storage].insert(t.byteOffset + at * itemSize + b);
      }
      ir << "  }\n";
    }
    ir << "}\n";

    // Brute force: per target, the bytes missing and the first gap.
    std::map<int64_t, std::string> expected;
    for (auto [index, t] : llvm::enumerate(targets)) {
      std::vector<int64_t> missing;
      for (int64_t b : t.bytes)
        if (!covered[t.storage].count(b))
          missing.push_back(b);
      if (missing.empty())
        continue;
      size_t end = 1;
      while (end < missing.size() && missing[end] == missing[end - 1] + 1)
        ++end;
      expected[index] = std::to_string(missing.size()) + " bytes [" +
                        std::to_string(missing[0]) + ", " +
                        std::to_string(missing[end - 1] + 1) + ")";
    }

    std::map<int64_t, std::string> got;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      if (diag.getSeverity() != DiagnosticSeverity::Remark)
        return failure();
      llvm::Regex re("^target 'm.t([0-9]+)' has ([0-9]+) bytes no name "
                     "writes \\(first gap: bytes (\\[[0-9]+, [0-9]+\\))");
      SmallVector<StringRef> match;
      std::string message = diag.str();
      EXPECT_TRUE(re.match(message, &match)) << message;
      if (match.size() == 4)
        got[std::stoll(match[1].str())] =
            (match[2] + " bytes " + match[3]).str();
      return success();
    });
    OwningOpRef<ModuleOp> module = run(
        ir.str(), [](PassManager &pm) { pm.addPass(createCheckCoverage()); });
    ASSERT_TRUE(module);
    ASSERT_EQ(got, expected) << ir.str();
  }
}

//===----------------------------------------------------------------------===//
// Merges
//===----------------------------------------------------------------------===//

struct PlainWrite {
  int64_t target;
  Ints starts, stops;
  int64_t offset;
  Ints shape, stride;
};

/// Splits `w` at `at` along box dim `dim` (its region has a dim per box dim).
std::pair<PlainWrite, PlainWrite> splitWrite(const PlainWrite &w, int64_t dim,
                                        int64_t at) {
  PlainWrite a = w, b = w;
  a.stops[dim] = at;
  a.shape[dim] = at - w.starts[dim];
  b.starts[dim] = at;
  b.shape[dim] = w.stops[dim] - at;
  b.offset = w.offset + (at - w.starts[dim]) * w.stride[dim];
  return {a, b};
}

/// Each (target, checkpoint element, destination element) the writes make.
std::multiset<std::tuple<int64_t, int64_t, int64_t>>
elementMap(ArrayRef<PlainWrite> writes, ArrayRef<int64_t> ckptShape) {
  std::multiset<std::tuple<int64_t, int64_t, int64_t>> out;
  Ints ckptStride = contiguousStrides(ckptShape);
  for (const PlainWrite &w : writes) {
    Ints boxShape;
    for (auto [start, stop] : llvm::zip(w.starts, w.stops))
      boxShape.push_back(stop - start);
    Ints boxStride = ckptStride;
    int64_t base = 0;
    for (auto [start, s] : llvm::zip(w.starts, ckptStride))
      base += start * s;
    std::vector<int64_t> src = elementsOf(base, boxShape, boxStride);
    std::vector<int64_t> dst = elementsOf(w.offset, w.shape, w.stride);
    EXPECT_EQ(src.size(), dst.size());
    for (auto [s, d] : llvm::zip(src, dst))
      out.insert({w.target, s, d});
  }
  return out;
}

TEST_F(PassProperty, MergeWritesKeepsElements) {
  int fullyMerged = 0;
  for (int iter = 0; iter < 500; ++iter) {
    Ints ckptShape;
    for (int64_t k = 0, rank = pick(1, 3); k < rank; ++k)
      ckptShape.push_back(pick(1, 5));
    int64_t rank = ckptShape.size();
    // One write of a box, in a random dim order inside a padded target.
    PlainWrite base;
    base.target = 0;
    for (int64_t n : ckptShape) {
      int64_t start = pick(0, n - 1);
      base.starts.push_back(start);
      base.stops.push_back(pick(start + 1, n));
      base.shape.push_back(base.stops.back() - start);
    }
    Ints order(rank);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    base.stride.assign(rank, 0);
    int64_t next = 1;
    for (int64_t k = rank - 1; k >= 0; --k) {
      base.stride[order[k]] = next;
      next *= base.shape[order[k]] + pick(0, 1);
    }
    base.offset = pick(0, 8);

    // A loader's loop: pieces along one dim, or a grid along several.
    bool oneDim = pick(0, 1);
    int64_t loopDim = pick(0, rank - 1);
    std::vector<PlainWrite> pieces{base};
    for (int64_t cuts = pick(1, 4); cuts > 0; --cuts) {
      size_t p = pick(0, pieces.size() - 1);
      int64_t dim = oneDim ? loopDim : pick(0, rank - 1);
      if (pieces[p].stops[dim] - pieces[p].starts[dim] < 2)
        continue;
      int64_t at = pick(pieces[p].starts[dim] + 1, pieces[p].stops[dim] - 1);
      auto [a, b] = splitWrite(pieces[p], dim, at);
      pieces[p] = a;
      pieces.push_back(b);
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    // Sometimes a write that must stay apart: the same box elsewhere.
    bool replicated = pick(0, 3) == 0;
    if (replicated) {
      PlainWrite copy = base;
      copy.offset += 1000;
      pieces.push_back(copy);
    }

    std::ostringstream ir;
    ir << "module {\n  loadplan.storage @s size 65536\n"
       << "  loadplan.target @t0 module \"m\" tensor \"t\" storage @s "
          "byte_offset 0 stride [1] : tensor<16384xbf16>\n"
       << "  loadplan.checkpoint \"w\" : tensor<";
    for (int64_t n : ckptShape)
      ir << n << "x";
    ir << "bf16> (%w) {\n";
    for (const PlainWrite &w : pieces) {
      ir << "    loadplan.write @t0 box <";
      for (int64_t k = 0; k < rank; ++k)
        ir << (k ? ", " : "") << "[" << w.starts[k] << ", " << w.stops[k]
           << "]";
      ir << "> region <offset = " << w.offset << ", shape = " << str(w.shape)
         << ", stride = " << str(w.stride) << ">\n";
    }
    ir << "  }\n}\n";

    OwningOpRef<ModuleOp> module = run(ir.str(), [](PassManager &pm) {
      pm.addPass(createMergeWrites());
    });
    ASSERT_TRUE(module);
    std::vector<PlainWrite> merged;
    for (auto checkpoint : module->getOps<CheckpointOp>())
      for (WriteOp w : checkpoint.getBlock().getOps<WriteOp>())
        merged.push_back({0, llvm::to_vector(w.getBox().getStarts()),
                          llvm::to_vector(w.getBox().getStops()),
                          w.getRegion().getOffset(),
                          llvm::to_vector(w.getRegion().getShape()),
                          llvm::to_vector(w.getRegion().getStride())});
    ASSERT_EQ(elementMap(merged, ckptShape), elementMap(pieces, ckptShape))
        << ir.str();
    ASSERT_LE(merged.size(), pieces.size());
    if (oneDim) {
      // A loop along one dim is one write again.
      EXPECT_EQ(merged.size(), replicated ? 2u : 1u) << ir.str();
      ++fullyMerged;
    }
  }
  EXPECT_GT(fullyMerged, 100);
}

} // namespace
