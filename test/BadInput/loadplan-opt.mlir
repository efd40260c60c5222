// The bad-input table of loadplan-opt: one case per class of user error the
// tool reports on IR headed for a plan (parse and verifier errors, the
// passes' errors, what no plan file can hold), each with its exact message.
// The compiler's live output is the plan file: no failing case may write,
// truncate or remove the plan that is already there.

// RUN: printf 'the plan of an earlier compile' > %t.plan
// RUN: loadplan-opt --loadplan-pipeline="plan=%t.plan" -split-input-file -verify-diagnostics %s -o /dev/null
// RUN: printf 'the plan of an earlier compile' | cmp - %t.plan
// RUN: ! loadplan-opt --loadplan-pipeline="plan=%t.plan" -split-input-file %s -o /dev/null 2> /dev/null
// RUN: printf 'the plan of an earlier compile' | cmp - %t.plan

// A write that fails: on a full disk (/dev/full) with an error, not a crash;
// past the file size limit part way (SIGXFSZ, which LLVM's handlers report
// as a crash) without touching the earlier plan.
// RUN: ( ! loadplan-opt --loadplan-emit-plan=/dev/full %S/../Transforms/emit-plan.mlir -o /dev/null 2>&1 ) | FileCheck %s --check-prefix=FULL
// FULL: error: cannot write the plan to '/dev/full': No space left on device
// RUN: ( ulimit -f 0; ! loadplan-opt --loadplan-emit-plan=%t.plan %S/../Transforms/emit-plan.mlir -o /dev/null ) > /dev/null 2>&1
// RUN: printf 'the plan of an earlier compile' | cmp - %t.plan
// RUN: ls %t.plan* | count 1
// The JSON is written before the plan: a JSON that cannot be written fails
// the compile with the earlier plan in place.
// RUN: ! loadplan-opt --loadplan-pipeline="plan=%t.plan json=/dev/full" %S/../Examples/llama-tp2-rank1.mlir -o /dev/null 2> /dev/null
// RUN: printf 'the plan of an earlier compile' | cmp - %t.plan

// Through a link, the new plan lands in the file the link names.
// RUN: rm -f %t.link && printf 'an earlier plan' > %t.real && ln -s %t.real %t.link
// RUN: loadplan-opt --loadplan-emit-plan=%t.link %S/../Transforms/emit-plan.mlir -o /dev/null 2> /dev/null
// RUN: test -L %t.link && head -c 8 %t.real | FileCheck %s --check-prefix=MAGIC
// MAGIC: LOADPLAN

//===----------------------------------------------------------------------===//
// Parse errors
//===----------------------------------------------------------------------===//

// A layout without its offset.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{expected 'offset'}}
    loadplan.copy %w to @t <shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

// A box range of three numbers.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{a box range is [start, stop], got 3 numbers}}
    loadplan.write @t box <[0, 8, 1]> region <offset = 0, shape = [8], stride = [1]>
  }
}

// -----

// A checkpoint tensor of unknown shape.
module {
  // expected-error @+1 {{'loadplan.checkpoint' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of fewer than 2^63 elements}}
  loadplan.checkpoint "w" : tensor<?xbf16> (%w) {
  }
}

//===----------------------------------------------------------------------===//
// Verifier errors
//===----------------------------------------------------------------------===//

// -----

// A layout with a negative stride.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{layout stride of dim 0 must be non-negative, got -1}}
    loadplan.copy %w to @t <offset = 7, shape = [8], stride = [-1]> as bf16 : tensor<8xbf16>
  }
}

// -----

// A region that writes one element twice.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{region dim 0 has stride 0 and size 8: it would write one element twice}}
    loadplan.write @t box <[0, 8]> region <offset = 0, shape = [8], stride = [0]>
  }
}

// -----

// A box whose start is past its stop.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{box range of dim 0 must satisfy 0 <= start <= stop, got [6, 2]}}
    loadplan.write @t box <[6, 2]> region <offset = 0, shape = [0], stride = [1]>
  }
}

// -----

// A target past the end of its storage.
module {
  loadplan.storage @s size 16
  // expected-error @+1 {{'loadplan.target' op ends at byte 18 of storage @s, which has 16 bytes}}
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 2 stride [1] : tensor<8xbf16>
}

// -----

// A target between two elements.
module {
  loadplan.storage @s size 64
  // expected-error @+1 {{'loadplan.target' op byte_offset 3 is not a multiple of its element size 2}}
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 3 stride [1] : tensor<8xbf16>
}

// -----

// A target in a storage that is not declared.
module {
  // expected-error @+1 {{'loadplan.target' op @missing does not name a loadplan.storage}}
  loadplan.target @t module "m" tensor "w" storage @missing byte_offset 0 stride [1] : tensor<8xbf16>
}

// -----

// A write's region outside its storage.
module {
  loadplan.storage @s size 16
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{'loadplan.write' op region covers bytes [8, 24) of storage @s, which has 16 bytes}}
    loadplan.write @t box <[0, 8]> region <offset = 4, shape = [8], stride = [1]>
  }
}

// -----

// A write's box outside its checkpoint tensor.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{'loadplan.write' op box range [4, 12) of dim 0 exceeds its size 8}}
    loadplan.write @t box <[4, 12]> region <offset = 0, shape = [8], stride = [1]>
  }
}

// -----

// A write whose region and box differ in size.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{'loadplan.write' op region has 4 elements but the box has 8}}
    loadplan.write @t box <[0, 8]> region <offset = 0, shape = [4], stride = [1]>
  }
}

// -----

// A copy into a target that is not declared.
module {
  loadplan.storage @s size 64
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{'loadplan.copy' op @missing does not name a loadplan.target}}
    loadplan.copy %w to @missing <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

// A copy past the end of its storage.
module {
  loadplan.storage @s size 16
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{'loadplan.copy' op destination covers bytes [2, 18) of storage @s, which has 16 bytes}}
    loadplan.copy %w to @t <offset = 1, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

// A view of a shape torch would not give.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<2x4xbf16> (%w) {
    // expected-error @+1 {{'loadplan.transpose' op result shape [2, 4] differs from the shape torch gives, [4, 2]}}
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<2x4xbf16> -> tensor<2x4xbf16>
  }
}

// -----

// A body whose argument is not the checkpoint tensor.
module {
  // expected-error @+1 {{'loadplan.checkpoint' op body must take one argument of the checkpoint type 'tensor<8xbf16>'}}
  "loadplan.checkpoint"() <{name = "w", type = tensor<8xbf16>}> ({
  ^bb0(%w: tensor<4xbf16>):
  }) : () -> ()
}

//===----------------------------------------------------------------------===//
// Errors of the passes: the loader must change
//===----------------------------------------------------------------------===//

// -----

// A checkpoint declared twice.
module {
  loadplan.storage @s size 32
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  // expected-remark @+1 {{first declared here}}
  loadplan.checkpoint "w" : tensor<16xbf16> (%w) {
    loadplan.copy %w to @t <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
  // expected-error @+1 {{checkpoint 'w' is declared twice}}
  loadplan.checkpoint "w" : tensor<16xbf16> (%w) {
  }
}

// -----

// An apply that names a checkpoint nobody declares.
module {
  loadplan.storage @s size 32
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.checkpoint "w3" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{names checkpoint 'w9', which is not declared}}
    %0 = loadplan.apply "aten.cat" (%w) {names = ["w9"]} : (tensor<8xbf16>) -> tensor<16xbf16>
    loadplan.copy %0 to @t <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
}

// -----

// A fallback whose loader writes nothing itself.
module {
  loadplan.storage @s size 32
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  // expected-error @+1 {{fallback name 'w1' writes nothing itself (applies aten.cat to it): its loader combines several checkpoint tensors; move the combine into post-load processing (process_weights_after_loading)}}
  loadplan.checkpoint "w1" : tensor<8xbf16> (%w) {
  }
  loadplan.checkpoint "w3" : tensor<8xbf16> (%w) {
    %0 = loadplan.apply "aten.cat" (%w) {names = ["w1"]} : (tensor<8xbf16>) -> tensor<16xbf16>
    loadplan.copy %0 to @t <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
}

//===----------------------------------------------------------------------===//
// What no plan file holds
//===----------------------------------------------------------------------===//

// -----

// A checkpoint dtype without a plan code.
module {
  loadplan.storage @s size 16
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "v" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  // expected-error @+1 {{dtype has no plan code}}
  loadplan.checkpoint "w" : tensor<8xf8E4M3> (%w) {
  }
}

// -----

// A target dtype without a plan code.
module {
  loadplan.storage @s size 16
  // expected-remark @+2 {{target 'm.w' has 16 bytes no name writes (first gap: bytes [0, 16) of storage @s)}}
  // expected-error @+1 {{dtype has no plan code}}
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<16xi4>
}

// -----

// A checkpoint tensor of 2^63 bytes.
module {
  loadplan.storage @s size 16
  loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  // expected-error @+1 {{has 2^63 bytes or more, more than a plan file holds}}
  loadplan.checkpoint "w" : tensor<4611686018427387904xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 8 step 1 : tensor<4611686018427387904xbf16> -> tensor<8xbf16>
    loadplan.copy %0 to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}
