//! The ODE's time grid, exactly as `CFM.sample` builds it in float32.

/// Step counts for which the reference uses its Empirically Pruned Step Sampling grid (in 32nds)
/// instead of a uniform one.
fn epss(steps: usize) -> Option<&'static [u8]> {
    Some(match steps {
        5 => &[0, 2, 4, 8, 16, 32],
        6 => &[0, 2, 4, 6, 8, 16, 32],
        7 => &[0, 2, 4, 6, 8, 16, 24, 32],
        10 => &[0, 2, 4, 6, 8, 12, 16, 20, 24, 28, 32],
        12 => &[0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32],
        16 => &[0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32],
        _ => return None,
    })
}

/// `torch.linspace(0, 1, points)` in float32: the first half counts up from 0, the second half
/// down from 1, with the step rounded to f32 — so the grid is symmetric and ends exactly at 1.
fn linspace01(points: usize) -> Vec<f32> {
    if points == 1 {
        return vec![0.0];
    }
    let step = 1.0f32 / (points - 1) as f32;
    let half = points / 2;
    (0..points).map(|i| if i < half { step * i as f32 } else { 1.0 - step * (points - 1 - i) as f32 }).collect()
}

/// `torch.cos(f32(π/2) · k/32)` for k = 0..=32 as PyTorch's CPU kernel returns it (bit patterns).
///
/// Every grid the reference uses by default lies on these 33 points (the 32-step uniform grid
/// and all EPSS grids are multiples of 1/32), and the sway term `cos(·) − 1` cancels most of the
/// cosine's digits, so the one place where PyTorch's vectorised cosine is not correctly rounded
/// (k = 4) moves the grid by 30 ulp. Pinning the kernel's values makes those grids exact; other
/// points use the correctly rounded cosine, at most 1 ulp of the cosine away from PyTorch.
const TORCH_COS_32NDS: [u32; 33] = [
    0x3f800000, 0x3f7fb10f, 0x3f7ec46d, 0x3f7d3aac, 0x3f7b14bf, 0x3f7853f8, 0x3f74fa0b, 0x3f710908, 0x3f6c835e, 0x3f676bd8, 0x3f61c597,
    0x3f5b941a, 0x3f54db31, 0x3f4d9f02, 0x3f45e403, 0x3f3daef9, 0x3f3504f3, 0x3f2beb49, 0x3f226799, 0x3f187fc0, 0x3f0e39d9, 0x3f039c3c,
    0x3ef15ae7, 0x3edae881, 0x3ec3ef15, 0x3eac7cd3, 0x3e94a030, 0x3e78cfc8, 0x3e47c5bc, 0x3e164085, 0x3dc8bd35, 0x3d48fb29, 0xb33bbd2e,
];

fn cos_half_pi_t(t: f32) -> f32 {
    let k = t * 32.0;
    if k.fract() == 0.0 && (0.0..=32.0).contains(&k) {
        return f32::from_bits(TORCH_COS_32NDS[k as usize]);
    }
    ((std::f32::consts::FRAC_PI_2 * t) as f64).cos() as f32
}

/// The `steps + 1` time points, from 0 to 1: the EPSS grid where the reference has one
/// (`use_epss`, its default), else uniform; then sway `t + s·(cos(π/2·t) − 1 + t)`.
///
/// The float32 evaluation order matches the reference op for op: `π/2` rounded to f32 times t,
/// cosine, minus 1, plus t, times s, plus t.
pub fn time_grid(steps: usize, sway: Option<f32>, use_epss: bool) -> Vec<f32> {
    let mut t = match epss(steps).filter(|_| use_epss) {
        Some(k) => k.iter().map(|&v| v as f32 * (1.0 / 32.0)).collect(),
        None => linspace01(steps + 1),
    };
    if let Some(s) = sway {
        for v in t.iter_mut() {
            let c = cos_half_pi_t(*v);
            *v += s * ((c - 1.0) + *v);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_ends_are_exact_and_monotone() {
        for steps in [1, 5, 7, 8, 16, 32, 33] {
            let g = time_grid(steps, Some(-1.0), true);
            assert_eq!(g.len(), steps + 1);
            assert_eq!(g[0], 0.0);
            assert_eq!(*g.last().unwrap(), 1.0, "steps {steps}");
            assert!(g.windows(2).all(|w| w[1] > w[0]));
        }
    }

    #[test]
    fn pinned_cosines_are_within_one_ulp_of_the_true_cosine() {
        for (k, &bits) in TORCH_COS_32NDS.iter().enumerate() {
            let exact = ((std::f32::consts::FRAC_PI_2 * (k as f32 / 32.0)) as f64).cos();
            let ulp = (f32::from_bits(bits).abs() * f32::EPSILON).max(f32::MIN_POSITIVE) as f64;
            assert!((f32::from_bits(bits) as f64 - exact).abs() <= ulp, "k = {k}");
        }
    }

    #[test]
    fn epss_only_for_its_step_counts() {
        assert_eq!(time_grid(5, None, true), vec![0.0, 0.0625, 0.125, 0.25, 0.5, 1.0]);
        assert_eq!(time_grid(5, None, false), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(time_grid(8, None, true), time_grid(8, None, false));
    }
}
