//! The flow-matching sampler: integrate the DiT's velocity from noise (t = 0) to a mel (t = 1).

use f5_gpukit::Backend;

use crate::model::F5Model;
use crate::{schedule, DitError, TorchGenerator};

/// The fixed-grid ODE solver, as torchdiffeq implements it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Solver {
    /// `y += dt·f(t, y)`: one forward per step (the reference default).
    Euler,
    /// `y += dt·f(t + dt/2, y + dt/2·f(t, y))`: two forwards per step.
    Midpoint,
}

/// Where the starting noise comes from.
#[derive(Clone, Copy, Debug)]
pub enum Noise<'a> {
    /// `torch.manual_seed(seed); torch.randn(frames, mel)`, bit for bit.
    Seed(u64),
    /// Caller-supplied `[frames, mel]`.
    Given(&'a [f32]),
}

/// Sampling settings; the defaults are the reference inference defaults.
///
/// Build with `SampleOptions::default().with_steps(8)`: the struct is `#[non_exhaustive]` so a new
/// setting is not a breaking change.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SampleOptions {
    /// Steps of the ODE (`nfe_step`).
    pub steps: usize,
    /// Classifier-free guidance strength; below 1e-5 only the conditional row runs.
    pub cfg_strength: f32,
    /// Sway sampling coefficient (−1 in the reference); `None` leaves the grid as it is.
    pub sway: Option<f32>,
    /// How each step integrates the velocity (Euler in the reference).
    pub solver: Solver,
    /// Use the pruned EPSS grids for the step counts that have one (5, 6, 7, 10, 12, 16).
    pub use_epss: bool,
}

impl Default for SampleOptions {
    fn default() -> Self {
        SampleOptions { steps: 32, cfg_strength: 2.0, sway: Some(-1.0), solver: Solver::Euler, use_epss: true }
    }
}

setters!(SampleOptions {
    with_steps => steps: usize,
    with_cfg_strength => cfg_strength: f32,
    with_sway => sway: Option<f32>,
    with_solver => solver: Solver,
    with_use_epss => use_epss: bool,
});

impl<B: Backend> F5Model<B> {
    /// Generates `frames` mel frames (`[frames, mel]`, row-major) that continue the reference
    /// mel `cond` (`[ref_frames, mel]`) and speak `ids` (vocabulary ids of reference text +
    /// new text). The reference frames of the result are the reference mel itself, as in the
    /// reference implementation; the caller slices them off. `progress(done, total)` is
    /// called after every forward.
    pub fn sample(
        &self,
        ids: &[u32],
        cond: &[f32],
        frames: usize,
        noise: Noise<'_>,
        opts: &SampleOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<f32>, DitError> {
        let kit = &self.kit;
        let mel = self.config().mel_dim;
        if opts.steps == 0 {
            return Err(DitError::Input("zero sampling steps".into()));
        }
        if !opts.cfg_strength.is_finite() || opts.sway.is_some_and(|s| !s.is_finite()) {
            return Err(DitError::Input("cfg strength and sway must be finite numbers".into()));
        }
        let grid = schedule::time_grid(opts.steps, opts.sway, opts.use_epss);
        let evals: Vec<f32> = match opts.solver {
            Solver::Euler => grid[..opts.steps].to_vec(),
            Solver::Midpoint => grid.windows(2).flat_map(|w| [w[0], w[0] + 0.5 * (w[1] - w[0])]).collect(),
        };
        let cfg = opts.cfg_strength >= 1e-5;
        let mods = self.modulations(&evals)?;
        let mut prep = self.prepare(ids, cond, frames, cfg)?;
        let len = frames * mel;
        let x0 = match noise {
            Noise::Seed(seed) => TorchGenerator::new(seed).randn(len),
            Noise::Given(v) if v.len() == len => v.to_vec(),
            Noise::Given(v) => return Err(DitError::Input(format!("noise has {} values, {frames} frames need {len}", v.len()))),
        };
        let mut x = kit.upload(&x0)?;
        let mut vel = kit.alloc(len)?;
        let mut y_mid = kit.alloc(len)?;
        let total = evals.len();
        let mut done = 0;
        let mut velocity = |step: usize, y: &B::Buf, out: &mut B::Buf, prep: &mut crate::internals::Prepared<B>| -> Result<(), DitError> {
            self.forward(prep, &mods, step, y, None)?;
            if cfg {
                kit.cfg_combine(&prep.pred, len, opts.cfg_strength, out)?;
            } else {
                kit.copy(&prep.pred, 0, out, 0, len)?;
            }
            done += 1;
            progress(done, total);
            Ok(())
        };
        for i in 0..opts.steps {
            let dt = grid[i + 1] - grid[i];
            match opts.solver {
                Solver::Euler => {
                    velocity(i, &x, &mut vel, &mut prep)?;
                }
                Solver::Midpoint => {
                    velocity(2 * i, &x, &mut vel, &mut prep)?;
                    kit.copy(&x, 0, &mut y_mid, 0, len)?;
                    kit.axpy(0.5 * dt, &vel, &mut y_mid, len)?;
                    velocity(2 * i + 1, &y_mid, &mut vel, &mut prep)?;
                }
            }
            kit.axpy(dt, &vel, &mut x, len)?;
        }
        let mut out = kit.download(&x)?;
        out.truncate(len);
        let keep = cond.len().min(len);
        out[..keep].copy_from_slice(&cond[..keep]);
        Ok(out)
    }
}
