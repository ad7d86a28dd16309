//! What a benchmark ran on, and whether the machine was quiet enough to trust the figures.

use std::time::Duration;

/// CPU model, cores seen by this process, and the compiler.
pub fn describe() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let isa = if flags.contains("avx512f") {
        "AVX-512"
    } else if flags.contains("avx2") {
        "AVX2"
    } else {
        "SSE"
    };
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok()))
        .map(|kb| kb / 1048576.0)
        .unwrap_or(0.0);
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{model}, {cores} cores visible, {isa}, {mem_gib:.0} GiB RAM; {rustc}")
}

fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    Some((v.iter().sum(), idle))
}

/// Busy fraction of all CPUs over one second.
pub fn busy_fraction() -> f64 {
    let (Some((t0, i0)), _) = (cpu_times(), std::thread::sleep(Duration::from_secs(1))) else { return 0.0 };
    let Some((t1, i1)) = cpu_times() else { return 0.0 };
    let total = (t1 - t0).max(1) as f64;
    1.0 - (i1 - i0) as f64 / total
}

/// Waits (up to `max_wait`) for the machine to go quiet; returns the last busy fraction seen.
pub fn wait_idle(threshold: f64, max_wait: Duration) -> f64 {
    let start = std::time::Instant::now();
    loop {
        let b = busy_fraction();
        if b < threshold || start.elapsed() > max_wait {
            return b;
        }
        eprintln!("machine {:.0}% busy, waiting for it to go quiet…", b * 100.0);
    }
}
