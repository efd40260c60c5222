//===- ByteRuns.cpp - Bytes a strided write covers --------------*- C++ -*-===//

#include "loadplan/Transforms/ByteRuns.h"
#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::loadplan;

void loadplan::appendByteRuns(int64_t byteOffset, ArrayRef<int64_t> shape,
                              ArrayRef<int64_t> stride, int64_t itemSize,
                              int64_t maxRuns, SmallVectorImpl<ByteRun> &out) {
  SmallVector<std::pair<int64_t, int64_t>> dims; // (size, stride)
  for (auto [n, s] : llvm::zip(shape, stride)) {
    if (n == 0)
      return;
    if (n > 1)
      dims.push_back({n, s});
  }
  // Outer dims first; peel the contiguous innermost ones into the run.
  std::sort(dims.begin(), dims.end(),
            [](auto a, auto b) { return a.second > b.second; });
  int64_t run = 1;
  while (!dims.empty() && dims.back().second == run) {
    run *= dims.back().first;
    dims.pop_back();
  }
  int64_t count = 1;
  for (auto [n, s] : dims) {
    count *= n;
    if (count > maxRuns)
      break;
  }
  if (count > maxRuns) {
    int64_t span = run;
    for (auto [n, s] : dims)
      span += (n - 1) * s;
    out.push_back({byteOffset, byteOffset + span * itemSize});
    return;
  }
  SmallVector<int64_t> index(dims.size(), 0);
  while (true) {
    int64_t start = 0;
    for (auto [i, d] : llvm::zip(index, dims))
      start += i * d.second;
    out.push_back({byteOffset + start * itemSize,
                   byteOffset + (start + run) * itemSize});
    int64_t k = static_cast<int64_t>(dims.size()) - 1;
    while (k >= 0 && ++index[k] == dims[k].first)
      index[k--] = 0;
    if (k < 0)
      break;
  }
}

void loadplan::collectStorageWrites(ModuleOp module,
                                    const CheckpointNames &names,
                                    int64_t maxRuns, bool withConstants,
                                    SmallVectorImpl<StorageOp> &storages,
                                    SmallVectorImpl<StorageWrite> &out) {
  SymbolTable symbols(module);
  llvm::DenseMap<StringAttr, unsigned> storageIndex;
  for (auto storage : module.getOps<StorageOp>()) {
    storageIndex[storage.getSymNameAttr()] = storages.size();
    storages.push_back(storage);
  }
  // Each checkpoint's own bytes, once: checkpoint c's are base[begin[c],
  // begin[c + 1]); its members write them moved.
  SmallVector<StorageWrite> base;
  SmallVector<unsigned> begin;
  begin.reserve(names.checkpoints.size() + 1);
  SmallVector<ByteRun> runs;
  auto add = [&](FlatSymbolRefAttr targetRef, int64_t offset,
                 ArrayRef<int64_t> shape, ArrayRef<int64_t> stride,
                 int64_t itemSize) {
    auto target = symbols.lookup<TargetOp>(targetRef.getAttr());
    // An empty write covers no byte, and no verifier bounds its offset.
    if (!target || itemSize == 0 || llvm::is_contained(shape, 0))
      return;
    auto storage = storageIndex.find(target.getStorageAttr().getAttr());
    if (storage == storageIndex.end())
      return;
    runs.clear();
    appendByteRuns(target.getByteOffset() + offset * itemSize, shape, stride,
                   itemSize, maxRuns, runs);
    for (ByteRun r : runs)
      base.push_back({storage->second, r, 0});
  };
  for (CheckpointOp checkpoint : names.checkpoints) {
    begin.push_back(base.size());
    Block &block = checkpoint.getBlock();
    bool stopped = llvm::any_of(block.getOps<FallbackOp>(),
                                [](FallbackOp f) { return f.getStop(); });
    for (Operation &op : block) {
      if (auto w = dyn_cast<WriteOp>(op); w && !stopped) {
        RegionAttr r = w.getRegion();
        add(w.getTargetAttr(), r.getOffset(), r.getShape(), r.getStride(),
            getItemSize(w.getWrittenType()));
      } else if (auto c = dyn_cast<CopyOp>(op); c && !stopped) {
        LayoutAttr l = c.getDest();
        add(c.getTargetAttr(), l.getOffset(), l.getShape(), l.getStride(),
            getItemSize(c.getDtype()));
      } else if (auto k = dyn_cast<ConstantWriteOp>(op); k && withConstants) {
        LayoutAttr l = k.getDest();
        add(k.getTargetAttr(), l.getOffset(), l.getShape(), l.getStride(),
            getItemSize(k.getDtype()));
      }
    }
  }
  begin.push_back(base.size());
  if (!names.hasMembers) {
    // Module order is arrival order; the bytes are all there.
    for (auto [index, n] : llvm::enumerate(names.names))
      for (unsigned k = begin[n.checkpoint]; k < begin[n.checkpoint + 1]; ++k)
        base[k].name = index;
    out.append(base.begin(), base.end());
    return;
  }
  out.reserve(out.size() + base.size());
  for (auto [index, n] : llvm::enumerate(names.names)) {
    // The verifier keeps a member's moved bytes inside the storage.
    int64_t shift = names.op(n).getShiftAt(n.index);
    for (unsigned k = begin[n.checkpoint]; k < begin[n.checkpoint + 1]; ++k)
      out.push_back({base[k].storage,
                     {base[k].run.first + shift, base[k].run.second + shift},
                     static_cast<unsigned>(index)});
  }
}
