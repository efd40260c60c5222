//===- Copies.cpp - The copies of a bound plan -------------------*- C++ -*-===//

#include "Copies.h"
#include "Status.h"
#include "loadplan/transform.h"

#include <algorithm>

using namespace loadplan;

int64_t loadplan::mergeDims(std::vector<ByteDim> &dims, int64_t itemSize,
                            int64_t srcItemSize) {
  if (!srcItemSize)
    srcItemSize = itemSize;
  size_t kept = 0;
  for (const ByteDim &d : dims) {
    if (d.size == 0) {
      dims.clear();
      return 0;
    }
    if (d.size > 1)
      dims[kept++] = d;
  }
  dims.resize(kept);
  // Destination order makes the innermost loop walk the destination
  // sequentially, which is what caches and write combining favour.
  std::stable_sort(dims.begin(), dims.end(), [](ByteDim a, ByteDim b) {
    return a.dstStride > b.dstStride;
  });
  size_t n = 0;
  for (const ByteDim &d : dims) {
    if (n && dims[n - 1].srcStride == d.srcStride * d.size &&
        dims[n - 1].dstStride == d.dstStride * d.size)
      dims[n - 1] = {dims[n - 1].size * d.size, d.srcStride, d.dstStride};
    else
      dims[n++] = d;
  }
  dims.resize(n);
  int64_t run = itemSize;
  if (!dims.empty() && dims.back().srcStride == srcItemSize &&
      dims.back().dstStride == itemSize) {
    run *= dims.back().size;
    dims.pop_back();
  }
  return run;
}

int64_t Copy::granule() const {
  if (transforms())
    return loadplan_transform::atomOf(transform).words * itemSize;
  return converts() ? itemSize : 1;
}

/// The copy of transforming write `w` of entry `ei`, whose box starts at
/// `srcOffset` in a source of strides `srcStrides` (elements of itemSize
/// bytes) and whose region starts at `dst`; appends its dims to `allDims`.
static Copy transformingCopy(const Plan &plan, uint32_t ei, const Write &w,
                             int64_t srcOffset,
                             const std::vector<int64_t> &srcStrides,
                             int64_t itemSize, uint8_t *dst, uint32_t firstDim,
                             std::vector<ByteDim> &allDims) {
  const Entry &e = plan.entries[ei];
  // The region's dims in the output's order; merged where the destination
  // is contiguous (the order is the output's, so never sorted).
  std::vector<ByteDim> dims;
  for (size_t k = 0; k < w.shape.size(); ++k) {
    if (w.shape[k] == 1)
      continue;
    ByteDim d{w.shape[k], 0, w.stride[k] * itemSize};
    if (!dims.empty() && dims.back().dstStride == d.dstStride * d.size)
      dims.back() = {dims.back().size * d.size, 0, d.dstStride};
    else
      dims.push_back(d);
  }
  Copy c;
  c.entry = ei;
  c.box = plan.firstBox[ei] + w.box;
  c.srcOffset = srcOffset;
  c.dst = dst;
  c.run = itemSize;
  c.rows = e.boxes[w.box].volume();
  c.firstDim = firstDim;
  c.numDims = static_cast<uint32_t>(dims.size());
  c.itemSize = static_cast<uint32_t>(itemSize);
  c.srcItemSize = static_cast<uint32_t>(itemSize);
  c.transform = w.transform;
  c.srcRowStride = srcStrides[0] * itemSize;
  c.srcColStride = srcStrides[1] * itemSize;
  c.atomRows =
      e.boxes[w.box].extent(0) / loadplan_transform::atomOf(w.transform).rows;
  allDims.insert(allDims.end(), dims.begin(), dims.end());
  return c;
}

Copies loadplan::buildCopies(const Plan &plan, SourceForm form,
                             const std::vector<uint8_t *> &storageBases) {
  Copies out;
  out.entryBegin.assign(plan.entries.size() + 1, 0);
  std::vector<ByteDim> dims;
  std::vector<int64_t> extents, srcStrides;
  for (uint32_t ei = 0; ei < plan.entries.size(); ++ei) {
    const Entry &e = plan.entries[ei];
    out.entryBegin[ei] = static_cast<uint32_t>(out.copies.size());
    if (e.kind != LOADPLAN_KIND_DIRECT)
      continue;
    int64_t itemSize = loadplan_dtype_size(e.dtype);
    std::vector<int64_t> tensorStrides = contiguousStrides(e.shape);
    for (const Write &w : e.writes) {
      const Box &box = e.boxes[w.box];
      if (box.volume() == 0)
        continue;
      int64_t dstItemSize = loadplan_dtype_size(writtenDtype(e, w));
      extents.resize(e.rank());
      for (uint32_t k = 0; k < e.rank(); ++k)
        extents[k] = box.extent(k);
      int64_t srcOffset = 0;
      if (form == SourceForm::Tensor) {
        srcStrides = tensorStrides;
        for (uint32_t k = 0; k < e.rank(); ++k)
          srcOffset += box.lo[k] * tensorStrides[k] * itemSize;
      } else {
        srcStrides = contiguousStrides(extents);
      }
      const Target &t = plan.targets[w.target];
      if (w.transform) {
        out.copies.push_back(transformingCopy(
            plan, ei, w, srcOffset, srcStrides, itemSize,
            storageBases[t.storage] + t.byteOffset + w.offset * itemSize,
            static_cast<uint32_t>(out.dims.size()), out.dims));
        continue;
      }
      // The region splits each box dim into consecutive dims (the parser
      // checked), innermost last: walk both from the inside.
      dims.clear();
      size_t j = w.shape.size();
      for (size_t k = e.rank(); k-- > 0;) {
        int64_t acc = 1;
        while (acc < extents[k]) {
          do {
            if (j == 0)
              fail(LOADPLAN_STATUS_INTERNAL, "region of ", quote(e.name),
                   " is not a split of its box");
            --j;
          } while (w.shape[j] == 1);
          dims.push_back({w.shape[j], srcStrides[k] * acc * itemSize,
                          w.stride[j] * dstItemSize});
          acc *= w.shape[j];
        }
      }
      Copy c;
      c.entry = ei;
      c.box = plan.firstBox[ei] + w.box;
      c.srcOffset = srcOffset;
      c.dst = storageBases[t.storage] + t.byteOffset + w.offset * dstItemSize;
      c.run = mergeDims(dims, dstItemSize, itemSize);
      c.rows = 1;
      for (const ByteDim &d : dims)
        c.rows *= d.size;
      c.firstDim = static_cast<uint32_t>(out.dims.size());
      c.numDims = static_cast<uint32_t>(dims.size());
      c.itemSize = static_cast<uint32_t>(dstItemSize);
      c.srcItemSize = static_cast<uint32_t>(itemSize);
      if (w.convertTo) {
        c.convertFrom = e.dtype;
        c.convertTo = w.convertTo;
      }
      out.dims.insert(out.dims.end(), dims.begin(), dims.end());
      out.copies.push_back(c);
    }
  }
  out.entryBegin.back() = static_cast<uint32_t>(out.copies.size());
  return out;
}
