//===- PlanJson.cpp - A plan as JSON ----------------------------*- C++ -*-===//

#include "loadplan/format/PlanJson.h"
#include "loadplan/format/ByteIO.h"
#include "loadplan/format/Report.h"

#include <cstdint>
#include <vector>

using namespace loadplan_format;

namespace {

/// The length of the well-formed UTF-8 sequence at `p` (Unicode's Table
/// 3-7), or 0 when the bytes there are not one.
size_t wellFormedLength(const uint8_t *p, const uint8_t *end) {
  uint8_t lead = p[0];
  if (lead < 0x80)
    return 1;
  // The bytes a sequence takes and the range of its second byte.
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;
  if (lead < 0xC2)
    return 0;
  if (lead < 0xE0) {
    n = 2;
  } else if (lead < 0xF0) {
    n = 3;
    lo = lead == 0xE0 ? 0xA0 : lo; // no overlong forms
    hi = lead == 0xED ? 0x9F : hi; // no surrogates
  } else if (lead < 0xF5) {
    n = 4;
    lo = lead == 0xF0 ? 0x90 : lo; // no overlong forms
    hi = lead == 0xF4 ? 0x8F : hi; // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (size_t(end - p) < n || p[1] < lo || p[1] > hi)
    return 0;
  for (size_t k = 2; k < n; ++k)
    if (p[k] < 0x80 || p[k] > 0xBF)
      return 0;
  return n;
}

/// The bytes of an ill-formed sequence at `p` that one U+FFFD replaces: the
/// longest start of a well-formed sequence there, at least one byte.
size_t maximalSubpart(const uint8_t *p, const uint8_t *end) {
  uint8_t lead = p[0];
  if (lead < 0xC2 || lead > 0xF4)
    return 1;
  size_t n = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  uint8_t lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
  uint8_t hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
  size_t k = 1;
  for (; k < n && p + k < end; ++k) {
    uint8_t b = p[k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
      break;
  }
  return k;
}

/// JSON text as llvm::json::OStream writes it with two-space indents: each
/// array element and object attribute on a line of its own, `[]` and `{}`
/// when empty, `"key": value`.
class JsonWriter {
public:
  std::string out;

  void objectBegin() {
    valueBegin();
    open(Scope::Object, '{');
  }
  void objectEnd() { close('}'); }
  void arrayBegin() {
    valueBegin();
    open(Scope::Array, '[');
  }
  void arrayEnd() { close(']'); }

  /// Starts the value of attribute `key` of the object being written.
  void key(std::string_view key) {
    Scope &s = stack.back();
    if (s.hasValue)
      out += ',';
    newline();
    s.hasValue = true;
    appendJsonString(out, key);
    out += ": ";
    stack.push_back({Scope::Attribute, false});
  }

  void value(int64_t v) {
    valueBegin();
    out += std::to_string(v);
  }
  void value(uint64_t v) {
    valueBegin();
    out += std::to_string(v);
  }
  void value(std::string_view v) {
    valueBegin();
    appendJsonString(out, v);
  }
  void null() {
    valueBegin();
    out += "null";
  }

  template <typename Fn> void object(Fn &&body) {
    objectBegin();
    body();
    objectEnd();
  }
  template <typename Fn> void array(Fn &&body) {
    arrayBegin();
    body();
    arrayEnd();
  }
  /// `"key": ` then what `body` writes.
  template <typename Fn> void attribute(std::string_view name, Fn &&body) {
    key(name);
    body();
    stack.pop_back();
  }
  void ints(const std::vector<int64_t> &values) {
    array([&] {
      for (int64_t v : values)
        value(v);
    });
  }
  void box(const Box &b) {
    array([&] {
      for (uint32_t k = 0; k < b.rank(); ++k)
        array([&] {
          value(b.lo[k]);
          value(b.hi[k]);
        });
    });
  }

private:
  struct Scope {
    enum Kind { Top, Array, Object, Attribute } kind;
    bool hasValue;
  };
  std::vector<Scope> stack{{Scope::Top, false}};
  size_t indent = 0;

  void newline() {
    out += '\n';
    out.append(indent, ' ');
  }
  void valueBegin() {
    Scope &s = stack.back();
    if (s.hasValue)
      out += ',';
    if (s.kind == Scope::Array)
      newline();
    s.hasValue = true;
  }
  void open(Scope::Kind kind, char bracket) {
    stack.push_back({kind, false});
    indent += 2;
    out += bracket;
  }
  void close(char bracket) {
    indent -= 2;
    if (stack.back().hasValue)
      newline();
    out += bracket;
    stack.pop_back();
  }
};

} // namespace

void loadplan_format::appendJsonString(std::string &out, std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  auto *p = reinterpret_cast<const uint8_t *>(text.data());
  const uint8_t *end = p + text.size();
  out += '"';
  while (p < end) {
    uint8_t c = *p;
    if (c >= 0x80) {
      if (size_t n = wellFormedLength(p, end)) {
        out.append(reinterpret_cast<const char *>(p), n);
        p += n;
      } else {
        out += "\xEF\xBF\xBD";
        p += maximalSubpart(p, end);
      }
      continue;
    }
    ++p;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c >= 0x20) {
      out += char(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += '"';
}

std::string loadplan_format::planJson(const Plan &plan) {
  JsonWriter j;
  int64_t counts[LOADPLAN_KIND_COUNT_] = {}, bytes[LOADPLAN_KIND_COUNT_] = {};
  int64_t writes = 0;
  j.object([&] {
    j.attribute("version", [&] { j.value(int64_t(LOADPLAN_PLAN_VERSION)); });
    j.attribute("fingerprint", [&] {
      j.value(hex64(layoutFingerprint(plan.targets), /*prefix=*/""));
    });
    j.attribute("targets", [&] {
      j.array([&] {
        for (const PlanTarget &t : plan.targets)
          j.object([&] {
            j.attribute("module", [&] { j.value(t.module); });
            j.attribute("tensor", [&] { j.value(t.tensor); });
            j.attribute("storage", [&] { j.value(int64_t(t.storage)); });
            j.attribute("byte_offset", [&] { j.value(t.byteOffset); });
            j.attribute("shape", [&] { j.ints(t.shape); });
            j.attribute("stride", [&] { j.ints(t.stride); });
            j.attribute("dtype",
                        [&] { j.value(loadplan_dtype_name(t.dtype)); });
          });
      });
    });
    j.attribute("entries", [&] {
      j.object([&] {
        forEachName(plan, [&](const PlanEntry &e, std::string_view name,
                              int64_t shift) {
          if (e.kind < LOADPLAN_KIND_COUNT_) {
            counts[e.kind] += 1;
            bytes[e.kind] = addSaturated(bytes[e.kind], neededBytes(e));
          }
          writes += e.writes.size();
          j.attribute(name, [&] {
            j.object([&] {
              j.attribute("kind", [&] { j.value(loadplan_kind_name(e.kind)); });
              j.attribute("dtype",
                          [&] { j.value(loadplan_dtype_name(e.dtype)); });
              j.attribute("shape", [&] { j.ints(e.shape); });
              j.attribute("reason", [&] {
                if (e.reason)
                  j.value(*e.reason);
                else
                  j.null();
              });
              j.attribute("boxes", [&] {
                j.array([&] {
                  for (const Box &b : e.boxes)
                    j.box(b);
                });
              });
              j.attribute("writes", [&] {
                j.array([&] {
                  for (const PlanWrite &w : e.writes)
                    j.object([&] {
                      j.attribute("target",
                                  [&] { j.value(int64_t(w.target)); });
                      j.attribute("box", [&] { j.box(e.boxes[w.box]); });
                      if (w.convertTo)
                        j.attribute("convert_to", [&] {
                          j.value(loadplan_dtype_name(w.convertTo));
                        });
                      if (w.transform)
                        j.attribute("transform", [&] {
                          j.value(loadplan_transform_name(w.transform));
                        });
                      j.attribute("region", [&] {
                        j.object([&] {
                          j.attribute("offset", [&] {
                            j.value(movedOffset(e.dtype, w, shift));
                          });
                          j.attribute("shape", [&] { j.ints(w.shape); });
                          j.attribute("stride", [&] { j.ints(w.stride); });
                        });
                      });
                    });
                });
              });
            });
          });
        });
      });
    });
    j.attribute("stats", [&] {
      j.object([&] {
        j.attribute("names", [&] { j.value(int64_t(plan.numNames())); });
        for (uint32_t kind = 0; kind < LOADPLAN_KIND_COUNT_; ++kind)
          j.attribute(loadplan_kind_name(kind), [&] { j.value(counts[kind]); });
        for (uint32_t kind : {LOADPLAN_KIND_DIRECT, LOADPLAN_KIND_FALLBACK})
          j.attribute(std::string(loadplan_kind_name(kind)) + "_bytes",
                      [&] { j.value(bytes[kind]); });
        j.attribute("writes", [&] { j.value(writes); });
        j.attribute("targets",
                    [&] { j.value(int64_t(plan.targets.size())); });
      });
    });
  });
  j.out += '\n';
  return std::move(j.out);
}
