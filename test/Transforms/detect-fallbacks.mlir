// RUN: loadplan-opt --loadplan-fold-views --loadplan-to-boxes --loadplan-detect-fallbacks --split-input-file --verify-diagnostics %s | FileCheck %s
// The pass finds the same on its own output (no name turns lonely there).
// RUN: loadplan-opt --loadplan-fold-views --loadplan-to-boxes --loadplan-detect-fallbacks --split-input-file --verify-diagnostics %s | loadplan-opt --loadplan-detect-fallbacks --split-input-file | FileCheck %s

// Each name gets at most one loadplan.fallback, first in its body, with the
// reason of its first event; events are then erased.

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // A value read stops the loader: the name falls back and what it wrote
  // before is dropped.
  // CHECK-LABEL: loadplan.checkpoint "value_read"
  // CHECK-NEXT:    loadplan.fallback "its loader reads its values (aten._local_scalar_dense)" stop
  // CHECK-NOT:     loadplan.write
  // CHECK-NOT:     loadplan.value_read
  // CHECK:       }
  loadplan.checkpoint "value_read" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
    %0 = loadplan.select %w dim 0 index 0 : tensor<8xbf16> -> tensor<bf16>
    loadplan.value_read %0 op "aten._local_scalar_dense" : tensor<bf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "meta_failure"
  // CHECK-NEXT:    loadplan.fallback "aten.nonzero fails on meta" stop
  // CHECK-NEXT:  }
  loadplan.checkpoint "meta_failure" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 8, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
    loadplan.inplace_write "aten.add_" (%w) into @p : tensor<8xbf16>
    loadplan.meta_failure "aten.nonzero" (%w) : tensor<8xbf16>
  }
  // A stop wins over an earlier reason that did not stop the loader.
  // CHECK-LABEL: loadplan.checkpoint "stop_wins"
  // CHECK-NEXT:    loadplan.fallback "its loader reads its values (aten.tolist)" stop
  loadplan.checkpoint "stop_wins" : tensor<8xbf16> (%w) {
    %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
    loadplan.copy %0 to @p <offset = 16, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
    loadplan.value_read %w op "aten.tolist" : tensor<8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.storage @other size 64
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // CHECK-LABEL: loadplan.checkpoint "apply"
  // CHECK-NEXT:    loadplan.fallback "applies aten.mul.Tensor to it"{{$}}
  // The copy stays: later stages still see the bytes it writes.
  // CHECK:         loadplan.copy
  loadplan.checkpoint "apply" : tensor<8xbf16> (%w) {
    %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "convert"
  // A cast no write does (conversions between bf16, f16, f32 and fp8 are
  // writes: see to-boxes-convert.mlir).
  // CHECK-NEXT:    loadplan.fallback "casts bfloat16 to float64 (send it as float64 to make it direct)"{{$}}
  loadplan.checkpoint "convert" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf64>
    loadplan.copy %0 to @p <offset = 2, shape = [8], stride = [1]> as f64 : tensor<8xf64>
  }
  // CHECK-LABEL: loadplan.checkpoint "cast_at_copy"
  // CHECK-NEXT:    loadplan.fallback "casts bfloat16 to int8 at copy_ (send it as int8 to make it direct)"{{$}}
  loadplan.checkpoint "cast_at_copy" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 32, shape = [8], stride = [1]> as i8 : tensor<8xbf16>
  }
  // The write stays: it shows that the name wrote (it is not lonely).
  // CHECK-LABEL: loadplan.checkpoint "inplace_write"
  // CHECK-NEXT:    loadplan.fallback "writes it without Tensor.copy_ (aten.add_)"{{$}}
  // CHECK-NEXT:    loadplan.inplace_write "aten.add_"
  // CHECK-NEXT:  }
  loadplan.checkpoint "inplace_write" : tensor<8xbf16> (%w) {
    loadplan.inplace_write "aten.add_" (%w) into @p : tensor<8xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "write_other"
  // CHECK-NEXT:    loadplan.fallback "copies into a tensor that is not a checkpoint tensor"{{$}}
  // CHECK-NEXT:    loadplan.write_other "aten.copy_"
  // CHECK-NEXT:  }
  loadplan.checkpoint "write_other" : tensor<8xbf16> (%w) {
    loadplan.write_other "aten.copy_" (%w) : tensor<8xbf16>
  }
  // As in the seeds, a reason recorded while tracing beats a refused copy,
  // even one that came first.
  // CHECK-LABEL: loadplan.checkpoint "event_beats_copy"
  // CHECK-NEXT:    loadplan.fallback "writes it without Tensor.copy_ (aten.mul_)"{{$}}
  // CHECK-NOT:     loadplan.fallback
  // CHECK:       }
  loadplan.checkpoint "event_beats_copy" : tensor<8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 8 step 2 : tensor<8xbf16> -> tensor<4xbf16>
    loadplan.copy %0 to @p <offset = 24, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
    loadplan.inplace_write "aten.mul_" (%w) into @p : tensor<8xbf16>
  }
  // Among events, and among refused copies, the first in program order wins.
  // CHECK-LABEL: loadplan.checkpoint "first_event"
  // CHECK-NEXT:    loadplan.fallback "casts bfloat16 to float64 (send it as float64 to make it direct)"{{$}}
  // CHECK-NOT:     loadplan.fallback
  // CHECK:       }
  loadplan.checkpoint "first_event" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf64>
    %1 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
    loadplan.copy %1 to @p <offset = 40, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "first_refused_copy"
  // CHECK-NEXT:    loadplan.fallback "writes one destination element twice"{{$}}
  // CHECK-NOT:     loadplan.fallback
  // CHECK:       }
  loadplan.checkpoint "first_refused_copy" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 48, shape = [2, 4], stride = [0, 1]> as bf16 : tensor<8xbf16>
    loadplan.copy %w to @p <offset = 56, shape = [8], stride = [1]> as f32 : tensor<8xbf16>
  }
  // A copy of no element counts as a write: a fallback whose only copy is
  // empty is not lonely (the seeds count it).
  // CHECK-LABEL: loadplan.checkpoint "empty_copy_wrote"
  // CHECK-NEXT:    loadplan.fallback "applies aten.mul.Tensor to it"{{$}}
  // CHECK:         loadplan.copy %{{.*}} shape = [0]
  loadplan.checkpoint "empty_copy_wrote" : tensor<8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 8 end 8 step 1 : tensor<8xbf16> -> tensor<0xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [0], stride = [1]> as bf16 : tensor<0xbf16>
    %1 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
  }
  // A direct name drops its empty copy.
  // CHECK-LABEL: loadplan.checkpoint "empty_copy_direct"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "empty_copy_direct" : tensor<8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 8 end 8 step 1 : tensor<8xbf16> -> tensor<0xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [0], stride = [1]> as bf16 : tensor<0xbf16>
    %1 = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<8xbf16> -> tensor<4xbf16>
    loadplan.copy %1 to @p <offset = 64, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
  // A name without events stays direct.
  // CHECK-LABEL: loadplan.checkpoint "direct"
  // CHECK-NEXT:    loadplan.write
  // CHECK-NEXT:  }
  loadplan.checkpoint "direct" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 32, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @gate module "mlp.gate_up_proj" tensor "weight" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.target @up module "mlp.gate_up_proj" tensor "weight_up" storage @s byte_offset 32 stride [1] : tensor<16xbf16>
  // A read of a target blames the last name written into its storage
  // (here through another target of the same storage), not the reader.
  // CHECK-LABEL: loadplan.checkpoint "gate"
  // CHECK-NEXT:    loadplan.fallback "its loader reads the destination (aten.mul.Tensor)"{{$}}
  // CHECK-NEXT:    loadplan.write @gate
  loadplan.checkpoint "gate" : tensor<16xbf16> (%w) {
    loadplan.copy %w to @gate <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "up"
  // CHECK-NEXT:    loadplan.write @up
  // CHECK-NEXT:  }
  loadplan.checkpoint "up" : tensor<16xbf16> (%w) {
    loadplan.read_target @up op "aten.mul.Tensor"
    loadplan.copy %w to @up <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
  // The last writer is the last in arrival order.
  // CHECK-LABEL: loadplan.checkpoint "up.again"
  // CHECK-NEXT:    loadplan.fallback "its loader reads the destination (aten.equal)"{{$}}
  loadplan.checkpoint "up.again" : tensor<16xbf16> (%w) {
    loadplan.copy %w to @up <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "checker"
  // CHECK-NEXT:    loadplan.write @gate
  // CHECK-NEXT:  }
  loadplan.checkpoint "checker" : tensor<16xbf16> (%w) {
    loadplan.read_target @gate op "aten.equal"
    loadplan.copy %w to @gate <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
  // A mirror copied from the parameter (mirror.copy_(param)) reads it too.
  // CHECK-LABEL: loadplan.checkpoint "mirrored"
  // CHECK-NEXT:    loadplan.fallback "its loader reads the destination (aten.copy_)"{{$}}
  loadplan.checkpoint "mirrored" : tensor<16xbf16> (%w) {
    loadplan.copy %w to @gate <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
    loadplan.read_target @gate op "aten.copy_"
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  // With no writer of the storage yet, the reader itself falls back
  // (composed_weight_loader: param.copy_(fn(param))).
  // CHECK-LABEL: loadplan.checkpoint "composed"
  // CHECK-NEXT:    loadplan.fallback "its loader reads the destination (aten.exp)"{{$}}
  // CHECK-NEXT:    loadplan.write @p
  loadplan.checkpoint "composed" : tensor<16xbf16> (%w) {
    loadplan.read_target @p op "aten.exp"
    loadplan.copy %w to @p <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  // A loader that combines w1 and w3 (keeps w1, cats it with w3): w1 falls
  // back but writes nothing itself.
  // expected-error @+1 {{fallback name 'w1' writes nothing itself (applies aten.cat to it): its loader combines several checkpoint tensors; move the combine into post-load processing (process_weights_after_loading)}}
  loadplan.checkpoint "w1" : tensor<8xbf16> (%w) {
  }
  loadplan.checkpoint "w3" : tensor<8xbf16> (%w) {
    %0 = loadplan.apply "aten.cat" (%w) {names = ["w1"]} : (tensor<8xbf16>) -> tensor<16xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  // A read of a destination before anything was written into it, by a
  // loader that then writes nothing.
  // expected-error @+1 {{fallback name 'reader' writes nothing itself (its loader reads the destination (aten.equal))}}
  loadplan.checkpoint "reader" : tensor<16xbf16> (%w) {
    loadplan.read_target @p op "aten.equal"
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  // A name whose loader stopped is not lonely: it never got to write.
  // CHECK-LABEL: loadplan.checkpoint "scalar"
  // CHECK-NEXT:    loadplan.fallback "its loader reads its values (aten._local_scalar_dense)" stop
  loadplan.checkpoint "scalar" : tensor<bf16> (%w) {
    loadplan.value_read %w op "aten._local_scalar_dense" : tensor<bf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  // expected-remark @+1 {{first declared here}}
  loadplan.checkpoint "w" : tensor<16xbf16> (%w) {
    loadplan.copy %w to @p <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
  // expected-error @+1 {{checkpoint 'w' is declared twice}}
  loadplan.checkpoint "w" : tensor<16xbf16> (%w) {
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.checkpoint "w3" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{names checkpoint 'w9', which is not declared}}
    %0 = loadplan.apply "aten.cat" (%w) {names = ["w9"]} : (tensor<8xbf16>) -> tensor<16xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
}
