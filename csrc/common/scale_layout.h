// Where a block scale lives in memory (SPEC 4): the plain row-major "linear" layout, or the
// cuBLAS / tcgen05 128x4 "swizzled" atom that torch._scaled_mm consumes. Kernels are templates
// over the layout, so a quantizer writes swizzled scales directly and a dequantizer reads them
// directly; both index by the linear scale position s = (matrix * rows + row) * cols + col.
#pragma once

#include <cstdint>

#include "fp4_format.h"

namespace fp4ops {

struct LinearScales {
  FP4OPS_HD int64_t offset(int64_t s) const { return s; }
  // Scale s, known to be (matrix, row i, column j): s itself.
  FP4OPS_HD int64_t offset(int64_t s, int64_t, int64_t, int64_t) const { return s; }
};

// Scales of a tensor [..., rows, K] with cols = K / block scale columns per row: each leading
// batch index is one matrix of ceil(rows / 128) x ceil(cols / 4) atoms of 512 bytes. Within an
// atom, row i and column j sit at (i % 32) * 16 + (i / 32) * 4 + j (SPEC 4's formula).
struct SwizzledScales {
  int64_t rows;          // rows per matrix (1 for a 1-D tensor)
  int64_t cols;          // scale columns per row
  int64_t col_atoms;     // ceil(cols / 4)
  int64_t matrix_bytes;  // ceil(rows / 128) * 128 * col_atoms * 4
  bool index_fits_32;    // every linear scale index < 2^32: 32-bit divisions in offset(s)

  static SwizzledScales make(int64_t rows, int64_t cols, int64_t total_scales) {
    const int64_t col_atoms = (cols + 3) / 4;
    return {rows, cols, col_atoms, (rows + 127) / 128 * 128 * col_atoms * 4, total_scales < (int64_t{1} << 32)};
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
      const uint32_t row32 = static_cast<uint32_t>(s) / static_cast<uint32_t>(cols);
      row = row32;
      matrix = row32 / static_cast<uint32_t>(rows);
    } else {
      row = s / cols;
      matrix = row / rows;
    }
    return offset(matrix, row - matrix * rows, s - row * cols);
  }
};

}  // namespace fp4ops
