//! Row-major [`GemmSpec`]s expressed as cuBLAS column-major calls.
//!
//! cuBLAS sees memory column-major, so a row-major `C = A·B` is computed as the column-major
//! `Cᵀ = Bᵀ·Aᵀ`: cuBLAS's "A" is our B, its "B" our A, and its (m, n) our (n, m). Each operand
//! may be stored row-major (col_stride 1) or transposed (row_stride 1, a PyTorch `Linear`
//! weight), which becomes `OP_N` or `OP_T` with the other stride as the leading dimension.
//! Kept free of CUDA types so the mapping is unit-tested on machines without a GPU.

use crate::spec::{GemmSpec, MatLayout};
use crate::{shape_err, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    N,
    T,
}

/// One operand of the column-major call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Operand {
    pub op: Op,
    pub ld: i32,
    /// Element offset of the first matrix.
    pub offset: usize,
    pub batch_stride: i64,
}

/// The column-major call `C' = op(A')·op(B')` with `C'` `[m', n']`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlasCall {
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub batch: i32,
}

fn to_i32(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| shape_err("gemm", format!("{what} = {v} exceeds what cuBLAS accepts (i32)")))
}

/// The column-major matrix `X` (`rows × cols`) whose element `(r, c)` sits at
/// `r·stride_r + c·stride_c`, as an operand: stored column-major (`OP_N`, ld = stride_c) or as
/// the transpose of a column-major `cols × rows` matrix (`OP_T`, ld = stride_r). When `X` has a
/// single column (row) the unused stride is free and any ld ≥ the stored row count is valid.
fn operand(name: &str, rows: usize, cols: usize, stride_r: usize, stride_c: usize, l: &MatLayout) -> Result<Operand> {
    let batch_stride =
        i64::try_from(l.batch_stride).map_err(|_| shape_err("gemm", format!("{name}: batch stride {} too large", l.batch_stride)))?;
    if stride_r == 1 || rows <= 1 {
        let ld = if cols <= 1 { rows.max(1) } else { stride_c };
        if ld >= rows.max(1) {
            return Ok(Operand { op: Op::N, ld: to_i32("leading dimension", ld)?, offset: l.offset, batch_stride });
        }
    }
    if stride_c == 1 || cols <= 1 {
        let ld = if rows <= 1 { cols.max(1) } else { stride_r };
        if ld >= cols.max(1) {
            return Ok(Operand { op: Op::T, ld: to_i32("leading dimension", ld)?, offset: l.offset, batch_stride });
        }
    }
    Err(shape_err("gemm", format!("{name}: strides (row {}, col {}) cannot be expressed as a cuBLAS operand", l.row_stride, l.col_stride)))
}

/// Maps a validated spec. `C' = Cᵀ` is `[n, m]` with `C'(j, i) = C(i, j)`, `A' = Bᵀ` is `[n, k]`,
/// `B' = Aᵀ` is `[k, m]`.
pub(crate) fn blas_call(s: &GemmSpec) -> Result<BlasCall> {
    // Bᵀ(j, p) = B(p, j) at p·row_stride + j·col_stride.
    let a = operand("B", s.n, s.k, s.b.col_stride, s.b.row_stride, &s.b)?;
    // Aᵀ(p, i) = A(i, p) at i·row_stride + p·col_stride.
    let b = operand("A", s.k, s.m, s.a.col_stride, s.a.row_stride, &s.a)?;
    let c = operand("C", s.n, s.m, s.c.col_stride, s.c.row_stride, &s.c)?;
    if c.op != Op::N {
        return Err(shape_err("gemm", "C must be row-major"));
    }
    Ok(BlasCall { m: to_i32("n", s.n)?, n: to_i32("m", s.m)?, k: to_i32("k", s.k)?, a, b, c, batch: to_i32("batch", s.batch)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What cuBLAS computes for a call, on plain slices: column-major, f64.
    fn emulate(call: &BlasCall, a: &[f32], b: &[f32], c: &mut [f64], beta: f64) {
        let at = |o: &Operand, x: &[f32], bi: usize, r: usize, col: usize| -> f64 {
            let base = o.offset + bi * o.batch_stride as usize;
            let idx = match o.op {
                Op::N => r + col * o.ld as usize,
                Op::T => col + r * o.ld as usize,
            };
            x[base + idx] as f64
        };
        for bi in 0..call.batch as usize {
            for i in 0..call.m as usize {
                for j in 0..call.n as usize {
                    let acc: f64 = (0..call.k as usize).map(|p| at(&call.a, a, bi, i, p) * at(&call.b, b, bi, p, j)).sum();
                    let ci = call.c.offset + bi * call.c.batch_stride as usize + i + j * call.c.ld as usize;
                    c[ci] = beta * c[ci] + acc;
                }
            }
        }
    }

    fn direct(s: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f64]) {
        for bi in 0..s.batch {
            for i in 0..s.m {
                for j in 0..s.n {
                    let acc: f64 = (0..s.k)
                        .map(|p| {
                            a[s.a.offset + bi * s.a.batch_stride + i * s.a.row_stride + p * s.a.col_stride] as f64
                                * b[s.b.offset + bi * s.b.batch_stride + p * s.b.row_stride + j * s.b.col_stride] as f64
                        })
                        .sum();
                    let ci = s.c.offset + bi * s.c.batch_stride + i * s.c.row_stride + j;
                    c[ci] = s.beta as f64 * c[ci] + acc;
                }
            }
        }
    }

    /// The mapping reproduces the row-major product for every layout family the kit uses,
    /// including the degenerate single-row/column shapes where cuBLAS's ld rules bite.
    #[test]
    fn column_major_call_equals_row_major_product() {
        let mut specs = Vec::new();
        for &(m, k, n) in &[(1, 1, 1), (1, 5, 7), (3, 1, 4), (4, 6, 1), (17, 33, 65), (2, 712, 128)] {
            specs.push(GemmSpec::linear(m, k, n));
            let mut rm = GemmSpec::linear(m, k, n);
            rm.b = MatLayout::row_major(n + 2).at(3);
            rm.a = MatLayout::row_major(k + 1).at(1);
            rm.c = MatLayout::row_major(n + 4).at(2);
            rm.beta = 1.0;
            specs.push(rm);
            let mut ta = GemmSpec::linear(m, k, n);
            ta.a = MatLayout::transposed(m);
            specs.push(ta);
        }
        specs.push(GemmSpec {
            m: 11,
            n: 11,
            k: 8,
            batch: 3,
            a: MatLayout::row_major(24).batched(8),
            b: MatLayout::transposed(24).batched(8),
            c: MatLayout::row_major(11).batched(121),
            beta: 0.0,
        });
        for s in specs {
            let call = blas_call(&s).unwrap();
            let a_len = s.a.extent(s.m, s.k, s.batch).unwrap() + 1;
            let b_len = s.b.extent(s.k, s.n, s.batch).unwrap() + 1;
            let c_len = s.c.extent(s.m, s.n, s.batch).unwrap() + 1;
            let a: Vec<f32> = (0..a_len).map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0).collect();
            let b: Vec<f32> = (0..b_len).map(|i| ((i * 53 % 97) as f32) / 48.0 - 1.0).collect();
            let c0: Vec<f64> = (0..c_len).map(|i| ((i * 29 % 89) as f64) / 44.0 - 1.0).collect();
            let mut want = c0.clone();
            direct(&s, &a, &b, &mut want);
            let mut got = c0.clone();
            emulate(&call, &b, &a, &mut got, s.beta as f64);
            assert_eq!(got, want, "{s:?} → {call:?}");
            // cuBLAS's own validity rules: ld ≥ the stored row count.
            let rows_a = if call.a.op == Op::N { call.m } else { call.k };
            let rows_b = if call.b.op == Op::N { call.k } else { call.n };
            assert!(call.a.ld >= rows_a.max(1) && call.b.ld >= rows_b.max(1) && call.c.ld >= call.m.max(1), "{call:?}");
        }
    }

    #[test]
    fn refuses_what_cublas_cannot_express() {
        let mut s = GemmSpec::linear(4, 4, 4);
        s.b = MatLayout { offset: 0, row_stride: 1, col_stride: 2, batch_stride: 0 };
        assert!(blas_call(&s).is_err());
    }
}
