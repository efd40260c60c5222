//===- Compile.cpp - Run the load-plan pipeline in process ------*- C++ -*-===//

#include "Compile.h"

#include "loadplan/Records/RecordBuilder.h"

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Transforms/Passes.h"
#include "loadplan/Transforms/Plan.h"
#include "loadplan/format/PlanJson.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <pthread.h>

using namespace mlir;

/// "file:line:col: severity: message", then its notes, as mlir-opt prints.
static std::string formatDiagnostic(Diagnostic &diag) {
  std::string out;
  llvm::raw_string_ostream os(out);
  auto one = [&](Diagnostic &d) {
    Location loc = d.getLocation();
    if (auto file = dyn_cast<FileLineColLoc>(loc))
      os << file.getFilename().getValue() << ":" << file.getLine() << ":"
         << file.getColumn() << ": ";
    else if (!isa<UnknownLoc>(loc))
      os << loc << ": ";
    switch (d.getSeverity()) {
    case DiagnosticSeverity::Error:
      os << "error: ";
      break;
    case DiagnosticSeverity::Warning:
      os << "warning: ";
      break;
    case DiagnosticSeverity::Note:
      os << "note: ";
      break;
    case DiagnosticSeverity::Remark:
      os << "remark: ";
      break;
    }
    os << d;
  };
  one(diag);
  for (Diagnostic &note : diag.getNotes()) {
    os << "\n";
    one(note);
  }
  return out;
}

namespace {
/// A compiled module, its context and the plan read off it, freed
/// together: the plan, then the module, then the context (the members go in
/// reverse order).
struct Compiled {
  std::unique_ptr<MLIRContext> context;
  OwningOpRef<ModuleOp> module;
  std::optional<loadplan::Plan> plan;
};

class Reaper;
Reaper &reaper();

/// Frees compiled modules on a thread of their own, so that a compile
/// returns once its plan file is made: at 50,000 names, erasing the
/// module's ops and the context's attributes and freeing the plan's
/// vectors is about a tenth of the compile. One module at a time is being
/// freed; the next waits for it, so no more than two are held at once. The
/// process waits for the last one at exit. A forked child (multiprocessing
/// forks on Linux) has no reaper thread: it forgets the parent's, whose
/// module it leaks, and takes the lock as it was before the fork.
class Reaper {
public:
  Reaper() {
    pthread_atfork(
        [] { reaper().lock(); }, [] { reaper().unlock(); },
        [] {
          Reaper &r = reaper();
          r.running = false;
          r.unlock();
        });
  }
  ~Reaper() {
    lock();
    join();
    unlock();
  }

  void free(Compiled doomed) {
    lock();
    join();
    auto *held = new Compiled(std::move(doomed));
    // pthreads, not std::thread: this file builds without exceptions, and
    // a thread that cannot start is no error here.
    if (pthread_create(&worker, nullptr, &Reaper::run, held) == 0)
      running = true;
    else
      delete held;
    unlock();
  }

private:
  static void *run(void *held) {
    delete static_cast<Compiled *>(held);
    return nullptr;
  }
  void lock() { pthread_mutex_lock(&mutex); }
  void unlock() { pthread_mutex_unlock(&mutex); }
  void join() {
    if (running)
      pthread_join(worker, nullptr);
    running = false;
  }

  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_t worker{};
  bool running = false;
};

Reaper &reaper() {
  static Reaper r;
  return r;
}
} // namespace

/// Runs the pipeline on a verified module and reads the plan off it into
/// `result`; returns the plan, for the reaper.
static std::optional<loadplan::Plan>
compileModule(MLIRContext &context, ModuleOp module,
              loadplan_python::CompileResult &result, bool printIR,
              bool printJson) {
  PassManager pm(&context, ModuleOp::getOperationName());
  // The module was verified once; verifying it again after every stage
  // costs more than the stages on large models (the lit tests run each pass
  // with verification, and the runtime checks every plan it opens).
  pm.enableVerifier(false);
  loadplan::PipelineOptions options;
  loadplan::buildLoadPlanPipeline(pm, options);
  if (failed(pm.run(module))) {
    if (result.errors.empty())
      result.errors.push_back("the load-plan pipeline failed");
    return std::nullopt;
  }

  FailureOr<loadplan::Plan> plan = loadplan::buildPlan(module);
  if (failed(plan)) {
    if (result.errors.empty())
      result.errors.push_back("cannot read the plan off the compiled IR");
    return std::nullopt;
  }
  if (printJson)
    result.json = ::loadplan_format::planJson(*plan);
  result.plan = loadplan::serializePlan(*plan);
  {
    llvm::raw_string_ostream os(result.report);
    loadplan::printPlanReport(*plan, os,
                              loadplan::secondsSinceCompileStart());
  }
  if (printIR) {
    llvm::raw_string_ostream os(result.compiledIR);
    module->print(os);
  }
  result.ok = result.errors.empty();
  return std::move(*plan);
}

namespace {
/// One compilation's context, with its diagnostics collected into `result`.
struct Session {
  loadplan_python::CompileResult &result;
  DialectRegistry registry;
  std::unique_ptr<MLIRContext> context;
  std::unique_ptr<ScopedDiagnosticHandler> handler;

  explicit Session(loadplan_python::CompileResult &result) : result(result) {
    registry.insert<loadplan::LoadPlanDialect>();
    // One compilation per call: no thread pool to start or to leak.
    context = std::make_unique<MLIRContext>(registry,
                                            MLIRContext::Threading::DISABLED);
    context->loadAllAvailableDialects();
    // The messages name the op by its location; its generic form is noise.
    context->printOpOnDiagnostic(false);
    handler = std::make_unique<ScopedDiagnosticHandler>(
        context.get(), [&result](Diagnostic &diag) {
          std::string text = formatDiagnostic(diag);
          if (diag.getSeverity() == DiagnosticSeverity::Error)
            result.errors.push_back(std::move(text));
          else
            result.remarks.push_back(std::move(text));
          return success();
        });
  }

  /// `text` as a module, or null with the reason in `result`.
  OwningOpRef<ModuleOp> parse(const std::string &text,
                              const std::string &sourceName, bool verify) {
    ParserConfig config(context.get(), /*verifyAfterParse=*/verify);
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(text, config, sourceName);
    if (!module && result.errors.empty())
      result.errors.push_back("cannot parse the captured IR");
    return module;
  }

  /// Compiles the verified `module` into `result`, then hands the context,
  /// the module and the plan to the reaper: nothing reports into `result`
  /// after this.
  void compile(OwningOpRef<ModuleOp> module, bool printIR, bool printJson) {
    std::optional<loadplan::Plan> plan =
        compileModule(*context, *module, result, printIR, printJson);
    handler.reset();
    reaper().free(
        Compiled{std::move(context), std::move(module), std::move(plan)});
  }
};
} // namespace

loadplan_python::CompileResult
loadplan_python::compile(const std::string &ir, const std::string &sourceName,
                         bool printIR, bool printJson) {
  CompileResult result;
  Session session(result);
  if (OwningOpRef<ModuleOp> module =
          session.parse(ir, sourceName, /*verify=*/true))
    session.compile(std::move(module), printIR, printJson);
  return result;
}

/// compileRecords, for its result or for its diagnostics: the second
/// builds each name's checkpoint at its name's location.
static loadplan_python::CompileResult
compileRecordsOnce(const loadplan::RecordedModule &records,
                   const std::string &sourceName, bool printIR, bool printJson,
                   bool forDiagnostics) {
  loadplan_python::CompileResult result;
  Session session(result);
  loadplan::RecordBuildOptions options;
  options.nameLocations = forDiagnostics;
  options.groupNames = !forDiagnostics;
  options.foldWholeSlices = true;
  OwningOpRef<ModuleOp> module = loadplan::buildRecordedModule(
      session.context.get(), records, sourceName, options);
  if (!module || failed(verify(*module))) {
    if (result.errors.empty())
      result.errors.push_back("the captured records do not make a module");
    return result;
  }
  session.compile(std::move(module), printIR, printJson);
  return result;
}

loadplan_python::CompileResult
loadplan_python::compileRecords(const loadplan::RecordedModule &records,
                                const std::string &sourceName, bool printIR,
                                bool printJson) {
  // A compile that succeeds reports nothing at a built op: its remarks are
  // the targets' (text, with their lines). A NameLoc per name (one more
  // uniqued object each, in a table of 50,000) is about a sixth of the
  // compile, so the first try goes without them, and with names that did
  // the same as members of one checkpoint. One that fails is compiled again
  // name by name, each at its location, so that its diagnostics are those
  // of the module the text parses to.
  CompileResult result = compileRecordsOnce(records, sourceName, printIR,
                                            printJson, /*forDiagnostics=*/false);
  if (result.ok)
    return result;
  return compileRecordsOnce(records, sourceName, printIR, printJson,
                            /*forDiagnostics=*/true);
}

loadplan_python::CompileResult
loadplan_python::printRecords(const loadplan::RecordedModule &records,
                              const std::string &sourceName) {
  CompileResult result;
  Session session(result);
  OwningOpRef<ModuleOp> module = loadplan::buildRecordedModule(
      session.context.get(), records, sourceName, {});
  if (!module) {
    if (result.errors.empty())
      result.errors.push_back("the captured records do not make a module");
    return result;
  }
  // As built, whether it verifies or not: the text of a capture the
  // compiler refuses is what says why.
  llvm::raw_string_ostream os(result.compiledIR);
  module->print(os, OpPrintingFlags().assumeVerified());
  result.ok = true;
  return result;
}

const char *loadplan_python::compilerMissing() { return nullptr; }
