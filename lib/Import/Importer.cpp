//===- Importer.cpp - Import an exported loader's program -------*- C++ -*-===//
//
// The program is a loader exported by `loadplan.export_loader`, as LibTorch's
// generated schema types hold it: its user inputs are the checkpoint tensors
// (one dict, keyed by checkpoint name), its parameters and buffers are the
// targets, and its effect is the loader's writes into them, either in place
// (`copy_` into views of a parameter, as torch.export traces) or functionalized
// (`copy` / `*_scatter` chains feeding a `PARAMETER_MUTATION` or
// `BUFFER_MUTATION` output).
//
// Every value of the graph is classified as it is defined:
//
// - a *trace*: a checkpoint tensor or a view of one; its views, and a `cat`
//   or `stack` of traces of one name in its dtype (`loadplan.cat`), become
//   the dialect's ops, in the block of its checkpoint name;
// - a *state*: a view of a target (a parameter or buffer placeholder, a
//   view of it, or a functionalized write into it), with its layout in
//   elements from the target's first element;
// - anything else (constants, tensors computed from targets, ...).
//
// A copy of a trace into a state is a `loadplan.copy` into that layout; a
// scatter of a trace into a state is one too, at the scattered position; a
// scatter of a state into the state it was viewed from undoes the
// functionalization and writes nothing. Every other op on a trace is the
// fallback event capture records for it (`apply`, `convert`, `value_read`,
// `inplace_write`, `write_other`), and ops of targets alone are
// `constant_write` (fill, zero, copies of non-checkpoint data) or
// `read_target`. Views, scatters, value reads and ops that only guard shapes
// are known by name from the op table (OpTable.cpp; views and element copies
// from the aten view table, loadplan/Records/AtenViews.h, which capture
// follows too); copies and fills, whose meaning depends on what they write
// into, are classified here. Every op, and the declarations, are records
// (loadplan/Records/RecordOps.h), as capture makes them, with op names and
// other strings in a string table. The MLIR side builds the module of them
// (loadplan/Records/RecordBuilder.h) and verifies it.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "Archive.h"
#include "ImportError.h"
#include "Nodes.h"
#include "OpTable.h"
#include "TensorMeta.h"

#include "loadplan/Records/RecordOps.h"
#include "loadplan/plan_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mlir::loadplan::torch_export {

namespace {

//===----------------------------------------------------------------------===//
// The importer
//===----------------------------------------------------------------------===//

/// A live tensor the loader may write.
struct Target {
  std::string module, tensor;
  int storage = 0;
  Meta meta; // its layout in its storage
  int64_t byteOffset() const { return meta.layout.offset * meta.itemSize(); }
};

/// A storage the targets are views of: the weight they were saved as.
struct Storage {
  int64_t size = 0;
};

/// One checkpoint name's block.
struct Record {
  std::string name;
  Meta meta;
  /// Its ops, each a record.
  std::vector<std::vector<int64_t>> items;
  int64_t next = 0;
  bool stopped = false;

  int64_t fresh() { return next++; }
};

/// What a value of the graph is to the importer.
struct Value {
  enum class Kind { Trace, State, Other };
  Kind kind = Kind::Other;
  Meta meta;
  // Trace: its checkpoint and its value in the block (-1: the incoming
  // tensor).
  int record = -1;
  int64_t num = -1;
  // State: its target, and its layout from the target's first element.
  int target = -1;
  Layout at;
  // The node that defined it (-1: a placeholder), for mutation outputs.
  int node = -1;
};

/// A read of a target, kept only if some name writes the target's storage
/// (reading a buffer no checkpoint tensor goes into is the loader's own
/// business), as capture does.
struct PendingRead {
  int record;
  size_t line;
  int storage;
};

/// Imports one program: declares its targets and checkpoints, visits its
/// nodes in graph order, then writes its mutation outputs back.
class Importer {
public:
  Importer(const schema::ExportedProgram &program,
           const schema::PayloadConfig *weights, Archive &archive)
      : program(program), graph(program.get_graph_module().get_graph()),
        weights(weights), archive(archive) {}

  RecordedModule run();

private:
  // Declarations.
  std::vector<std::string> checkpointNames();
  void declare();

  // Nodes.
  void visit(int index, const schema::Node &node);
  const Value *tensorInput(const schema::Node &node, const std::string &name,
                           size_t position);
  std::vector<const Value *> tensorInputs(const schema::Node &node);

  bool visitTraceView(int index, const schema::Node &node, const Value &src);
  bool visitCat(int index, const schema::Node &node, bool stack);
  bool visitStateView(int index, const schema::Node &node, const Value &src);
  void visitCopy(int index, const schema::Node &node, const Value &dest,
                 const Value &src, const std::string &op);
  void visitScatter(int index, const schema::Node &node, const Value &base,
                    const Value &src);
  void visitApply(int index, const schema::Node &node,
                  const std::vector<const Value *> &traces);
  void defineOthers(int index, const schema::Node &node);

  void writeInto(int target, const Layout &at, const Value &value,
                 loadplan_dtype_t destType, int depth);

  // Events.
  Record *current();
  void emit(int record, std::vector<int64_t> entry);
  int64_t typeId(const Meta &meta);
  int64_t stringId(const std::string &text);
  void emitCurrent(std::vector<int64_t> entry);
  void copyEvent(const Value &src, int target, const Layout &at,
                 loadplan_dtype_t destType, const std::string &op);
  void constantWrite(const std::string &op, int target, const Layout &at,
                     loadplan_dtype_t dtype);
  void readTarget(int target, const std::string &op);
  void valueRead(const Value &trace, const std::string &op);
  Value newTrace(int record, int64_t num, const Meta &meta, int node);
  void defineStates(int index, const schema::Node &node, const Value &base);

  const schema::ExportedProgram &program;
  const schema::Graph &graph;
  const schema::PayloadConfig *weights;
  Archive &archive;

  std::vector<Target> targets;
  std::vector<Storage> storages;
  std::vector<Record> records;
  // The records' type table: (sizes, dtype) by index, and its index.
  std::vector<std::pair<std::vector<int64_t>, loadplan_dtype_t>> types;
  std::map<std::pair<std::vector<int64_t>, loadplan_dtype_t>, int64_t> typeIds;
  // The records' string table, and its index.
  std::vector<std::string> strings;
  std::unordered_map<std::string, int64_t> stringIds;
  std::unordered_map<std::string, Value> values;
  std::unordered_map<std::string, std::vector<std::string>> lists;
  // Symbolic scalars read from a trace (`.item()`): their checkpoint.
  std::unordered_map<std::string, int> readScalars;
  std::vector<std::vector<int64_t>> pending; // events before any name
  std::vector<PendingRead> reads;
  std::unordered_set<int> writtenStorages;
  int currentRecord = -1;
};

} // namespace

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

/// The checkpoint names, from the program's input tree: one dict argument,
/// as `loadplan.export_loader` exports it.
std::vector<std::string> Importer::checkpointNames() {
  static const char *expected =
      "the program's inputs are not one dict of checkpoint tensors "
      "(export the loader with loadplan.export_loader)";
  const auto &calls = program.get_graph_module().get_module_call_graph();
  if (calls.empty() || !calls.front().get_signature())
    fail(std::string(expected) + ": no input tree");
  nlohmann::json spec =
      nlohmann::json::parse(calls.front().get_signature()->get_in_spec());
  // [protocol, {"type": "builtins.tuple", "children_spec": [args, kwargs]}]
  if (!spec.is_array() || spec.size() != 2 || !spec[1].is_object())
    fail(expected);
  const nlohmann::json &root = spec[1];
  const nlohmann::json &children = root.at("children_spec");
  if (!children.is_array() || children.size() != 2)
    fail(expected);
  const nlohmann::json &args = children[0].at("children_spec");
  const nlohmann::json &kwargs = children[1].at("children_spec");
  if (!args.is_array() || args.size() != 1 || !kwargs.is_array() ||
      !kwargs.empty())
    fail(expected);
  const nlohmann::json &dict = args[0];
  const nlohmann::json &type = dict.at("type");
  if (!type.is_string() ||
      (type != "builtins.dict" && type != "collections.OrderedDict"))
    fail(expected);
  nlohmann::json keys =
      nlohmann::json::parse(dict.at("context").get<std::string>());
  const nlohmann::json &leaves = dict.at("children_spec");
  if (!keys.is_array() || !leaves.is_array() || keys.size() != leaves.size())
    fail(expected);
  std::vector<std::string> names;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].is_string() || !leaves[i].at("type").is_null())
      fail(std::string(expected) + ": a key is not a name of one tensor");
    names.push_back(keys[i].get<std::string>());
  }
  return names;
}

/// Targets from the parameter and buffer inputs (tensor metadata from the
/// graph); storages from the weights the archive holds for them: targets
/// saved as one weight share a storage, and targets with the same layout in
/// it are one target (tied parameters), as capture finds them.
void Importer::declare() {
  const auto &tensorValues = graph.get_tensor_values();
  std::vector<std::string> names = checkpointNames();
  size_t userInputs = 0;
  std::map<std::string, int> storageOfPath;
  for (const schema::InputSpec &spec :
       program.get_graph_module().get_signature().get_input_specs()) {
    using Tag = schema::InputSpec::Tag;
    std::string placeholder, fqn;
    switch (spec.tag()) {
    case Tag::PARAMETER:
      placeholder = spec.get_parameter().get_arg().get_name();
      fqn = spec.get_parameter().get_parameter_name();
      break;
    case Tag::BUFFER:
      placeholder = spec.get_buffer().get_arg().get_name();
      fqn = spec.get_buffer().get_buffer_name();
      break;
    case Tag::USER_INPUT: {
      const schema::Argument &arg = spec.get_user_input().get_arg();
      if (arg.tag() != schema::Argument::Tag::AS_TENSOR)
        fail("the program has a user input that is not a tensor");
      if (userInputs >= names.size())
        fail("the program has more tensor inputs than checkpoint names");
      placeholder = arg.get_as_tensor().get_name();
      break;
    }
    case Tag::TENSOR_CONSTANT:
      // A tensor attribute that is neither a parameter nor a buffer: no
      // target, as for capture.
      placeholder = spec.get_tensor_constant().get_arg().get_name();
      break;
    default:
      continue;
    }
    auto meta = tensorValues.find(placeholder);
    if (meta == tensorValues.end())
      fail("the program has no metadata for input '" + placeholder + "'");
    Value value;
    value.meta = toMeta(meta->second);
    if (spec.tag() == Tag::TENSOR_CONSTANT) {
      values[placeholder] = value;
      continue;
    }
    if (spec.tag() == Tag::USER_INPUT) {
      Record record;
      record.name = names[userInputs++];
      record.meta = value.meta;
      if (record.meta.element().empty())
        fail("checkpoint tensor '" + record.name + "' has a dtype the plan " +
             "cannot hold");
      // The incoming tensor is contiguous, whatever the example was.
      Layout &layout = record.meta.layout;
      layout.offset = 0;
      layout.strides.assign(layout.sizes.size(), 1);
      for (int64_t i = layout.rank() - 2; i >= 0; --i)
        layout.strides[i] =
            layout.strides[i + 1] * std::max<int64_t>(layout.sizes[i + 1], 1);
      value.kind = Value::Kind::Trace;
      value.meta = record.meta;
      value.record = static_cast<int>(records.size());
      value.num = -1;
      records.push_back(std::move(record));
      values[placeholder] = value;
      continue;
    }
    if (value.meta.element().empty()) {
      values[placeholder] = value; // no IR type: not a target
      continue;
    }
    // Its storage: the weight file it was saved as, if the archive says.
    std::string path;
    if (weights) {
      auto it = weights->get_config().find(fqn);
      if (it != weights->get_config().end())
        path = it->second.get_path_name();
    }
    int64_t item = value.meta.itemSize();
    int64_t extent = 0;
    if (value.meta.layout.numel() > 0) {
      extent = 1;
      for (int64_t i = 0; i < value.meta.layout.rank(); ++i)
        extent = mulAdd(value.meta.layout.sizes[i] - 1,
                        value.meta.layout.strides[i], extent);
    }
    int64_t needed = mulAdd(value.meta.layout.offset + extent, item, 0);
    int storage;
    auto found = path.empty() ? storageOfPath.end() : storageOfPath.find(path);
    if (found != storageOfPath.end()) {
      storage = found->second;
    } else {
      storage = static_cast<int>(storages.size());
      storages.push_back({});
      if (!path.empty()) {
        storageOfPath[path] = storage;
        std::string record = "data/weights/" + path;
        if (archive.hasRecord(record))
          storages[storage].size = archive.recordSize(record);
      }
    }
    storages[storage].size = std::max(storages[storage].size, needed);
    int index = -1;
    for (size_t t = 0; t < targets.size(); ++t)
      if (targets[t].storage == storage &&
          targets[t].meta.dtype == value.meta.dtype &&
          targets[t].meta.layout == value.meta.layout)
        index = static_cast<int>(t);
    if (index < 0) {
      Target target;
      size_t dot = fqn.rfind('.');
      target.module = dot == std::string::npos ? "" : fqn.substr(0, dot);
      target.tensor = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
      target.storage = storage;
      target.meta = value.meta;
      index = static_cast<int>(targets.size());
      targets.push_back(target);
    }
    value.kind = Value::Kind::State;
    value.target = index;
    value.at = value.meta.layout;
    value.at.offset = 0;
    values[placeholder] = value;
  }
  if (userInputs != names.size())
    fail("the program has " + std::to_string(userInputs) +
         " tensor inputs for " + std::to_string(names.size()) +
         " checkpoint names");
}

//===----------------------------------------------------------------------===//
// Arguments
//===----------------------------------------------------------------------===//

const Value *Importer::tensorInput(const schema::Node &node,
                                   const std::string &name, size_t position) {
  const schema::Argument *arg = input(node, name, position);
  if (!arg || arg->tag() != schema::Argument::Tag::AS_TENSOR)
    return nullptr;
  auto it = values.find(arg->get_as_tensor().get_name());
  if (it == values.end())
    fail("'" + node.get_target() + "' uses an undefined value '" +
         arg->get_as_tensor().get_name() + "'");
  return &it->second;
}

/// Every tensor argument of `node`, in order (lists flattened).
std::vector<const Value *> Importer::tensorInputs(const schema::Node &node) {
  std::vector<const Value *> out;
  auto add = [&](const std::string &name) {
    auto it = values.find(name);
    if (it == values.end())
      fail("'" + node.get_target() + "' uses an undefined value '" + name +
           "'");
    out.push_back(&it->second);
  };
  using Tag = schema::Argument::Tag;
  for (const schema::NamedArgument &named : node.get_inputs()) {
    const schema::Argument &arg = named.get_arg();
    if (arg.tag() == Tag::AS_TENSOR) {
      add(arg.get_as_tensor().get_name());
    } else if (arg.tag() == Tag::AS_TENSORS) {
      for (const schema::TensorArgument &t : arg.get_as_tensors())
        add(t.get_name());
    } else if (arg.tag() == Tag::AS_OPTIONAL_TENSOR) {
      if (arg.get_as_optional_tensor().tag() ==
          schema::OptionalTensorArgument::Tag::AS_TENSOR)
        add(arg.get_as_optional_tensor().get_as_tensor().get_name());
    } else if (arg.tag() == Tag::AS_OPTIONAL_TENSORS) {
      for (const schema::OptionalTensorArgument &t :
           arg.get_as_optional_tensors())
        if (t.tag() == schema::OptionalTensorArgument::Tag::AS_TENSOR)
          add(t.get_as_tensor().get_name());
    }
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

Record *Importer::current() {
  return currentRecord < 0 ? nullptr : &records[currentRecord];
}

void Importer::emit(int record, std::vector<int64_t> entry) {
  if (!records[record].stopped)
    records[record].items.push_back(std::move(entry));
}

int64_t Importer::typeId(const Meta &meta) {
  auto key = std::make_pair(meta.layout.sizes, meta.dtype);
  auto [it, added] = typeIds.try_emplace(key, types.size());
  if (added)
    types.push_back(std::move(key));
  return it->second;
}

int64_t Importer::stringId(const std::string &text) {
  auto [it, added] = stringIds.try_emplace(text, strings.size());
  if (added)
    strings.push_back(text);
  return it->second;
}

/// An event of targets alone goes to the name being loaded: the last one
/// an op of the loader involved, or, before any, the first name.
void Importer::emitCurrent(std::vector<int64_t> entry) {
  if (Record *record = current()) {
    if (!record->stopped)
      record->items.push_back(std::move(entry));
  } else {
    pending.push_back(std::move(entry));
  }
}

Value Importer::newTrace(int record, int64_t num, const Meta &meta, int node) {
  Value value;
  value.kind = Value::Kind::Trace;
  value.record = record;
  value.num = num;
  value.meta = meta;
  value.node = node;
  return value;
}

void Importer::copyEvent(const Value &src, int target, const Layout &at,
                         loadplan_dtype_t destType, const std::string &op) {
  currentRecord = src.record;
  std::string element = loadplan_dtype_mlir_type(destType);
  if (element.empty()) {
    emit(src.record, {static_cast<int64_t>(RecordOp::write_other),
                      stringId(op), src.num});
    return;
  }
  writtenStorages.insert(targets[target].storage);
  // source, source type, target, dtype, offset, shape..., stride...
  std::vector<int64_t> entry = {static_cast<int64_t>(RecordOp::copy), src.num,
                                typeId(src.meta), target, destType, at.offset};
  entry.insert(entry.end(), at.sizes.begin(), at.sizes.end());
  entry.insert(entry.end(), at.strides.begin(), at.strides.end());
  emit(src.record, std::move(entry));
}

void Importer::constantWrite(const std::string &op, int target,
                             const Layout &at, loadplan_dtype_t dtype) {
  std::string element = loadplan_dtype_mlir_type(dtype);
  if (element.empty())
    return; // only coverage needs it
  // op, target, dtype, offset, shape..., stride...
  std::vector<int64_t> entry = {static_cast<int64_t>(RecordOp::constant_write),
                                stringId(op), target, dtype, at.offset};
  entry.insert(entry.end(), at.sizes.begin(), at.sizes.end());
  entry.insert(entry.end(), at.strides.begin(), at.strides.end());
  emitCurrent(std::move(entry));
}

void Importer::readTarget(int target, const std::string &op) {
  // Before any name, as for capture, a read is the loader's own business.
  if (!current() || current()->stopped)
    return;
  int index = currentRecord;
  reads.push_back(
      {index, records[index].items.size(), targets[target].storage});
  records[index].items.push_back(
      {static_cast<int64_t>(RecordOp::read_target), target, stringId(op)});
}

void Importer::valueRead(const Value &trace, const std::string &op) {
  currentRecord = trace.record;
  emit(trace.record, {static_cast<int64_t>(RecordOp::value_read), trace.num,
                      stringId(op)});
  // The loader stops here for capture: what follows is not recorded.
  records[trace.record].stopped = true;
}

//===----------------------------------------------------------------------===//
// Nodes
//===----------------------------------------------------------------------===//

void Importer::visit(int index, const schema::Node &node) {
  const std::string &target = node.get_target();
  std::string packet = opPacket(target);
  std::string op = opName(target);

  if (target == "_operator.getitem") {
    // An element of a list output: the value it names is already defined.
    const schema::Argument *list =
        node.get_inputs().empty() ? nullptr : &node.get_inputs()[0].get_arg();
    auto outs = outputNames(node);
    int64_t i = -1;
    if (node.get_inputs().size() > 1 &&
        node.get_inputs()[1].get_arg().tag() == schema::Argument::Tag::AS_INT)
      i = node.get_inputs()[1].get_arg().get_as_int();
    if (list && list->tag() == schema::Argument::Tag::AS_TENSORS &&
        outs.size() == 1) {
      const auto &items = list->get_as_tensors();
      if (i >= 0 && i < static_cast<int64_t>(items.size())) {
        auto it = values.find(items[i].get_name());
        if (it != values.end()) {
          values[outs[0]] = it->second;
          return;
        }
      }
    }
    defineOthers(index, node);
    return;
  }
  if (isIgnored(packet))
    return;

  std::vector<const Value *> tensors = tensorInputs(node);
  std::vector<const Value *> traces;
  bool readsScalar = false;
  for (const Value *v : tensors)
    if (v->kind == Value::Kind::Trace)
      traces.push_back(v);
  // A scalar read from a trace (`fill_(w.item())`): that name stopped at
  // the read, so nothing it does later is recorded.
  for (const schema::NamedArgument &named : node.get_inputs()) {
    const schema::Argument &arg = named.get_arg();
    std::string name;
    if (arg.tag() == schema::Argument::Tag::AS_SYM_INT &&
        arg.get_as_sym_int().tag() == schema::SymIntArgument::Tag::AS_NAME)
      name = arg.get_as_sym_int().get_as_name();
    if (arg.tag() == schema::Argument::Tag::AS_SYM_FLOAT &&
        arg.get_as_sym_float().tag() == schema::SymFloatArgument::Tag::AS_NAME)
      name = arg.get_as_sym_float().get_as_name();
    if (!name.empty() && readScalars.count(name))
      readsScalar = true;
  }
  if (readsScalar && traces.empty()) {
    defineOthers(index, node);
    return;
  }

  const Value *first = tensorInput(node, "self", 0);
  if (!first && !tensors.empty())
    first = tensors.front();

  if (isValueRead(packet) && !traces.empty()) {
    valueRead(*traces.front(), op);
    for (const std::string &name : symbolicOutputs(node))
      readScalars[name] = traces.front()->record;
    defineOthers(index, node);
    return;
  }

  // dest.copy_(src) and its functional form copy(dest, src).
  if (packet == "aten.copy_" || packet == "aten.copy") {
    const Value *dest = tensorInput(node, "self", 0);
    const Value *src = tensorInput(node, "src", 1);
    if (dest && src) {
      visitCopy(index, node, *dest, *src, op);
      return;
    }
  }
  if (isScatter(packet)) {
    const Value *base = tensorInput(node, "self", 0);
    const Value *src = tensorInput(node, "src", 1);
    if (base && src) {
      visitScatter(index, node, *base, *src);
      return;
    }
  }

  if (!traces.empty()) {
    if ((packet == "aten.cat" || packet == "aten.stack") &&
        visitCat(index, node, packet == "aten.stack"))
      return;
    const Value *src = traces.front();
    bool onlySrc = first == src && traces.size() == 1;
    if (onlySrc && visitTraceView(index, node, *src))
      return;
    bool selfIsState = first && first->kind == Value::Kind::State;
    if (isInPlace(packet) && selfIsState) {
      // A target written by an op other than copy_ from a trace: op,
      // target, inputs...
      std::vector<int64_t> entry = {
          static_cast<int64_t>(RecordOp::inplace_write), stringId(op),
          first->target};
      for (const Value *t : traces)
        if (t->record == src->record)
          entry.push_back(t->num);
      currentRecord = src->record;
      writtenStorages.insert(targets[first->target].storage);
      emit(src->record, std::move(entry));
      defineStates(index, node, *first);
      return;
    }
    visitApply(index, node, traces);
    return;
  }

  // Ops of targets and other tensors alone.
  if (first && first->kind == Value::Kind::State) {
    if (visitStateView(index, node, *first))
      return;
    if (packet == "aten.fill_" || packet == "aten.fill" ||
        packet == "aten.zero_" || packet == "aten.zero") {
      std::string name = packet == "aten.fill"   ? "aten.fill_"
                         : packet == "aten.zero" ? "aten.zero_"
                                                 : packet;
      constantWrite(name, first->target, first->at, first->meta.dtype);
      defineStates(index, node, *first);
      return;
    }
    // Any other op reads the target (an in-place one reads it too).
    readTarget(first->target, op);
    if (isInPlace(packet)) {
      defineStates(index, node, *first);
      return;
    }
    defineOthers(index, node);
    return;
  }
  for (const Value *v : tensors)
    if (v->kind == Value::Kind::State) {
      readTarget(v->target, op);
      break;
    }
  defineOthers(index, node);
}

/// Defines `node`'s outputs as `base`'s target elements at `base`'s place
/// (an in-place write, or a functionalized one), each with the metadata
/// the graph records for it.
void Importer::defineStates(int index, const schema::Node &node,
                            const Value &base) {
  const auto &tensorValues = graph.get_tensor_values();
  for (const std::string &name : outputNames(node)) {
    Value state = base;
    state.node = index;
    auto it = tensorValues.find(name);
    if (it != tensorValues.end())
      state.meta = toMeta(it->second);
    values[name] = state;
  }
}

/// Defines `node`'s outputs as values that are neither traces nor targets.
void Importer::defineOthers(int index, const schema::Node &node) {
  const auto &tensorValues = graph.get_tensor_values();
  for (const std::string &name : outputNames(node)) {
    Value value;
    value.node = index;
    auto it = tensorValues.find(name);
    if (it != tensorValues.end())
      value.meta = toMeta(it->second);
    values[name] = value;
  }
}

/// A view or element copy of a trace: the records the aten view table makes
/// of it. False if `node` is not one (it is then an `apply`).
bool Importer::visitTraceView(int index, const schema::Node &node,
                              const Value &src) {
  std::vector<std::string> outs = outputNames(node);
  if (outs.empty())
    return false;
  std::vector<Meta> metas;
  for (const std::string &name : outs) {
    auto it = graph.get_tensor_values().find(name);
    if (it == graph.get_tensor_values().end())
      return false;
    metas.push_back(toMeta(it->second));
  }
  currentRecord = src.record;
  std::vector<ViewRecord> views =
      traceViewRecords(opPacket(node.get_target()), node, src.meta, metas);
  if (views.empty())
    return false;
  assert(views.size() == outs.size() && "one view op per output");

  // One record per output: result, input, input type, result type, ints.
  Record &record = records[src.record];
  int64_t inType = typeId(src.meta);
  for (size_t k = 0; k < views.size(); ++k) {
    int64_t value = record.fresh();
    std::vector<int64_t> entry = {static_cast<int64_t>(views[k].op), value,
                                  src.num, inType, typeId(metas[k])};
    entry.insert(entry.end(), views[k].ints.begin(), views[k].ints.end());
    emit(src.record, std::move(entry));
    values[outs[k]] = newTrace(src.record, value, metas[k], index);
  }
  return true;
}

/// `torch.cat` / `torch.stack` of traces of one checkpoint name, all in its
/// dtype: a `loadplan.cat` (of each input unsqueezed, for stack), as capture
/// records it. False for anything else (another name's trace, a tensor that
/// is no trace, a dtype promotion, an `out=` form, the legacy cat of 1-d
/// empty tensors): that is an `apply`.
bool Importer::visitCat(int index, const schema::Node &node, bool stack) {
  const schema::Argument *list = input(node, "tensors", 0);
  if (!list || list->tag() != schema::Argument::Tag::AS_TENSORS ||
      list->get_as_tensors().empty())
    return false;
  // The list is the only tensor argument (no `out=` tensor).
  std::vector<const Value *> parts = tensorInputs(node);
  if (parts.size() != list->get_as_tensors().size())
    return false;
  const Value &first = *parts.front();
  for (const Value *part : parts)
    if (part->kind != Value::Kind::Trace || part->record != first.record ||
        part->meta.dtype != first.meta.dtype)
      return false;
  if (first.meta.element().empty())
    return false;
  const schema::Argument *dimArg = input(node, "dim", 1);
  if (dimArg && dimArg->tag() != schema::Argument::Tag::AS_INT)
    return false; // a named dim
  std::vector<std::string> outs = outputNames(node);
  if (outs.size() != 1)
    return false;
  auto found = graph.get_tensor_values().find(outs[0]);
  if (found == graph.get_tensor_values().end())
    return false;
  Meta out = toMeta(found->second);
  int64_t rank = out.layout.rank();
  if (rank == 0 || out.dtype != first.meta.dtype)
    return false;
  for (const Value *part : parts)
    if (part->meta.layout.rank() != (stack ? rank - 1 : rank))
      return false;
  int64_t dim = normalizeDim(dimArg ? dimArg->get_as_int() : 0, rank);

  currentRecord = first.record;
  Record &record = records[first.record];
  std::vector<int64_t> inputs;
  for (const Value *part : parts) {
    int64_t num = part->num;
    if (stack) {
      Meta unsqueezed = part->meta;
      unsqueezed.layout.sizes.insert(unsqueezed.layout.sizes.begin() + dim, 1);
      int64_t value = record.fresh();
      emit(first.record, {static_cast<int64_t>(RecordOp::unsqueeze), value, num,
                          typeId(part->meta), typeId(unsqueezed), dim});
      num = value;
    }
    inputs.push_back(num);
  }
  // result, result type, dim, inputs...
  int64_t value = record.fresh();
  std::vector<int64_t> entry = {static_cast<int64_t>(RecordOp::cat), value,
                                typeId(out), dim};
  entry.insert(entry.end(), inputs.begin(), inputs.end());
  emit(first.record, std::move(entry));
  values[outs[0]] = newTrace(first.record, value, out, index);
  return true;
}

/// A view of a target: a state with the layout the graph records. False if
/// `node` is not a view.
bool Importer::visitStateView(int index, const schema::Node &node,
                              const Value &src) {
  std::string packet = opPacket(node.get_target());
  if (!isView(packet) || packet == "aten.reshape")
    return false;
  std::vector<std::string> outs = outputNames(node);
  if (outs.empty())
    return false;
  const Target &target = targets[src.target];
  // The graph records each view's layout in its input's storage; that maps
  // onto the target only where the input's own layout is the target's (a
  // placeholder and its views are; a functionalized write is a fresh tensor
  // that may not be).
  if (src.meta.layout.sizes != src.at.sizes ||
      src.meta.layout.strides != src.at.strides)
    return false;
  for (const std::string &name : outs) {
    auto it = graph.get_tensor_values().find(name);
    if (it == graph.get_tensor_values().end())
      return false;
    Meta meta = toMeta(it->second);
    if (meta.dtype != target.meta.dtype)
      return false; // view(dtype): not a layout of the target's elements
    Value state = src;
    state.meta = meta;
    state.at = meta.layout;
    state.at.offset =
        src.at.offset + (meta.layout.offset - src.meta.layout.offset);
    state.node = index;
    values[name] = state;
  }
  return true;
}

void Importer::visitCopy(int index, const schema::Node &node, const Value &dest,
                         const Value &src, const std::string &op) {
  std::string name = op == "aten.copy" ? "aten.copy_" : op;
  if (src.kind == Value::Kind::Trace) {
    if (dest.kind == Value::Kind::State) {
      copyEvent(src, dest.target, dest.at, dest.meta.dtype, name);
      defineStates(index, node, dest);
      return;
    }
    if (dest.kind == Value::Kind::Trace) {
      // An in-place op on an incoming tensor.
      std::vector<const Value *> traces = {&dest, &src};
      visitApply(index, node, traces);
      return;
    }
    // Into a tensor that is not a target. A functional copy into a fresh
    // tensor is its source again, for a later scatter or mutation output.
    currentRecord = src.record;
    if (op == "aten.copy_") {
      emit(src.record, {static_cast<int64_t>(RecordOp::write_other),
                        stringId(name), src.num});
      defineOthers(index, node);
      return;
    }
    defineOthers(index, node);
    return;
  }
  if (dest.kind == Value::Kind::State) {
    // A write of data that is no checkpoint tensor: a constant write, and
    // a read of the target it came from.
    if (src.kind == Value::Kind::State)
      readTarget(src.target, name);
    constantWrite(name, dest.target, dest.at, dest.meta.dtype);
    defineStates(index, node, dest);
    return;
  }
  if (src.kind == Value::Kind::State)
    readTarget(src.target, name);
  defineOthers(index, node);
}

void Importer::visitScatter(int index, const schema::Node &node,
                            const Value &base, const Value &src) {
  if (base.kind != Value::Kind::State) {
    // A scatter into a tensor that is no target (or not yet one: a full
    // copy that a mutation output writes back); the output decides.
    if (base.kind == Value::Kind::Trace || src.kind == Value::Kind::Trace) {
      defineOthers(index, node);
      return;
    }
    defineOthers(index, node);
    return;
  }
  std::optional<Layout> at = scatterPosition(node, base.at);
  if (!at) {
    if (src.kind == Value::Kind::Trace) {
      std::vector<const Value *> traces = {&src};
      visitApply(index, node, traces);
    }
    defineStates(index, node, base);
    return;
  }
  // Copy the base first: writeInto may define values.
  Value target = base;
  writeInto(target.target, *at, src, target.meta.dtype, 0);
  defineStates(index, node, target);
}

/// The events that writing `value` into `at` of `target` stands for: a copy
/// of a trace; nothing for the target's own elements at that place (a view
/// scattered back where it was viewed, which is how functionalization
/// writes through views); the writes a functionalized chain of copies,
/// fills and scatters makes; a constant write of anything else.
void Importer::writeInto(int target, const Layout &at, const Value &value,
                         loadplan_dtype_t destType, int depth) {
  if (depth > 256)
    fail("the program nests writes deeper than 256");
  if (value.kind == Value::Kind::Trace) {
    copyEvent(value, target, at, destType, "aten.copy_");
    return;
  }
  if (value.kind == Value::Kind::State && value.target == target &&
      value.at == at)
    return;
  const auto &nodes = graph.get_nodes();
  if (value.node >= 0) {
    const schema::Node &node = nodes[value.node];
    std::string packet = opPacket(node.get_target());
    if (packet == "aten.copy") {
      if (const Value *src = tensorInput(node, "src", 1)) {
        const Value *dest = tensorInput(node, "self", 0);
        writeInto(target, at, *src, dest ? dest->meta.dtype : destType,
                  depth + 1);
        return;
      }
    }
    if (isScatter(packet) && value.kind != Value::Kind::State) {
      const Value *base = tensorInput(node, "self", 0);
      const Value *src = tensorInput(node, "src", 1);
      std::optional<Layout> inner = scatterPosition(node, at);
      if (base && src && inner) {
        writeInto(target, at, *base, destType, depth + 1);
        writeInto(target, *inner, *src, destType, depth + 1);
        return;
      }
    }
    if (packet == "aten.fill" || packet == "aten.zero") {
      constantWrite(packet + "_", target, at, destType);
      return;
    }
  }
  if (value.kind == Value::Kind::State)
    readTarget(value.target, "aten.copy_");
  constantWrite("aten.copy_", target, at, destType);
}

/// Any other op on traces: an `apply` in the block of the first trace's
/// name, whose results are traces without a layout; an in-place op on a
/// trace gives the trace its result as its new value.
void Importer::visitApply(int index, const schema::Node &node,
                          const std::vector<const Value *> &traces) {
  const Value &first = *traces.front();
  int recordIndex = first.record;
  Record &record = records[recordIndex];
  currentRecord = recordIndex;
  std::string op = opName(node.get_target());
  std::vector<int64_t> inputs;
  std::vector<std::string> others;
  for (const Value *t : traces) {
    if (t->record == recordIndex) {
      inputs.push_back(t->num);
    } else if (std::find(others.begin(), others.end(),
                         records[t->record].name) == others.end()) {
      others.push_back(records[t->record].name);
    }
  }
  // op, no reason, input count, inputs..., name count, names..., then each
  // result's value and type.
  std::vector<int64_t> entry = {static_cast<int64_t>(RecordOp::apply),
                                stringId(op), -1,
                                static_cast<int64_t>(inputs.size())};
  entry.insert(entry.end(), inputs.begin(), inputs.end());
  entry.push_back(static_cast<int64_t>(others.size()));
  for (const std::string &other : others)
    entry.push_back(stringId(other));
  std::vector<std::string> outs = outputNames(node);
  std::vector<Meta> metas;
  std::vector<int64_t> results;
  for (const std::string &name : outs) {
    auto it = graph.get_tensor_values().find(name);
    Meta meta =
        it == graph.get_tensor_values().end() ? Meta{} : toMeta(it->second);
    // A dtype the IR lacks is held as i8, as capture holds it: such a value
    // is only ever a reason, never a write.
    if (meta.element().empty())
      meta.dtype = LOADPLAN_DTYPE_INT8;
    results.push_back(record.fresh());
    entry.push_back(results.back());
    entry.push_back(typeId(meta));
    metas.push_back(meta);
  }
  emit(recordIndex, std::move(entry));
  for (size_t k = 0; k < outs.size(); ++k)
    values[outs[k]] = newTrace(recordIndex, results[k], metas[k], index);
  // In place on a trace: later uses of the trace see the result.
  std::string packet = opPacket(node.get_target());
  if (isInPlace(packet) && !outs.empty()) {
    const schema::Argument *self = input(node, "self", 0);
    if (self && self->tag() == schema::Argument::Tag::AS_TENSOR) {
      auto it = values.find(self->get_as_tensor().get_name());
      if (it != values.end() && it->second.kind == Value::Kind::Trace)
        it->second = values[outs[0]];
    }
  }
  (void)index;
}

//===----------------------------------------------------------------------===//
// The program
//===----------------------------------------------------------------------===//

RecordedModule Importer::run() {
  declare();
  const auto &nodes = graph.get_nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    visit(static_cast<int>(i), nodes[i]);

  // Functionalized writes: each mutated target's final value.
  for (const schema::OutputSpec &spec :
       program.get_graph_module().get_signature().get_output_specs()) {
    using Tag = schema::OutputSpec::Tag;
    std::string value, fqn;
    if (spec.tag() == Tag::PARAMETER_MUTATION) {
      value = spec.get_parameter_mutation().get_arg().get_name();
      fqn = spec.get_parameter_mutation().get_parameter_name();
    } else if (spec.tag() == Tag::BUFFER_MUTATION) {
      value = spec.get_buffer_mutation().get_arg().get_name();
      fqn = spec.get_buffer_mutation().get_buffer_name();
    } else {
      continue;
    }
    // The target: the input this output writes back.
    int target = -1;
    for (const schema::InputSpec &in :
         program.get_graph_module().get_signature().get_input_specs()) {
      std::string placeholder;
      if (in.tag() == schema::InputSpec::Tag::PARAMETER &&
          in.get_parameter().get_parameter_name() == fqn)
        placeholder = in.get_parameter().get_arg().get_name();
      if (in.tag() == schema::InputSpec::Tag::BUFFER &&
          in.get_buffer().get_buffer_name() == fqn)
        placeholder = in.get_buffer().get_arg().get_name();
      if (!placeholder.empty()) {
        auto it = values.find(placeholder);
        if (it != values.end() && it->second.kind == Value::Kind::State)
          target = it->second.target;
      }
    }
    if (target < 0)
      continue; // a target the IR cannot hold
    auto it = values.find(value);
    if (it == values.end())
      fail("the program's mutation of '" + fqn + "' is an undefined value");
    Layout whole = targets[target].meta.layout;
    whole.offset = 0;
    writeInto(target, whole, it->second, targets[target].meta.dtype, 0);
  }

  // Reads of targets no name writes are the loader's own business.
  std::map<int, std::vector<size_t>> dropped;
  for (const PendingRead &read : reads)
    if (!writtenStorages.count(read.storage))
      dropped[read.record].push_back(read.line);

  RecordedModule out;
  auto addRecord = [](std::vector<int64_t> &to,
                      const std::vector<int64_t> &entry) {
    to.push_back(static_cast<int64_t>(entry.size()));
    to.insert(to.end(), entry.begin(), entry.end());
  };
  for (const Storage &storage : storages)
    addRecord(out.declarations,
              {static_cast<int64_t>(RecordOp::storage), storage.size});
  for (const Target &target : targets) {
    // module, tensor, storage, byte offset, type, stride...
    std::vector<int64_t> entry = {
        static_cast<int64_t>(RecordOp::target), stringId(target.module),
        stringId(target.tensor), target.storage, target.byteOffset(),
        typeId(target.meta)};
    const std::vector<int64_t> &strides = target.meta.layout.strides;
    entry.insert(entry.end(), strides.begin(), strides.end());
    addRecord(out.declarations, entry);
  }
  for (size_t r = 0; r < records.size(); ++r) {
    const Record &record = records[r];
    out.stringStorage.push_back(record.name);
    RecordedModule::Checkpoint ck;
    ck.name = out.stringStorage.back();
    ck.type = typeId(record.meta);
    ck.begin = out.ops.size();
    if (r == 0)
      for (const std::vector<int64_t> &entry : pending)
        addRecord(out.ops, entry);
    const std::vector<size_t> &drop = dropped[static_cast<int>(r)];
    for (size_t i = 0; i < record.items.size(); ++i)
      if (std::find(drop.begin(), drop.end(), i) == drop.end())
        addRecord(out.ops, record.items[i]);
    ck.end = out.ops.size();
    out.checkpoints.push_back(ck);
  }
  for (const std::string &text : strings) {
    out.stringStorage.push_back(text);
    out.strings.push_back(out.stringStorage.back());
  }
  for (auto &[sizes, dtype] : types) {
    out.typeShapes.push_back(sizes);
    out.typeDtypes.push_back(static_cast<uint32_t>(dtype));
  }
  return out;
}

RecordedModule importProgram(const schema::ExportedProgram &program,
                             const schema::PayloadConfig *weights,
                             Archive &archive) {
  return Importer(program, weights, archive).run();
}

} // namespace mlir::loadplan::torch_export
