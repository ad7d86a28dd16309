//! The int8 ONNX export → Kokoro's release state dicts: a port of `dequantise` and `to_release`
//! in `fixtures/kokoro/int8_to_pth.py` that computes every value with the same f32 (and, for the
//! weight-norm magnitudes, f64) operations in the same order, so the two conversions agree bit for
//! bit; `int8_manifest.json` holds the reference's hashes and every tensor is checked against it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{bail, Context, Result};

use super::onnx::{Array, Graph, FLOAT};

/// Flat `{'bert.embeddings…': array}` in PyTorch names; weight-norm convolutions as
/// `'<path>.weight'` (the export folds weight norm in).
pub type Flat = HashMap<String, Array>;

/// Top-level predictor modules that the export places directly under `/encoder/`.
fn predictor_top(part: &str) -> bool {
    let numbered = |prefix: &str| part.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    numbered("F0.") || numbered("N.") || matches!(part, "shared" | "F0_proj" | "N_proj")
}

/// `'/decoder/decoder/decode.0/conv1/Conv_quant'` → `'decoder.decode.0.conv1'`; `None` (spelled
/// `"None"`, as the reference's f-string does) outside the encoder and decoder.
pub fn module_path(node_name: &str) -> Option<String> {
    let mut parts: Vec<&str> = node_name.split('/').filter(|p| !p.is_empty()).collect();
    parts.pop();
    if parts.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = if parts.len() >= 2 && parts[0] == "decoder" && parts[1] == "decoder" {
        std::iter::once("decoder").chain(parts[2..].iter().copied()).map(str::to_string).collect()
    } else if parts[0] == "encoder" {
        let rest = &parts[1..];
        if rest.first().is_some_and(|p| predictor_top(p)) {
            std::iter::once("predictor").chain(rest.iter().copied()).map(str::to_string).collect()
        } else {
            rest.iter().map(|p| p.to_string()).collect()
        }
    } else {
        return None;
    };
    // ALBERT is unrolled 12x: 'attention_3', 'dense_11' are repeats of 'attention', 'dense'
    for p in parts.iter_mut() {
        if let Some(idx) = p.rfind('_') {
            if idx + 1 < p.len() && p[idx + 1..].bytes().all(|b| b.is_ascii_digit()) {
                p.truncate(idx);
            }
        }
    }
    // nn.Sequential children are exported as '/cnn.0/cnn.0.0/': keep the innermost full name
    let mut merged: Vec<String> = Vec::with_capacity(parts.len());
    for p in parts {
        match merged.last_mut() {
            Some(last) if p.starts_with(&format!("{last}.")) => *last = p,
            _ => merged.push(p),
        }
    }
    Some(merged.join("."))
}

fn named_target(init_name: &str) -> Option<String> {
    if let Some(rest) = init_name.strip_prefix("encoder.") {
        return Some(rest.to_string());
    }
    init_name.strip_prefix("decoder.decoder.").map(|rest| format!("decoder.{rest}"))
}

fn path_or_none(path: &Option<String>) -> &str {
    path.as_deref().unwrap_or("None")
}

/// numpy broadcasting of two shapes (right-aligned, each dimension equal or 1).
fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => bail!("shapes {a:?} and {b:?} do not broadcast"),
        };
    }
    Ok(out)
}

/// Row-major strides of `shape` seen through a broadcast to `out` (0 where broadcast).
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out.len()];
    let mut step = 1;
    for i in (0..shape.len()).rev() {
        let o = i + out.len() - shape.len();
        strides[o] = if shape[i] == 1 { 0 } else { step };
        step *= shape[i];
    }
    strides
}

/// Element-wise `f(a, b)` with numpy broadcasting, one f32 operation per element.
fn binary(a: &Array, b: &Array, f: impl Fn(f32, f32) -> f32) -> Result<Array> {
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let (sa, sb) = (broadcast_strides(&a.shape, &shape), broadcast_strides(&b.shape, &shape));
    let numel: usize = shape.iter().product();
    let mut data = Vec::with_capacity(numel);
    let mut index = vec![0usize; shape.len()];
    let (mut ia, mut ib) = (0usize, 0usize);
    for _ in 0..numel {
        data.push(f(a.data[ia], b.data[ib]));
        // odometer increment, keeping the two flat offsets in step
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            ia += sa[d];
            ib += sb[d];
            if index[d] < shape[d] {
                break;
            }
            ia -= sa[d] * shape[d];
            ib -= sb[d] * shape[d];
            index[d] = 0;
        }
    }
    Ok(Array { shape, data })
}

fn sub(a: &Array, b: &Array) -> Result<Array> {
    binary(a, b, |x, y| x - y)
}

fn mul(a: &Array, b: &Array) -> Result<Array> {
    binary(a, b, |x, y| x * y)
}

fn scalar(v: f32) -> Array {
    Array { shape: vec![], data: vec![v] }
}

/// `m.T` of a 2-D array.
fn transpose2(m: &Array) -> Result<Array> {
    let [rows, cols] = m.shape[..] else { bail!("transpose of a {}-d array", m.shape.len()) };
    let mut data = Vec::with_capacity(m.numel());
    for c in 0..cols {
        for r in 0..rows {
            data.push(m.data[r * cols + c]);
        }
    }
    Ok(Array { shape: vec![cols, rows], data })
}

/// `m[i]` along the first axis.
fn index0(m: &Array, i: usize) -> Result<Array> {
    let Some((&n, rest)) = m.shape.split_first() else { bail!("indexing a 0-d array") };
    if i >= n {
        bail!("index {i} out of range for shape {:?}", m.shape);
    }
    let inner: usize = rest.iter().product();
    Ok(Array { shape: rest.to_vec(), data: m.data[i * inner..(i + 1) * inner].to_vec() })
}

/// Rows in 4 gate blocks of `h`, ONNX order i,o,f,c → PyTorch i,f,g(c),o.
fn reorder_gates(m: &Array, h: usize) -> Result<Array> {
    let rows = m.shape.first().copied().unwrap_or(0);
    if rows != 4 * h {
        bail!("{rows} gate rows, expected 4 × {h}");
    }
    let inner = m.numel() / rows.max(1);
    let mut data = Vec::with_capacity(m.numel());
    for k in [0, 2, 3, 1] {
        data.extend_from_slice(&m.data[k * h * inner..(k + 1) * h * inner]);
    }
    Ok(Array { shape: m.shape.clone(), data })
}

/// `m[a..b]` along a 1-D array.
fn slice1(m: &Array, a: usize, b: usize) -> Result<Array> {
    if m.shape.len() != 1 || b > m.shape[0] || a > b {
        bail!("slice {a}..{b} of shape {:?}", m.shape);
    }
    Ok(Array { shape: vec![b - a], data: m.data[a..b].to_vec() })
}

fn put(out: &mut Flat, name: String, value: Array) -> Result<()> {
    if let Some(existing) = out.get(&name) {
        // np.array_equal: same shape, equal values
        if existing.shape != value.shape || existing.data != value.data {
            bail!("{name}: two different sources");
        }
        return Ok(());
    }
    out.insert(name, value);
    Ok(())
}

fn strip_quantized(name: &str) -> Result<&str> {
    name.strip_suffix("_quantized").with_context(|| format!("quantised weight {name:?} does not end in _quantized"))
}

/// The reference's `dequantise`, node by node in graph order.
pub fn dequantise(g: &Graph) -> Result<Flat> {
    let mut out = Flat::new();
    let mut dq_by_scale: HashMap<&str, &super::onnx::NodeProto> = HashMap::new();
    for n in g.nodes.iter().filter(|n| n.op_type == "DequantizeLinear") {
        if let Some(scale) = n.input.get(1) {
            dq_by_scale.insert(scale, n);
        }
    }
    let input = |n: &super::onnx::NodeProto, i: usize| -> String { n.input.get(i).cloned().unwrap_or_default() };
    let zero_point = |n: &super::onnx::NodeProto, i: usize| -> Result<Array> {
        if n.input.len() > i && g.has(&n.input[i]) {
            g.array(&n.input[i])
        } else {
            Ok(scalar(0.0))
        }
    };
    for n in &g.nodes {
        let path = module_path(&n.name);
        let w_name = input(n, 1);
        match n.op_type.as_str() {
            "MatMulInteger" | "ConvInteger" if g.has(&w_name) => {
                let q = g.array(&w_name)?;
                let zp = zero_point(n, 3)?;
                let scale = g.array(&format!("{}_scale", strip_quantized(&w_name)?))?;
                let w = mul(&sub(&q, &zp)?, &scale).with_context(|| format!("node {}", n.name))?;
                // MatMulInteger: [in, out] with a per-output-column scale; PyTorch wants [out, in]
                let w = if n.op_type == "MatMulInteger" { transpose2(&w)? } else { w };
                put(&mut out, format!("{}.weight", path_or_none(&path)), w)?;
            }
            "ConvTranspose" | "Conv" | "MatMul" if n.input.len() > 1 && g.has(&w_name) => {
                let mut w = g.array(&w_name)?;
                if n.op_type == "MatMul" {
                    if !path.as_deref().is_some_and(|p| p.ends_with("l_linear")) {
                        continue; // STFT bases and other export constants
                    }
                    w = transpose2(&w)?;
                }
                put(&mut out, format!("{}.weight", path_or_none(&path)), w)?;
                if n.input.len() > 2 && g.has(&n.input[2]) {
                    put(&mut out, format!("{}.bias", path_or_none(&path)), g.array(&n.input[2])?)?;
                }
            }
            "DynamicQuantizeLSTM" => {
                let (w, r, b) = (g.array(&input(n, 1))?, g.array(&input(n, 2))?, g.array(&input(n, 3))?);
                let (ws, wz, rs, rz) = (g.array(&input(n, 8))?, g.array(&input(n, 9))?, g.array(&input(n, 10))?, g.array(&input(n, 11))?);
                let h = *r.shape.get(1).with_context(|| format!("{}: recurrence weight of shape {:?}", n.name, r.shape))?;
                let p = path_or_none(&path);
                for (d, suffix) in ["", "_reverse"].into_iter().enumerate() {
                    let w_ih = transpose2(&mul(&sub(&index0(&w, d)?, &index0(&wz, d)?)?, &index0(&ws, d)?)?)?;
                    let w_hh = transpose2(&mul(&sub(&index0(&r, d)?, &index0(&rz, d)?)?, &index0(&rs, d)?)?)?;
                    let bd = index0(&b, d)?;
                    put(&mut out, format!("{p}.weight_ih_l0{suffix}"), reorder_gates(&w_ih, h)?)?;
                    put(&mut out, format!("{p}.weight_hh_l0{suffix}"), reorder_gates(&w_hh, h)?)?;
                    put(&mut out, format!("{p}.bias_ih_l0{suffix}"), reorder_gates(&slice1(&bd, 0, 4 * h)?, h)?)?;
                    put(&mut out, format!("{p}.bias_hh_l0{suffix}"), reorder_gates(&slice1(&bd, 4 * h, 8 * h)?, h)?)?;
                }
            }
            "Gather" if g.has(&input(n, 0)) && input(n, 0).ends_with("_quantized") => {
                let q_name = input(n, 0);
                let base = strip_quantized(&q_name)?;
                let scale_name = format!("{base}_scale");
                let dq = dq_by_scale.get(scale_name.as_str()).with_context(|| format!("no DequantizeLinear uses {scale_name}"))?;
                let zp = if dq.input.len() > 2 { g.array(&dq.input[2])? } else { scalar(0.0) };
                let value = mul(&sub(&g.array(&q_name)?, &zp)?, &g.array(&scale_name)?)?;
                put(&mut out, named_target(base).unwrap_or_else(|| "None".to_string()), value)?;
            }
            _ => {}
        }
    }
    for name in &g.initializer_order {
        let Some(target) = named_target(name) else { continue };
        if name.ends_with("_quantized") || name.ends_with("_scale") || name.ends_with("_zero_point") {
            continue;
        }
        if g.data_type(name) == Some(FLOAT) {
            put(&mut out, target, g.array(name)?)?;
        }
    }
    Ok(out)
}

/// numpy's pairwise summation of f64 (`pairwise_sum_DOUBLE`: blocks of 128 summed with eight
/// accumulators, halves split at a multiple of 8), which `ndarray.sum(axis=1)` applies to each
/// contiguous row; reproduced so the weight-norm magnitudes round exactly as the reference's.
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &x in a {
            res += x;
        }
        res
    } else if n <= 128 {
        let mut r = [0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - n % 8 {
            for (j, acc) in r.iter_mut().enumerate() {
                *acc += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// `np.sqrt((w.astype(np.float64) ** 2).reshape(w.shape[0], -1).sum(axis=1))` per dim-0 slice.
fn slice_norms(w: &Array) -> Vec<f64> {
    let rows = w.shape.first().copied().unwrap_or(1).max(1);
    let inner = w.numel() / rows;
    let mut squares = vec![0f64; inner];
    (0..rows)
        .map(|r| {
            for (s, &x) in squares.iter_mut().zip(&w.data[r * inner..(r + 1) * inner]) {
                let x = f64::from(x);
                *s = x * x;
            }
            // the reduction starts from add's identity, 0.0
            (0.0 + pairwise_sum(&squares)).sqrt()
        })
        .collect()
}

/// One tensor of the release layout, as the manifest lists it.
pub struct Slot {
    pub module: String,
    pub key: String,
    pub shape: Vec<usize>,
}

/// What `to_release` did, for `conversion-report.json`.
#[derive(Default)]
pub struct Report {
    pub direct: usize,
    pub weight_norm_recomputed: usize,
    pub zero_filled: Vec<String>,
    pub zero_channels: BTreeMap<String, String>,
    pub unused: Vec<String>,
}

/// The reference's `to_release`: each slot of the layout filled from `flat`, weight norm split
/// into `weight_g = |W|` per dim-0 slice and `weight_v = W` (an all-zero slice gets g = 0 and
/// v = 1), `bert.pooler.*` (not in the export) zero-filled.
pub fn to_release(flat: &Flat, slots: &[Slot]) -> Result<(Vec<Array>, Report)> {
    let mut report = Report::default();
    let mut used = BTreeSet::new();
    let mut values = Vec::with_capacity(slots.len());
    for slot in slots {
        let bare = slot.key.strip_prefix("module.").with_context(|| format!("{}: key without the module. prefix", slot.key))?;
        let name = format!("{}.{bare}", slot.module);
        let numel: usize = slot.shape.iter().product();
        let value = if name.ends_with(".weight_g") || name.ends_with(".weight_v") {
            let base = &name[..name.len() - 2];
            let w = flat.get(base).with_context(|| format!("{name}: no source for {base}"))?;
            used.insert(base.to_string());
            let norms = slice_norms(w);
            let zero: Vec<bool> = norms.iter().map(|&n| n == 0.0).collect();
            if name.ends_with("_g") {
                report.weight_norm_recomputed += 1;
                let zeros = zero.iter().filter(|&&z| z).count();
                if zeros > 0 {
                    report.zero_channels.insert(base.to_string(), format!("{zeros}/{}", zero.len()));
                }
                if norms.len() != numel {
                    bail!("{name}: {} slice norms cannot take the release shape {:?}", norms.len(), slot.shape);
                }
                Array { shape: slot.shape.clone(), data: norms.iter().map(|&n| n as f32).collect() }
            } else {
                let mut v = w.clone();
                let inner = v.numel() / zero.len().max(1);
                for (r, &z) in zero.iter().enumerate() {
                    if z {
                        v.data[r * inner..(r + 1) * inner].fill(1.0); // g = 0 there; v ≠ 0 keeps g·v/|v| finite
                    }
                }
                v
            }
        } else if let Some(v) = flat.get(&name) {
            used.insert(name.clone());
            report.direct += 1;
            v.clone()
        } else if name.starts_with("bert.pooler.") {
            report.zero_filled.push(name.clone());
            Array { shape: slot.shape.clone(), data: vec![0.0; numel] }
        } else {
            bail!("{name}: not found in the ONNX initialisers");
        };
        if value.shape != slot.shape {
            bail!("{name}: shape {:?}, release layout has {:?}", value.shape, slot.shape);
        }
        values.push(value);
    }
    report.unused = flat.keys().filter(|k| !used.contains(*k)).cloned().collect();
    report.unused.sort();
    Ok((values, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_follow_the_reference_rules() {
        assert_eq!(module_path("/decoder/decoder/decode.0/conv1/Conv_quant").as_deref(), Some("decoder.decode.0.conv1"));
        assert_eq!(module_path("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant").as_deref(), Some("text_encoder.cnn.0.0"));
        assert_eq!(module_path("/encoder/F0.1/pool/ConvTranspose").as_deref(), Some("predictor.F0.1.pool"));
        assert_eq!(
            module_path("/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention_3/dense_11/MatMul_quant").as_deref(),
            Some("bert.encoder.albert_layer_groups.0.albert_layers.0.attention.dense")
        );
        assert_eq!(module_path("/encoder/F0_proj/Conv").as_deref(), Some("predictor.F0_proj"));
        assert_eq!(module_path("/Concat"), None);
        assert_eq!(module_path("/other/x/Conv"), None);
    }

    #[test]
    fn broadcasting_matches_numpy() {
        let q = Array { shape: vec![2, 3], data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0] };
        let col = Array { shape: vec![3], data: vec![1.0, 0.0, -1.0] };
        assert_eq!(sub(&q, &col).expect("broadcast").data, vec![0.0, 2.0, 4.0, 3.0, 5.0, 7.0]);
        assert_eq!(mul(&q, &scalar(2.0)).expect("broadcast").data, vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        let row = Array { shape: vec![2, 1], data: vec![10.0, 20.0] };
        assert_eq!(sub(&q, &row).expect("broadcast").data, vec![-9.0, -8.0, -7.0, -16.0, -15.0, -14.0]);
        assert!(sub(&q, &Array { shape: vec![2], data: vec![0.0; 2] }).is_err());
    }

    #[test]
    fn gates_reorder_from_iofc_to_ifgo() {
        let m = Array { shape: vec![4], data: vec![0.0, 1.0, 2.0, 3.0] }; // i, o, f, c
        assert_eq!(reorder_gates(&m, 1).expect("4 rows").data, vec![0.0, 2.0, 3.0, 1.0]);
    }

    /// numpy's order differs from a running sum: 1e16 + 1 + … loses every 1 in sequence but
    /// not in the pairwise tree (values from `np.sum` on the same arrays).
    #[test]
    fn pairwise_sum_is_numpys() {
        let mut a = vec![1.0f64; 300];
        a[0] = 1e16;
        // np.add.reduce(np.array([1e16] + [1.0] * 299)) == 1.000000000000029e16
        assert_eq!(pairwise_sum(&a), 1.000_000_000_000_029e16);
        let sequential: f64 = a.iter().sum();
        assert_ne!(sequential, pairwise_sum(&a));
        assert_eq!(pairwise_sum(&[0.5; 7]), 3.5);
    }

    fn slot(module: &str, key: &str, shape: &[usize]) -> Slot {
        Slot { module: module.into(), key: key.into(), shape: shape.to_vec() }
    }

    /// Weight norm split as the reference does (g = |W| per output slice, an all-zero slice
    /// g = 0 and v = 1), direct tensors copied, the pooler zero-filled, leftovers reported.
    #[test]
    fn release_layout_splits_weight_norm_and_fills_the_pooler() {
        let mut flat = Flat::new();
        // [2 out, 1 in, 2 k]: slice 0 = (3, 4) → |·| = 5; slice 1 all zero
        flat.insert("decoder.conv.weight".into(), Array { shape: vec![2, 1, 2], data: vec![3.0, 4.0, 0.0, 0.0] });
        flat.insert("decoder.conv.bias".into(), Array { shape: vec![2], data: vec![0.5, -0.5] });
        flat.insert("decoder.unused.weight".into(), scalar(1.0));
        let slots = [
            slot("decoder", "module.conv.weight_g", &[2, 1, 1]),
            slot("decoder", "module.conv.weight_v", &[2, 1, 2]),
            slot("decoder", "module.conv.bias", &[2]),
            slot("bert", "module.pooler.bias", &[3]),
        ];
        let (values, report) = to_release(&flat, &slots).expect("layout");
        assert_eq!(values[0].data, vec![5.0, 0.0]);
        assert_eq!(values[1].data, vec![3.0, 4.0, 1.0, 1.0]);
        assert_eq!(values[2].data, vec![0.5, -0.5]);
        assert_eq!(values[3].data, vec![0.0; 3]);
        assert_eq!((report.direct, report.weight_norm_recomputed), (1, 1));
        assert_eq!(report.zero_channels.get("decoder.conv.weight").map(String::as_str), Some("1/2"));
        assert_eq!(report.unused, vec!["decoder.unused.weight".to_string()]);
    }

    #[test]
    fn a_missing_or_misshapen_tensor_is_named() {
        let mut flat = Flat::new();
        flat.insert("decoder.conv.bias".into(), Array { shape: vec![2], data: vec![0.5, -0.5] });
        let err = to_release(&flat, &[slot("decoder", "module.other.bias", &[2])]).err().expect("missing");
        assert!(err.to_string().contains("decoder.other.bias"), "{err}");
        let err = to_release(&flat, &[slot("decoder", "module.conv.bias", &[3])]).err().expect("misshapen");
        assert!(err.to_string().contains("decoder.conv.bias") && err.to_string().contains("[3]"), "{err}");
    }
}
