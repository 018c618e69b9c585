// Where a block scale lives in memory (SPEC 4): the plain row-major "linear" layout, or the
// cuBLAS / tcgen05 128x4 "swizzled" atom that torch._scaled_mm consumes. Kernels are templates
// over the layout, so a quantizer writes swizzled scales directly and a dequantizer reads them
// directly; both index by the linear scale position s = (matrix * rows + row) * cols + col.
#pragma once

#include <cstdint>

#include "fp4_format.h"

namespace fp4ops {

// n / d for 32-bit n by a multiply and shifts (Granlund-Montgomery), d fixed per launch: the
// per-block index math of the swizzled layout would otherwise cost two integer divisions (each a
// long instruction sequence on the GPU) on the ALU pipe, the 16-bit quantizers' busiest.
struct FastDivU32 {
  uint32_t d;
  uint32_t magic;
  uint32_t shift;  // ceil(log2(d))

  static FastDivU32 make(uint32_t d) {
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    const uint64_t magic = (uint64_t{1} << 32) * ((uint64_t{1} << l) - d) / d + 1;
    return {d, static_cast<uint32_t>(magic), l};
  }

  FP4OPS_HD uint32_t div(uint32_t n) const {
    if (d == 1) return n;
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(magic, n);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(magic) * n) >> 32);
#endif
    return (t + ((n - t) >> 1)) >> (shift - 1);
  }
};

// The quantizers walk their blocks as "items" 0, 1, 2, ... in an order the layout picks, so that
// consecutive items (a warp's lanes) store consecutive scale bytes: item u is block
// block_at(u), whose scale byte sits at scale_at(u, block). Linear: the identity.
struct LinearScales {
  FP4OPS_HD int64_t offset(int64_t s) const { return s; }
  // Scale s, known to be (matrix, row i, column j): s itself.
  FP4OPS_HD int64_t offset(int64_t s, int64_t, int64_t, int64_t) const { return s; }
  FP4OPS_HD int64_t block_at(int64_t item) const { return item; }
  FP4OPS_HD int64_t scale_at(int64_t, int64_t block) const { return block; }
};

// Scales of a tensor [..., rows, K] with cols = K / block scale columns per row: each leading
// batch index is one matrix of ceil(rows / 128) x ceil(cols / 4) atoms of 512 bytes. Within an
// atom, row i and column j sit at (i % 32) * 16 + (i / 32) * 4 + j (SPEC 4's formula).
struct SwizzledScales {
  int64_t rows;          // rows per matrix (1 for a 1-D tensor)
  int64_t cols;          // scale columns per row
  int64_t col_atoms;     // ceil(cols / 4)
  int64_t matrix_bytes;  // ceil(rows / 128) * 128 * col_atoms * 4
  bool index_fits_32;    // every scale index and offset < 2^32: 32-bit index math
  // No padding: the swizzled bytes are a permutation of the blocks, and the quantizers walk
  // them in memory order (a warp's 32 one-byte scale stores fill one 32-byte sector instead of
  // touching eight). With padding they walk the blocks in row-major order.
  bool memory_order;
  // The divisors of the index math, for indices < 2^32 (index_fits_32); 1 where they would not
  // fit 32 bits (then only the 64-bit path runs).
  FastDivU32 by_rows, by_cols, by_col_atoms;

  static SwizzledScales make(int64_t rows, int64_t cols, int64_t total_scales) {
    const int64_t col_atoms = (cols + 3) / 4;
    const int64_t matrix_bytes = (rows + 127) / 128 * 128 * col_atoms * 4;
    const bool fits = total_scales < (int64_t{1} << 32) && matrix_bytes < (int64_t{1} << 32);
    const auto divisor = [&](int64_t d) { return FastDivU32::make(fits && d > 0 ? static_cast<uint32_t>(d) : 1); };
    return {rows,
            cols,
            col_atoms,
            matrix_bytes,
            fits,
            rows % 128 == 0 && cols % 4 == 0,
            divisor(rows),
            divisor(cols),
            divisor(col_atoms)};
  }

  // Whether a swizzled matrix has padding bytes (which must be zeroed before the kernels run).
  bool has_padding() const { return rows % 128 != 0 || cols % 4 != 0; }

  // Byte offset of (matrix, row i, column j).
  FP4OPS_HD int64_t offset(int64_t matrix, int64_t i, int64_t j) const {
    return matrix * matrix_bytes + ((i >> 7) * col_atoms + (j >> 2)) * 512 + (i & 31) * 16 + ((i >> 5) & 3) * 4 + (j & 3);
  }

  FP4OPS_HD int64_t offset(int64_t s, int64_t matrix, int64_t i, int64_t j) const { return offset(matrix, i, j); }

  // From the linear index alone: two divisions, in 32 bits when the indices allow (a 64-bit
  // division costs several times more, on the quantizers' per-block path).
  FP4OPS_HD int64_t offset(int64_t s) const {
    int64_t row, matrix;
    if (index_fits_32) {
      const uint32_t row32 = by_cols.div(static_cast<uint32_t>(s));
      row = row32;
      matrix = by_rows.div(row32);
    } else {
      row = s / cols;
      matrix = row / rows;
    }
    return offset(matrix, row - matrix * rows, s - row * cols);
  }

  // The block whose scale sits at byte `item` (memory order; only without padding): SPEC 4's
  // formula inverted, (i % 32) = bits 4..8, (i / 32) % 4 = bits 2..3, j % 4 = bits 0..1, the atom
  // = bits 9 and up. Without padding the matrices' atom rows simply stack (rows is a multiple of
  // 128), so one division by col_atoms gives the global atom row and the matrix drops out.
  FP4OPS_HD int64_t block_at(int64_t item) const {
    if (!memory_order) return item;
    if (index_fits_32) {  // all in 32 bits: this runs once per block on the quantizers' hot path
      const uint32_t o = static_cast<uint32_t>(item);
      const uint32_t atom = o >> 9;
      const uint32_t atom_row = by_col_atoms.div(atom);
      const uint32_t row = atom_row * 128 + ((o >> 2) & 3) * 32 + ((o >> 4) & 31);
      const uint32_t j = (atom - atom_row * static_cast<uint32_t>(col_atoms)) * 4 + (o & 3);
      return row * static_cast<uint32_t>(cols) + j;
    }
    const int64_t atom = item >> 9;
    const int64_t atom_row = atom / col_atoms;
    const int64_t row = atom_row * 128 + ((item >> 2) & 3) * 32 + ((item >> 4) & 31);
    return row * cols + (atom - atom_row * col_atoms) * 4 + (item & 3);
  }

  FP4OPS_HD int64_t scale_at(int64_t item, int64_t block) const { return memory_order ? item : offset(block); }
};

}  // namespace fp4ops
