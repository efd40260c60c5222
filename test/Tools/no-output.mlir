// loadplan-opt --no-output: the pipeline writes the same plan, JSON and
// report, reports the same errors, and prints no IR.

// RUN: loadplan-opt --loadplan-pipeline="plan=%t.printed json=%t.printed.json" %S/../Examples/llama-tp2-rank1.mlir -o /dev/null
// RUN: loadplan-opt --loadplan-pipeline="plan=%t.plan json=%t.json report=true" --no-output %S/../Examples/llama-tp2-rank1.mlir > %t.stdout 2> %t.report
// RUN: cmp %t.printed %t.plan
// RUN: cmp %t.printed.json %t.json
// RUN: test ! -s %t.stdout
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.report
// REPORT: load plan: {{[0-9]+}} names: {{[0-9]+}} direct

// Errors are diagnostics as without the flag.
// RUN: loadplan-opt --loadplan-pipeline --no-output -verify-diagnostics %s

// An output file with --no-output is a mistake, not silently empty.
// RUN: not loadplan-opt --no-output -o %t.mlir %s 2>&1 | FileCheck %s --check-prefix=OUTFILE
// OUTFILE: loadplan-opt: --no-output prints nothing; drop -o {{.*}}.mlir

loadplan.storage @s size 16
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<4xf32>
// expected-remark @below {{first declared here}}
loadplan.checkpoint "a" : tensor<4xf32> (%w) {
  loadplan.copy %w to @t <offset = 0, shape = [4], stride = [1]> as f32 : tensor<4xf32>
}
// expected-error @below {{checkpoint 'a' is declared twice}}
loadplan.checkpoint "a" : tensor<4xf32> (%w) {
  loadplan.copy %w to @t <offset = 0, shape = [4], stride = [1]> as f32 : tensor<4xf32>
}
