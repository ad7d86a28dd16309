//! Intel AMX on the CPU backend: whether the tiles may be used (CPUID and Linux's permission for
//! the tile state, asked once per process) and the tile configuration the kernels share. The
//! kernels are `conv_int8_amx` (`tdpbusd`) and `conv_bf16_amx` (`tdpbf16ps`); stable Rust has no
//! AMX intrinsics, so their tile instructions are inline assembly.

/// Rows of every tile the kernels configure (16 rows × 64 bytes, all eight tiles).
pub(crate) const TILE_ROWS: usize = 16;

/// The first input row that 16 output rows `t..` (`valid` of them real) read at tap `k`, where
/// they read 16 consecutive rows inside the input (stride 1, no padding, all real): then one
/// strided tile load takes them straight from the converted rows. `None` otherwise (the kernels
/// copy the rows first).
pub(crate) fn consecutive_rows(spec: &crate::spec::Conv1dSpec, t: usize, valid: usize, k: usize) -> Option<usize> {
    let p = t * spec.stride + k * spec.dilation;
    (spec.stride == 1 && valid == TILE_ROWS && p >= spec.pad && p + TILE_ROWS - spec.pad <= spec.n).then(|| p - spec.pad)
}

/// Proof that this CPU executes AMX-TILE and AMX-INT8 and that Linux has granted this process
/// the tile state: only [`AmxInt8::detect`] makes one.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(all(target_arch = "x86_64", target_os = "linux")), allow(dead_code))]
pub(crate) struct AmxInt8(());

/// Proof that this CPU executes AMX-TILE and AMX-BF16 and that Linux has granted this process
/// the tile state: only [`AmxBf16::detect`] makes one.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(all(target_arch = "x86_64", target_os = "linux")), allow(dead_code))]
pub(crate) struct AmxBf16(());

/// CPUID leaf 7, subleaf 0, EDX: AMX-BF16, AMX-TILE, AMX-INT8.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const AMX_BF16: u32 = 1 << 22;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const AMX_TILE: u32 = 1 << 24;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const AMX_INT8: u32 = 1 << 25;

/// `Ok(CPUID leaf 7 EDX)` where the tile state is granted to this process, else why not.
/// `F5_CPU_AMX=off` (or `0`) turns the tiles off for the process, to compare against the AVX-512
/// kernels on the same machine.
fn granted() -> Result<u32, &'static str> {
    if std::env::var("F5_CPU_AMX").is_ok_and(|v| v == "off" || v == "0") {
        return Err("AMX turned off by F5_CPU_AMX");
    }
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        use std::sync::OnceLock;
        static GRANTED: OnceLock<Result<u32, &'static str>> = OnceLock::new();
        *GRANTED.get_or_init(x86::request_tiles)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        Err("AMX tiles (used on x86-64 Linux only)")
    }
}

impl AmxInt8 {
    /// `Err(why not)` where the int8 tiles cannot be used.
    pub(crate) fn detect() -> Result<Self, &'static str> {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            let edx = granted()?;
            if edx & AMX_INT8 == 0 {
                return Err("amx-int8");
            }
            Ok(AmxInt8(()))
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        {
            granted().map(|_| unreachable!("no tiles off x86-64 Linux"))
        }
    }
}

impl AmxBf16 {
    /// `Err(why not)` where the bf16 tiles cannot be used.
    pub(crate) fn detect() -> Result<Self, &'static str> {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            let edx = granted()?;
            if edx & AMX_BF16 == 0 {
                return Err("amx-bf16");
            }
            Ok(AmxBf16(()))
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        {
            granted().map(|_| unreachable!("no tiles off x86-64 Linux"))
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::TILE_ROWS;
    use std::arch::asm;
    #[cfg(target_os = "linux")]
    use std::arch::x86_64::*;

    /// Asks Linux for this process's AMX tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
    /// XFEATURE_XTILEDATA)`) after checking CPUID for AMX-TILE (and AVX-512 F, which the
    /// kernels' other passes use); the kernel refuses where the OS does not enable the state.
    /// `Ok(CPUID leaf 7 EDX)`, for the callers to check their own extension.
    #[cfg(target_os = "linux")]
    pub(super) fn request_tiles() -> Result<u32, &'static str> {
        if __cpuid(0).eax < 7 {
            return Err("amx-tile");
        }
        let edx = __cpuid_count(7, 0).edx;
        if edx & super::AMX_TILE == 0 {
            return Err("amx-tile");
        }
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return Err("avx512f");
        }
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let ret: i64;
        // SAFETY: the arch_prctl system call with an integer request and argument; it reads and
        // writes no memory of ours. `syscall` clobbers rcx and r11.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        if ret == 0 {
            Ok(edx)
        } else {
            Err("AMX tile state (Linux refused it to this process)")
        }
    }

    /// The loaded tile configuration (palette 1, all eight tiles 16 rows × 64 bytes), released
    /// when dropped.
    pub(crate) struct Tiles(());

    #[repr(C, align(64))]
    struct Config([u8; 64]);

    impl Tiles {
        /// # Safety
        /// An [`super::AmxInt8`] or [`super::AmxBf16`] exists (the CPU and OS support the
        /// tiles); the configuration stays for this thread until the drop, so nothing may run
        /// in between that uses other tile shapes.
        pub(crate) unsafe fn load() -> Self {
            let mut config = Config([0; 64]);
            config.0[0] = 1;
            for t in 0..8 {
                config.0[16 + 2 * t] = 64;
                config.0[48 + t] = TILE_ROWS as u8;
            }
            // SAFETY: a valid palette-1 configuration, 64 bytes, aligned.
            unsafe { asm!("ldtilecfg [{c}]", c = in(reg) config.0.as_ptr(), options(nostack, readonly)) };
            Tiles(())
        }
    }

    /// Zeroes the four C tiles (tmm0–3).
    ///
    /// # Safety
    /// The tiles configured ([`Tiles::load`]).
    pub(crate) unsafe fn zero_c_tiles() {
        // SAFETY: tile-register writes only.
        unsafe { asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem)) };
    }

    /// One 64-byte step of the 32 × 32 tile, `$op` (`tdpbusd` or `tdpbf16ps`) into the C tiles
    /// tmm0–3: A tiles tmm4–5 of 16 rows at `a[h]` with row strides `lda[h]` bytes, B tiles
    /// tmm6–7 (columns 0–15 and 16–31) of 16 rows at `b` and `b + 16` dwords, rows 128 bytes
    /// apart (the panels' 32 columns).
    macro_rules! tile_step {
        ($name:ident, $op:literal) => {
            /// # Safety
            /// The tiles configured ([`Tiles::load`]); each A tile reads 16 rows of 64 bytes at
            /// `a[h] + i·lda[h]`, B 16 rows of 128 bytes at `b`.
            pub(crate) unsafe fn $name(a: [*const u32; 2], lda: [usize; 2], b: *const u32) {
                // SAFETY: the loads lie inside the operands the caller vouches for.
                unsafe {
                    asm!(
                        "tileloadd tmm4, [{a0} + {lda0}*1]",
                        "tileloadd tmm6, [{b0} + {ldb}*1]",
                        "tileloadd tmm7, [{b1} + {ldb}*1]",
                        concat!($op, " tmm0, tmm4, tmm6"),
                        "tileloadd tmm5, [{a1} + {lda1}*1]",
                        concat!($op, " tmm1, tmm4, tmm7"),
                        concat!($op, " tmm2, tmm5, tmm6"),
                        concat!($op, " tmm3, tmm5, tmm7"),
                        a0 = in(reg) a[0],
                        a1 = in(reg) a[1],
                        b0 = in(reg) b,
                        b1 = in(reg) b.wrapping_add(16),
                        lda0 = in(reg) lda[0],
                        lda1 = in(reg) lda[1],
                        ldb = in(reg) 4 * crate::cpu::bf16::gemm::NR,
                        options(nostack, readonly),
                    );
                }
            }
        };
    }
    tile_step!(step_int8, "tdpbusd");
    tile_step!(step_bf16, "tdpbf16ps");

    /// Stores the four C tiles (tmm0–3) as one row-major 32 × 32 block of 32-bit values at
    /// `out`: tmm0 rows 0–15 columns 0–15, tmm1 columns 16–31, tmm2 and tmm3 rows 16–31.
    ///
    /// # Safety
    /// The tiles configured ([`Tiles::load`]); `out` holds 32 × 32 values.
    pub(crate) unsafe fn store_c_tiles<T>(out: *mut T) {
        const COLS: usize = 32;
        // SAFETY: four tile stores of 16 rows × 64 bytes inside the caller's 4 KiB block.
        unsafe {
            let out = out as *mut u32;
            asm!(
                "tilestored [{o0} + {lds}*1], tmm0",
                "tilestored [{o1} + {lds}*1], tmm1",
                "tilestored [{o2} + {lds}*1], tmm2",
                "tilestored [{o3} + {lds}*1], tmm3",
                o0 = in(reg) out,
                o1 = in(reg) out.add(16),
                o2 = in(reg) out.add(TILE_ROWS * COLS),
                o3 = in(reg) out.add(TILE_ROWS * COLS + 16),
                lds = in(reg) 4 * COLS,
                options(nostack),
            );
        }
    }

    /// The f32 sums of a 32 × 32 tile, row-major, as [`store_c_tiles`] lays out the C tiles.
    #[repr(C, align(64))]
    pub(crate) struct F32Sums([f32; 4 * TILE_ROWS * TILE_ROWS]);

    impl F32Sums {
        pub(crate) fn zero() -> Self {
            F32Sums([0.0; 4 * TILE_ROWS * TILE_ROWS])
        }
    }

    /// Stores the f32 C tiles (tmm0–3) into `acc`, then `out[r·ldy + j] = bias[j] + acc[r][j]`
    /// for `r < rows`, `j < width` (`bias` null: no bias).
    ///
    /// # Safety
    /// The tiles configured ([`Tiles::load`]) and holding f32 sums; AVX-512 F present (every
    /// CPU with AMX has it); `bias` null or `width` values; `out` `(rows − 1)·ldy + width`, with
    /// `rows, width ≤ 32`.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn store_f32_sums(acc: &mut F32Sums, bias: *const f32, out: *mut f32, ldy: usize, rows: usize, width: usize) {
        use std::arch::x86_64::{_mm512_add_ps, _mm512_load_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_setzero_ps};
        const COLS: usize = 2 * TILE_ROWS;
        let lanes = |n: usize| if n >= 16 { 0xFFFFu16 } else { ((1u32 << n) - 1) as u16 };
        // SAFETY: the tile stores write the 4 KiB `acc`; the loads and stores after are masked
        // to `width` columns and `rows` rows.
        unsafe {
            store_c_tiles(acc.0.as_mut_ptr());
            for h in 0..COLS / 16 {
                let m = lanes(width.saturating_sub(16 * h));
                if m == 0 {
                    continue;
                }
                let b = if bias.is_null() { _mm512_setzero_ps() } else { _mm512_maskz_loadu_ps(m, bias.wrapping_add(16 * h)) };
                for r in 0..rows {
                    let f = _mm512_load_ps(acc.0.as_ptr().add(r * COLS + 16 * h));
                    _mm512_mask_storeu_ps(out.add(r * ldy + 16 * h), m, _mm512_add_ps(b, f));
                }
            }
        }
    }

    impl Drop for Tiles {
        fn drop(&mut self) {
            // SAFETY: the tiles were configured by `load`; releasing returns them to init state.
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
        }
    }
}
