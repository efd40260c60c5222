//===- Geometry.cpp - Boxes, intersections and sub-regions -------*- C++ -*-===//

#include "Geometry.h"

#include <algorithm>
#include <sstream>

using namespace loadplan::transfer;

Box loadplan::transfer::wholeBox(const std::vector<int64_t> &shape) {
  return Box{std::vector<int64_t>(shape.size(), 0), shape};
}

bool loadplan::transfer::intersect(const Box &a, const Box &b, Box &out) {
  out.lo.resize(a.lo.size());
  out.hi.resize(a.lo.size());
  for (size_t k = 0; k < a.lo.size(); ++k) {
    out.lo[k] = std::max(a.lo[k], b.lo[k]);
    out.hi[k] = std::min(a.hi[k], b.hi[k]);
    if (out.lo[k] >= out.hi[k])
      return false;
  }
  return true;
}

bool loadplan::transfer::contains(const Box &outer, const Box &inner) {
  for (size_t k = 0; k < outer.lo.size(); ++k)
    if (inner.lo[k] < outer.lo[k] || inner.hi[k] > outer.hi[k])
      return false;
  return true;
}

bool loadplan::transfer::boxInside(const Box &box,
                                   const std::vector<int64_t> &shape) {
  for (size_t k = 0; k < shape.size(); ++k)
    if (box.lo[k] < 0 || box.lo[k] >= box.hi[k] || box.hi[k] > shape[k])
      return false;
  return true;
}

int64_t loadplan::transfer::offsetIn(const Box &inner, const Box &outer) {
  int64_t offset = 0, stride = 1;
  for (size_t k = outer.lo.size(); k-- > 0;) {
    offset += (inner.lo[k] - outer.lo[k]) * stride;
    stride *= outer.hi[k] - outer.lo[k];
  }
  return offset;
}

bool loadplan::transfer::contiguousIn(const Box &inner, const Box &outer) {
  size_t k = 0;
  while (k < inner.lo.size() && inner.extent(k) == 1)
    ++k;
  for (++k; k < inner.lo.size(); ++k)
    if (inner.lo[k] != outer.lo[k] || inner.hi[k] != outer.hi[k])
      return false;
  return true;
}

bool loadplan::transfer::isContiguousRun(const Region &r) {
  int64_t expected = 1;
  for (size_t k = r.shape.size(); k-- > 0;) {
    if (r.shape[k] == 1)
      continue;
    if (r.stride[k] != expected)
      return false;
    expected *= r.shape[k];
  }
  return true;
}

namespace {

/// A sub-range [a, b) of one box dim and the region dims it becomes.
struct DimPart {
  int64_t a, b;
  int64_t offset;
  std::vector<int64_t> shape, stride;
};

/// Decomposes [a, b) of a dim split into `radix` (outermost first, with
/// element strides `stride`) into ranges that are boxes of the split dims:
/// a partial block at each end and whole blocks between, recursively.
/// `base` is where this block starts in the dim; `prefix*` are the region
/// dims fixed by the outer levels (each of size 1).
void decompose(int64_t a, int64_t b, const int64_t *radix,
               const int64_t *stride, size_t m, int64_t offset, int64_t base,
               std::vector<int64_t> &prefixShape,
               std::vector<int64_t> &prefixStride, std::vector<DimPart> &out) {
  if (m == 0) {
    out.push_back({base + a, base + b, offset, prefixShape, prefixStride});
    return;
  }
  if (m == 1) {
    DimPart p{base + a, base + b, offset + a * stride[0], prefixShape,
              prefixStride};
    p.shape.push_back(b - a);
    p.stride.push_back(stride[0]);
    out.push_back(std::move(p));
    return;
  }
  int64_t inner = 1;
  for (size_t k = 1; k < m; ++k)
    inner *= radix[k];
  int64_t qa = a / inner, ra = a % inner, qb = b / inner, rb = b % inner;
  auto within = [&](int64_t q, int64_t from, int64_t to) {
    prefixShape.push_back(1);
    prefixStride.push_back(stride[0]);
    decompose(from, to, radix + 1, stride + 1, m - 1, offset + q * stride[0],
              base + q * inner, prefixShape, prefixStride, out);
    prefixShape.pop_back();
    prefixStride.pop_back();
  };
  if (qa == qb) {
    within(qa, ra, rb);
    return;
  }
  int64_t first = qa;
  if (ra) {
    within(qa, ra, inner);
    first = qa + 1;
  }
  if (qb > first) {
    DimPart p{base + first * inner, base + qb * inner,
              offset + first * stride[0], prefixShape, prefixStride};
    p.shape.push_back(qb - first);
    p.stride.push_back(stride[0]);
    p.shape.insert(p.shape.end(), radix + 1, radix + m);
    p.stride.insert(p.stride.end(), stride + 1, stride + m);
    out.push_back(std::move(p));
  }
  if (rb)
    within(qb, 0, rb);
}

} // namespace

void loadplan::transfer::restrictRegion(const Box &box, const Region &region,
                                        const Box &sub,
                                        std::vector<Part> &out) {
  uint32_t rank = box.rank();
  if (sub.volume() == 0)
    return;
  // Which region dims split which box dim (size-1 dims dropped), as the
  // plan parser's isSplitOf walks them.
  std::vector<std::vector<DimPart>> perDim(rank);
  size_t j = 0;
  std::vector<int64_t> radix, stride, noShape, noStride;
  for (uint32_t k = 0; k < rank; ++k) {
    radix.clear();
    stride.clear();
    int64_t extent = box.extent(k), acc = 1;
    while (acc < extent) {
      while (region.shape[j] == 1)
        ++j;
      radix.push_back(region.shape[j]);
      stride.push_back(region.stride[j]);
      acc *= region.shape[j++];
    }
    int64_t a = sub.lo[k] - box.lo[k], b = sub.hi[k] - box.lo[k];
    decompose(a, b, radix.data(), stride.data(), radix.size(), 0, 0, noShape,
              noStride, perDim[k]);
    for (DimPart &p : perDim[k]) {
      p.a += box.lo[k];
      p.b += box.lo[k];
    }
  }
  // Every combination of one part per dim.
  std::vector<size_t> pick(rank, 0);
  while (true) {
    Part part;
    part.box.lo.resize(rank);
    part.box.hi.resize(rank);
    part.region.offset = region.offset;
    for (uint32_t k = 0; k < rank; ++k) {
      const DimPart &p = perDim[k][pick[k]];
      part.box.lo[k] = p.a;
      part.box.hi[k] = p.b;
      part.region.offset += p.offset;
      part.region.shape.insert(part.region.shape.end(), p.shape.begin(),
                               p.shape.end());
      part.region.stride.insert(part.region.stride.end(), p.stride.begin(),
                                p.stride.end());
    }
    out.push_back(std::move(part));
    uint32_t k = rank;
    while (k > 0 && ++pick[k - 1] == perDim[k - 1].size())
      pick[--k] = 0;
    if (k == 0)
      return;
  }
}

void loadplan::transfer::splitBox(const Box &box, int64_t maxElements,
                                  std::vector<Box> &out,
                                  const std::vector<int64_t> &granule) {
  maxElements = std::max<int64_t>(maxElements, 1);
  int64_t volume = box.volume();
  if (volume <= maxElements) {
    out.push_back(box);
    return;
  }
  auto step = [&](uint32_t k) { return granule.empty() ? 1 : granule[k]; };
  uint32_t k = 0;
  while (k < box.rank() && box.extent(k) <= step(k))
    ++k;
  if (k == box.rank()) { // one granule: not cut
    out.push_back(box);
    return;
  }
  // A slab one granule thick along dim k.
  int64_t slab = volume / box.extent(k) * step(k);
  Box part = box;
  int64_t stride =
      slab <= maxElements ? maxElements / slab * step(k) : step(k);
  for (int64_t s = box.lo[k]; s < box.hi[k]; s += stride) {
    part.lo[k] = s;
    part.hi[k] = std::min(s + stride, box.hi[k]);
    if (slab <= maxElements)
      out.push_back(part);
    else
      splitBox(part, maxElements, out, granule);
  }
}

std::string loadplan::transfer::boxText(const Box &box) {
  std::ostringstream os;
  os << '[';
  for (size_t k = 0; k < box.lo.size(); ++k)
    os << (k ? ", " : "") << '(' << box.lo[k] << ", " << box.hi[k] << ')';
  os << ']';
  return os.str();
}
