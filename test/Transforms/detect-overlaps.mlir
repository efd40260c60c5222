// RUN: loadplan-opt --loadplan-detect-overlaps --split-input-file %s | FileCheck %s
// RUN: loadplan-opt --loadplan-detect-overlaps=max-runs=2 --split-input-file %s | FileCheck %s --check-prefix=SPAN

// Names whose writes share a byte fall back: direct writes land in any
// order.

module {
  loadplan.storage @s size 1024
  loadplan.target @g_idx module "mlp" tensor "g_idx" storage @s byte_offset 0 stride [1] : tensor<16xi32>
  // w1 and w3 both write g_idx: both fall back, each naming the other.
  // CHECK-LABEL: loadplan.checkpoint "w1.g_idx"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'w3.g_idx'"
  // CHECK-LABEL: loadplan.checkpoint "w3.g_idx"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'w1.g_idx'"
  loadplan.checkpoint "w1.g_idx" : tensor<16xi32> (%w) {
    loadplan.write @g_idx box <[0, 16]> region <offset = 0, shape = [16], stride = [1]>
  }
  loadplan.checkpoint "w3.g_idx" : tensor<16xi32> (%w) {
    loadplan.write @g_idx box <[0, 16]> region <offset = 0, shape = [16], stride = [1]>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @qkv module "attn.qkv_proj" tensor "weight" storage @s byte_offset 0 stride [8, 1] : tensor<12x8xbf16>
  loadplan.target @o module "attn.o_proj" tensor "weight" storage @s byte_offset 192 stride [8, 1] : tensor<8x8xbf16>
  // Writes that touch without sharing a byte do not overlap, in one target
  // or across two targets of one storage.
  // CHECK-LABEL: loadplan.checkpoint "q"
  // CHECK-NEXT:    loadplan.write
  // CHECK-LABEL: loadplan.checkpoint "k"
  // CHECK-NEXT:    loadplan.write
  // CHECK-LABEL: loadplan.checkpoint "v"
  // CHECK-NEXT:    loadplan.write
  // CHECK-LABEL: loadplan.checkpoint "o"
  // CHECK-NEXT:    loadplan.write
  loadplan.checkpoint "q" : tensor<4x8xbf16> (%w) {
    loadplan.write @qkv box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 8], stride = [8, 1]>
  }
  loadplan.checkpoint "k" : tensor<4x8xbf16> (%w) {
    loadplan.write @qkv box <[0, 4], [0, 8]> region <offset = 32, shape = [4, 8], stride = [8, 1]>
  }
  loadplan.checkpoint "v" : tensor<4x8xbf16> (%w) {
    loadplan.write @qkv box <[0, 4], [0, 8]> region <offset = 64, shape = [4, 8], stride = [8, 1]>
  }
  loadplan.checkpoint "o" : tensor<8x8xbf16> (%w) {
    loadplan.write @o box <[0, 8], [0, 8]> region <offset = 0, shape = [8, 8], stride = [8, 1]>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
  // Interleaved columns: the halves of each row never share a byte. With a
  // covering span per write (max-runs=2), they do.
  // CHECK-LABEL: loadplan.checkpoint "left"
  // CHECK-NEXT:    loadplan.write
  // CHECK-LABEL: loadplan.checkpoint "right"
  // CHECK-NEXT:    loadplan.write
  // SPAN-LABEL:  loadplan.checkpoint "left"
  // SPAN-NEXT:     loadplan.fallback "writes overlap with 'right'"
  // SPAN-LABEL:  loadplan.checkpoint "right"
  // SPAN-NEXT:     loadplan.fallback "writes overlap with 'left'"
  loadplan.checkpoint "left" : tensor<4x4xbf16> (%w) {
    loadplan.write @p box <[0, 4], [0, 4]> region <offset = 0, shape = [4, 4], stride = [8, 1]>
  }
  loadplan.checkpoint "right" : tensor<4x4xbf16> (%w) {
    loadplan.write @p box <[0, 4], [0, 4]> region <offset = 4, shape = [4, 4], stride = [8, 1]>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<64xbf16>
  // A name that is direct falls back because another name, itself a
  // fallback, writes the same bytes; the other keeps its own reason.
  // CHECK-LABEL: loadplan.checkpoint "scaled"
  // CHECK-NEXT:    loadplan.fallback "applies aten.mul.Tensor to it"
  // CHECK-NOT:     loadplan.fallback
  // CHECK-LABEL: loadplan.checkpoint "plain"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'scaled'"
  loadplan.checkpoint "scaled" : tensor<8xbf16> (%w) {
    loadplan.fallback "applies aten.mul.Tensor to it"
    %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
    loadplan.copy %0 to @p <offset = 4, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  loadplan.checkpoint "plain" : tensor<8xbf16> (%w) {
    loadplan.write @p box <[0, 8]> region <offset = 8, shape = [8], stride = [1]>
  }
  // A name whose loader stopped writes nothing: no overlap.
  // CHECK-LABEL: loadplan.checkpoint "stopped"
  // CHECK-NEXT:    loadplan.fallback "its loader reads its values (aten.item)" stop
  // CHECK-NOT:     loadplan.fallback
  // CHECK-LABEL: loadplan.checkpoint "after_stopped"
  // CHECK-NEXT:    loadplan.write
  loadplan.checkpoint "stopped" : tensor<8xbf16> (%w) {
    loadplan.fallback "its loader reads its values (aten.item)" stop
    loadplan.write @p box <[0, 8]> region <offset = 32, shape = [8], stride = [1]>
  }
  loadplan.checkpoint "after_stopped" : tensor<8xbf16> (%w) {
    loadplan.write @p box <[0, 8]> region <offset = 32, shape = [8], stride = [1]>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.storage @t size 1024
  loadplan.target @a module "m" tensor "a" storage @s byte_offset 0 stride [1] : tensor<64xbf16>
  loadplan.target @b module "m" tensor "b" storage @t byte_offset 0 stride [1] : tensor<64xbf16>
  // The same offsets in two storages are different bytes.
  // CHECK-LABEL: loadplan.checkpoint "in_s"
  // CHECK-NEXT:    loadplan.write
  // CHECK-LABEL: loadplan.checkpoint "in_t"
  // CHECK-NEXT:    loadplan.write
  loadplan.checkpoint "in_s" : tensor<8xbf16> (%w) {
    loadplan.write @a box <[0, 8]> region <offset = 0, shape = [8], stride = [1]>
  }
  loadplan.checkpoint "in_t" : tensor<8xbf16> (%w) {
    loadplan.write @b box <[0, 8]> region <offset = 0, shape = [8], stride = [1]>
  }
  // A long write under several short ones: every name meets another. The
  // sweep names the one whose bytes it met first.
  // CHECK-LABEL: loadplan.checkpoint "long"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'short1'"
  // CHECK-LABEL: loadplan.checkpoint "short1"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'long'"
  // CHECK-LABEL: loadplan.checkpoint "short2"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'long'"
  // CHECK-LABEL: loadplan.checkpoint "apart"
  // CHECK-NEXT:    loadplan.write
  loadplan.checkpoint "long" : tensor<32xbf16> (%w) {
    loadplan.write @a box <[0, 32]> region <offset = 16, shape = [32], stride = [1]>
  }
  loadplan.checkpoint "short1" : tensor<4xbf16> (%w) {
    loadplan.write @a box <[0, 4]> region <offset = 20, shape = [4], stride = [1]>
  }
  loadplan.checkpoint "short2" : tensor<4xbf16> (%w) {
    loadplan.write @a box <[0, 4]> region <offset = 44, shape = [4], stride = [1]>
  }
  loadplan.checkpoint "apart" : tensor<4xbf16> (%w) {
    loadplan.write @a box <[0, 4]> region <offset = 48, shape = [4], stride = [1]>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<64xbf16>
  // A name writing one byte twice (the loader writes one slot from two
  // parts of its tensor; the last write wins) falls back too.
  // CHECK-LABEL: loadplan.checkpoint "twice"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'twice'"
  loadplan.checkpoint "twice" : tensor<8xbf16> (%w) {
    loadplan.write @p box <[0, 4]> region <offset = 0, shape = [4], stride = [1]>
    loadplan.write @p box <[4, 8]> region <offset = 2, shape = [4], stride = [1]>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<64xf32>
  // A converting write's bytes are those of the dtype it writes: 4 f32
  // elements from bf16 are bytes [0, 16), which a bf16 write at element 6
  // (bytes [12, 20)) meets.
  // CHECK-LABEL: loadplan.checkpoint "wide"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'narrow'"
  loadplan.checkpoint "wide" : tensor<4xbf16> (%w) {
    loadplan.write @p box <[0, 4]> region <offset = 0, shape = [4], stride = [1]> as f32
  }
  // CHECK-LABEL: loadplan.checkpoint "narrow"
  // CHECK-NEXT:    loadplan.fallback "writes overlap with 'wide'"
  loadplan.checkpoint "narrow" : tensor<4xbf16> (%w) {
    loadplan.write @p box <[0, 4]> region <offset = 6, shape = [4], stride = [1]>
  }
  // Bytes [20, 36) as f32 from fp8 meet nothing.
  // CHECK-LABEL: loadplan.checkpoint "beside"
  // CHECK-NEXT:    loadplan.write
  loadplan.checkpoint "beside" : tensor<4xf8E4M3FN> (%w) {
    loadplan.write @p box <[0, 4]> region <offset = 5, shape = [4], stride = [1]> as f32
  }
}
