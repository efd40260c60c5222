// REQUIRES: torch-import
// An input that is not a .pt2 archive: a clear error and a non-zero exit.
// RUN: ! loadplan-translate --import-torch-export %s 2> %t.err
// RUN: FileCheck %s < %t.err
// RUN: printf "" > %t.empty
// RUN: ! loadplan-translate --import-torch-export %t.empty 2> %t.empty.err
// RUN: FileCheck %s --check-prefix=EMPTY < %t.empty.err

// CHECK: error: cannot import torch.export program: not a readable .pt2 archive
// EMPTY: error: cannot import torch.export program:
